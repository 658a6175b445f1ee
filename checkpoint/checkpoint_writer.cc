// Writing a training checkpoint: per-layer files on every rank, then the manifest on rank 0
// (see checkpoint.h, docs/checkpoints.md).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sparse.h"
#include "core/error.h"
#include "core/files.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string Join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// One layer's file before it is written: the tensors, and the host buffers that packed (sparse)
// tensors point into.
struct LayerFileContents {
  NamedTensors tensors;
  SafetensorsMetadata metadata;
  std::vector<std::vector<std::byte>> buffers;
};

// `t` (any device) as a host tensor holding only the elements `keep` marks, in order.
Tensor Packed(const Tensor& t, const std::vector<uint8_t>& keep, int64_t kept, Backend& backend,
              std::vector<std::vector<std::byte>>& buffers) {
  const size_t element = SizeOf(t.dtype());
  std::vector<std::byte> dense(t.nbytes());
  Tensor host = Tensor::Wrap(dense.data(), t.shape(), t.dtype());
  backend.Copy(t, host);
  backend.Synchronize();
  std::vector<std::byte>& packed = buffers.emplace_back(static_cast<size_t>(kept) * element);
  size_t j = 0;
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] == 0) continue;
    std::memcpy(packed.data() + j * element, dense.data() + i * element, element);
    ++j;
  }
  return Tensor::Wrap(packed.data(), {kept}, t.dtype());
}

// The tensors of one layer's file: each stored param with its optimizer state (or, for a
// weights-only checkpoint, without); a param with a pruning mask stored sparsely
// (checkpoint/sparse.h).
LayerFileContents FileTensors(const LayerTensors& layer, CheckpointContents contents,
                              Backend& backend) {
  LayerFileContents file;
  for (const ParamTensors& p : layer.params) {
    if (p.tied) continue;  // the embedding's file carries wte
    NamedTensors own;
    own.emplace_back(p.name, p.value);
    if (p.scale.defined()) own.emplace_back(p.name + ".scale", p.scale);
    if (contents == CheckpointContents::kTraining) {
      BATON_CHECK(p.adam_m.defined() && p.adam_v.defined(),
                  "layer {} ({}): parameter {} comes without its optimizer state", layer.index,
                  layer.name, p.name);
      if (p.master.defined()) own.emplace_back(p.name + ".master", p.master);
      own.emplace_back(p.name + ".adam_m", p.adam_m);
      own.emplace_back(p.name + ".adam_v", p.adam_v);
      if (p.adam_m_absmax.defined()) {
        own.emplace_back(p.name + ".adam_m_absmax", p.adam_m_absmax);
        own.emplace_back(p.name + ".adam_v_absmax", p.adam_v_absmax);
      }
    }
    if (p.mask.defined()) {
      BATON_CHECK(!p.scale.defined(), "parameter {}: pruned INT8 weights are not stored", p.name);
      std::vector<uint8_t> keep(static_cast<size_t>(p.mask.numel()));
      Tensor host = Tensor::Wrap(keep.data(), p.mask.shape(), DType::kU8);
      backend.Copy(p.mask, host);
      backend.Synchronize();
      int64_t kept = 0;
      for (uint8_t k : keep) kept += k != 0 ? 1 : 0;
      const std::vector<std::string> packed = PackedTensorNames(p.name);
      for (auto& [name, tensor] : own) {
        if (std::find(packed.begin(), packed.end(), name) == packed.end()) continue;
        tensor = Packed(tensor, keep, kept, backend, file.buffers);
      }
      std::vector<std::byte>& bits = file.buffers.emplace_back(PackMaskBits(keep));
      own.emplace_back(p.name + kSparseMaskSuffix,
                       Tensor::Wrap(bits.data(), {static_cast<int64_t>(bits.size())}, DType::kU8));
      std::string shape;
      for (int64_t d : p.value.shape()) shape += (shape.empty() ? "" : ",") + std::to_string(d);
      file.metadata[p.name + kDenseShapeSuffix] = shape;
    }
    for (auto& named : own) file.tensors.push_back(std::move(named));
  }
  for (const BufferTensor& b : layer.buffers) file.tensors.emplace_back(b.name, b.value);
  return file;
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
    int64_t step, int rank, const std::vector<LayerTensors>& layers, Backend& backend,
    CheckpointContents contents) const {
  const std::string dir = step_dir(step);
  MakeDirectories(dir);
  // A complete checkpoint of this step from an earlier attempt: its manifest must not vouch for
  // the files about to be replaced.
  RemoveIfPresent(Join(dir, kManifestFileName));
  SyncDirectory(dir);
  std::vector<CheckpointFileEntry> entries;
  for (const LayerTensors& layer : layers) {
    LayerFileContents file = FileTensors(layer, contents, backend);
    SafetensorsMetadata& metadata = file.metadata;
    metadata["format"] = "baton-checkpoint-layer";
    metadata["layer"] = layer.name;
    metadata["layer_index"] = std::to_string(layer.index);
    metadata["step"] = std::to_string(step);
    if (contents == CheckpointContents::kWeightsOnly) metadata["contents"] = "weights";
    const std::string name = LayerFileName(layer.index);
    const WrittenFile written = WriteSafetensors(Join(dir, name), file.tensors, metadata, &backend);
    entries.push_back({name, written.bytes, written.checksum, layer.index, rank});
  }
  return entries;
}

std::vector<std::string> CheckpointWriter::Prune(int64_t newest, int64_t keep_last,
                                                 int64_t keep_every) const {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  int64_t complete = 0;  // seen so far, newest first
  for (const auto& [step, dir] : StepDirs(root_)) {
    if (step > newest) continue;
    const bool has_manifest = FileExists(Join(dir, kManifestFileName));
    if (has_manifest && complete < keep_last) {
      ++complete;
      continue;
    }
    if (complete < keep_last) continue;  // incomplete, but newer than the oldest kept
    if (has_manifest && keep_every > 0 && step % keep_every == 0) continue;
    std::error_code error;
    std::filesystem::remove_all(dir, error);  // a link: the link, not its target
    if (error) {
      spdlog::warn("checkpoint retention: cannot remove {}: {} (left in place)", dir,
                   error.message());
      continue;
    }
    removed.push_back(dir);
  }
  return removed;
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
