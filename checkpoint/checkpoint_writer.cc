// Writing a training checkpoint: per-layer files on every rank, then the manifest on rank 0
// (see checkpoint.h, docs/checkpoints.md).
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "core/error.h"
#include "core/files.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string Join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// The tensors of one layer's file: each stored param with its optimizer state.
NamedTensors FileTensors(const LayerTensors& layer) {
  NamedTensors tensors;
  for (const ParamTensors& p : layer.params) {
    if (p.tied) continue;  // the embedding's file carries wte
    BATON_CHECK(p.adam_m.defined() && p.adam_v.defined(),
                "layer {} ({}): parameter {} comes without its optimizer state", layer.index,
                layer.name, p.name);
    tensors.emplace_back(p.name, p.value);
    if (p.master.defined()) tensors.emplace_back(p.name + ".master", p.master);
    tensors.emplace_back(p.name + ".adam_m", p.adam_m);
    tensors.emplace_back(p.name + ".adam_v", p.adam_v);
    if (p.adam_m_absmax.defined()) {
      tensors.emplace_back(p.name + ".adam_m_absmax", p.adam_m_absmax);
      tensors.emplace_back(p.name + ".adam_v_absmax", p.adam_v_absmax);
    }
  }
  return tensors;
}

void RemoveIfPresent(const std::string& path) {
  BATON_CHECK(::unlink(path.c_str()) == 0 || errno == ENOENT, "{}: cannot remove: {}", path,
              std::strerror(errno));
}

// Temporary files ("<name>.tmp.<pid>") left by a save that died; every rank has finished now.
void RemoveStaleTemporaries(const std::string& dir) {
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().find(".tmp.") != std::string::npos) {
      RemoveIfPresent(entry.path().string());
    }
  }
}

void CheckCoversGraph(int64_t step, const std::vector<CheckpointFileEntry>& entries,
                      const std::vector<LayerSpec>& graph) {
  std::map<int, const CheckpointFileEntry*> by_layer;
  std::set<std::string> names;
  for (const CheckpointFileEntry& e : entries) {
    BATON_CHECK(names.insert(e.name).second, "checkpoint step {}: file {} reported twice", step,
                e.name);
    if (e.layer < 0) continue;
    BATON_CHECK(e.layer < static_cast<int>(graph.size()) && e.name == LayerFileName(e.layer),
                "checkpoint step {}: entry {} for layer {} does not fit a {}-layer graph", step,
                e.name, e.layer, graph.size());
    by_layer[e.layer] = &e;
  }
  for (const LayerSpec& spec : graph) {
    BATON_CHECK(by_layer.count(spec.index) == 1, "checkpoint step {}: no rank wrote layer {} ({})",
                step, spec.index, spec.name);
  }
}

}  // namespace

std::string CheckpointWriter::step_dir(int64_t step) const {
  return Join(root_, StepDirName(step));
}

std::vector<CheckpointFileEntry> CheckpointWriter::WriteLayers(
    int64_t step, int rank, const std::vector<LayerTensors>& layers, Backend& backend) const {
  const std::string dir = step_dir(step);
  MakeDirectories(dir);
  // A complete checkpoint of this step from an earlier attempt: its manifest must not vouch for
  // the files about to be replaced.
  RemoveIfPresent(Join(dir, kManifestFileName));
  SyncDirectory(dir);
  std::vector<CheckpointFileEntry> entries;
  for (const LayerTensors& layer : layers) {
    const SafetensorsMetadata metadata = {{"format", "baton-checkpoint-layer"},
                                          {"layer", layer.name},
                                          {"layer_index", std::to_string(layer.index)},
                                          {"step", std::to_string(step)}};
    const std::string name = LayerFileName(layer.index);
    const WrittenFile written =
        WriteSafetensors(Join(dir, name), FileTensors(layer), metadata, &backend);
    entries.push_back({name, written.bytes, written.checksum, layer.index, rank});
  }
  return entries;
}

void CheckpointWriter::WriteManifest(int64_t step, std::vector<CheckpointFileEntry> entries,
                                     const TrainingState& state, const ModelDims& dims,
                                     const std::vector<LayerSpec>& graph) const {
  BATON_CHECK(state.step == step, "checkpoint step {} given the training state of step {}", step,
              state.step);
  CheckCoversGraph(step, entries, graph);
  const std::string dir = step_dir(step);
  MakeDirectories(dir);

  AtomicFileWriter state_file(Join(dir, kStateFileName));
  state_file.Write(ToJson(state).dump(2) + "\n");
  state_file.Commit();
  entries.push_back({kStateFileName, state_file.bytes_written(), state_file.checksum(), -1, -1});
  RemoveStaleTemporaries(dir);

  CheckpointManifest manifest;
  manifest.step = step;
  manifest.dims = dims;
  for (const LayerSpec& spec : graph) manifest.layer_names.push_back(spec.name);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  manifest.files = std::move(entries);
  WriteFileAtomically(Join(dir, kManifestFileName), ToJson(manifest).dump(2) + "\n");
  WriteFileAtomically(Join(root_, kLatestFileName), StepDirName(step) + "\n");
}

}  // namespace baton
