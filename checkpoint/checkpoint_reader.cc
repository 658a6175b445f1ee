// Finding, verifying and loading a training checkpoint (see checkpoint.h, docs/checkpoints.md).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "checkpoint/checkpoint.h"
#include "checkpoint/sparse.h"
#include "core/error.h"
#include "core/files.h"
#include "core/hash.h"
#include "core/json_fields.h"
#include "kernels/quantize.h"

namespace baton {
namespace {

namespace fs = std::filesystem;

std::string Join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

// The JSON of a checkpoint file: text that does not parse is an error naming the file and the
// line and column (ParseJsonFile), never quoting its bytes.
nlohmann::json ReadJsonFile(const std::string& path) { return ParseJsonFile(path); }

bool HasManifest(const std::string& dir) { return FileExists(Join(dir, kManifestFileName)); }

// False too for a path stat cannot resolve (missing, a link loop, a name too long).
bool IsDirectory(const std::string& path) {
  std::error_code error;
  return fs::is_directory(path, error);
}

// The step directory `latest` names, when it names a complete one.
std::optional<std::string> LatestStepDir(const std::string& root) {
  const std::string path = Join(root, kLatestFileName);
  if (!FileExists(path)) return std::nullopt;
  std::string name = ReadFileToString(path);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  if (!ParseStepDirName(name)) {
    spdlog::warn("{}: \"{}\" does not name a step directory; ignoring it", path, name);
    return std::nullopt;
  }
  const std::string dir = Join(root, name);
  if (!HasManifest(dir)) {
    spdlog::warn("{}: names {}, which is not a complete checkpoint; ignoring it", path, dir);
    return std::nullopt;
  }
  return dir;
}

bool IsCheckpointsRoot(const std::string& dir) {
  return FileExists(Join(dir, kLatestFileName)) || !StepDirs(dir).empty();
}

// Picks the step directory to load under `root`, recording the newer ones passed over.
std::string ResolveRoot(const std::string& root, std::vector<std::string>& skipped) {
  const std::vector<std::pair<int64_t, std::string>> dirs = StepDirs(root);
  std::optional<std::string> chosen = LatestStepDir(root);
  if (!chosen) {
    for (const auto& [step, dir] : dirs) {
      if (HasManifest(dir)) {
        chosen = dir;
        break;
      }
    }
  }
  BATON_CHECK(chosen.has_value(), "{}: no complete checkpoint ({} step directories, none with {})",
              root, dirs.size(), kManifestFileName);
  const int64_t chosen_step = *ParseStepDirName(fs::path(*chosen).filename().string());
  for (const auto& [step, dir] : dirs) {
    if (step <= chosen_step) continue;
    skipped.push_back(HasManifest(dir) ? dir + " (complete, but `latest` names an older step)"
                                       : dir + " (incomplete: no manifest.json)");
    spdlog::warn("checkpoint {} skipped", skipped.back());
  }
  return *chosen;
}

// The f32 values of F32 tensor `entry` (a copy: the mapping may not be aligned).
std::vector<float> ReadF32(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  BATON_CHECK(entry.dtype == "F32", "{}: tensor {} is {}, not F32", file.path(), entry.name,
              entry.dtype);
  CheckFinite(file, entry);
  const std::span<const std::byte> bytes = file.Bytes(entry);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());
  return values;
}

// Throws, naming the file and the tensor, when float tensor `entry` holds a negative value: a
// second moment (Adam's v, a running mean of squared gradients) or a block maximum of absolute
// values is never below zero, so the file is damaged or was edited. Resuming from it trained on
// and stopped steps later with a loss that was "not finite", blaming the learning rate.
void CheckNonNegative(const SafetensorsFile& file, const SafetensorsEntry& entry) {
  const std::span<const std::byte> bytes = file.Bytes(entry);
  const size_t width = entry.dtype == "F32"                            ? 4
                       : entry.dtype == "F16" || entry.dtype == "BF16" ? 2
                                                                       : 0;
  if (width == 0) return;  // 8-bit codes: the code book's values are what they are
  int64_t count = 0, first = -1;
  for (size_t i = 0; i * width < bytes.size(); ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, bytes.data() + i * width, width);
    const uint32_t sign = width == 4 ? 0x80000000u : 0x8000u;
    if ((bits & sign) != 0 && (bits & (sign - 1)) != 0 && count++ == 0) {  // -0 is zero
      first = static_cast<int64_t>(i);
    }
  }
  BATON_CHECK(count == 0,
              "{}: tensor {} holds {} negative value(s) (the first at flat index {}), but it is "
              "never negative (Adam's second moment, a running mean of squared gradients, or a "
              "block maximum): the file is damaged or was edited; refusing to load it",
              file.path(), entry.name, count, first);
}

// Copies host values into `dst` (any device) through `backend`.
void CopyFromHost(const void* data, DType dtype, const Shape& shape, Tensor& dst,
                  Backend& backend) {
  const Tensor view = Tensor::Wrap(const_cast<void*>(data), shape, dtype);
  backend.Copy(view, dst);
  backend.Synchronize();
}

// Fills one moment (Adam's m or v) from `name` in `file`. The stored form (f32, or 8-bit codes
// with "<name>_absmax") and the run's form (whether `absmax` is defined) may differ: a run
// resumed with another optimizer.state converts, quantising or dequantising on the host. Every
// stored value must be finite (CopyTo, ReadF32), a block maximum non-negative, and so must a
// second moment (`non_negative`).
void LoadMoment(const SafetensorsFile& file, const std::string& name, const Tensor& moment,
                const Tensor& absmax, const QuantMap& map, bool non_negative, Backend& backend,
                std::set<std::string>& used) {
  const std::string absmax_name = name + "_absmax";
  const bool stored_quantized = file.Has(absmax_name);
  const SafetensorsEntry& entry = file.Get(name);
  BATON_CHECK(entry.shape == moment.shape(), "{}: tensor {} has shape {} but {} was expected",
              file.path(), name, ToString(entry.shape), ToString(moment.shape()));
  if (non_negative) CheckNonNegative(file, entry);
  if (stored_quantized) CheckNonNegative(file, file.Get(absmax_name));
  const int64_t n = moment.numel();
  Tensor m = moment;  // a handle: the copies land in the caller's storage
  if (stored_quantized == absmax.defined()) {
    file.CopyTo(name, m, backend);
    if (stored_quantized) {
      Tensor a = absmax;
      file.CopyTo(absmax_name, a, backend);
    }
  } else if (stored_quantized) {  // 8-bit in the file, f32 in the run
    const SafetensorsEntry& scales = file.Get(absmax_name);
    BATON_CHECK(entry.dtype == "U8" && scales.shape == Shape{QuantBlocks(n)},
                "{}: tensor {} ({} {}) with {} {} is not 8-bit optimizer state", file.path(), name,
                entry.dtype, ToString(entry.shape), absmax_name, ToString(scales.shape));
    const std::span<const std::byte> codes = file.Bytes(entry);
    const std::vector<float> block_max = ReadF32(file, scales);
    std::vector<float> values(static_cast<size_t>(n));
    DequantizeBlocks(reinterpret_cast<const uint8_t*>(codes.data()), block_max.data(), n, map,
                     values.data());
    CopyFromHost(values.data(), DType::kF32, moment.shape(), m, backend);
  } else {  // f32 in the file, 8-bit in the run
    const std::vector<float> values = ReadF32(file, entry);
    std::vector<uint8_t> codes(static_cast<size_t>(n));
    std::vector<float> block_max(static_cast<size_t>(QuantBlocks(n)));
    QuantizeBlocks(values.data(), n, map, codes.data(), block_max.data());
    CopyFromHost(codes.data(), DType::kU8, moment.shape(), m, backend);
    Tensor a = absmax;
    CopyFromHost(block_max.data(), DType::kF32, absmax.shape(), a, backend);
  }
  used.insert(name);
  if (stored_quantized) used.insert(absmax_name);
}

// Fills one param and its optimizer state from `file`, recording the tensor names it used. A
// param without optimizer state (an INT8 inference model) takes its value only; the state stored
// beside it is passed over.
void LoadParam(const SafetensorsFile& file, const ParamTensors& param, Backend& backend,
               std::set<std::string>& used) {
  const std::string& name = param.name;
  const bool has_master = file.Has(name + ".master");
  Tensor value = param.value;  // handles: the copies land in the caller's storage
  Tensor scale = param.scale;
  // An f32 or INT8 param is best made from the f32 master, when stored.
  const bool from_master = has_master && (value.dtype() == DType::kF32 || scale.defined());
  for (std::string& read :
       CopyWeightTo(file, from_master ? name + ".master" : name, value, scale, backend)) {
    used.insert(std::move(read));
  }
  used.insert(name);
  if (file.Has(name + ".scale")) used.insert(name + ".scale");
  if (has_master) used.insert(name + ".master");
  // A pruned param's mask: restored where the run keeps masks (its dense tensors hold the zeros
  // either way); a run keeping masks starts from ones where the file has none.
  const std::string mask_name = name + kSparseMaskSuffix;
  if (file.Has(mask_name)) {
    used.insert(mask_name);
    const SafetensorsEntry& mask = file.Get(mask_name);
    const int64_t n = param.value.numel();
    BATON_CHECK(mask.dtype == "U8" && mask.shape == Shape{(n + 7) / 8},
                "{}: {} is {} {}, but the mask of {} {} is U8 [{}]", file.path(), mask_name,
                mask.dtype, ToString(mask.shape), name, ToString(param.value.shape()), (n + 7) / 8);
  }
  if (param.mask.defined()) {
    std::vector<uint8_t> keep(static_cast<size_t>(param.mask.numel()), 1);
    if (file.Has(mask_name))
      keep = UnpackMaskBits(file.Bytes(file.Get(mask_name)), param.mask.numel());
    Tensor mask = param.mask;
    CopyFromHost(keep.data(), DType::kU8, mask.shape(), mask, backend);
  }
  const bool wants_state = param.adam_m.defined() || param.adam_v.defined();
  if (param.master.defined()) {  // the stored master, or the stored value widened
    Tensor master = param.master;
    Tensor no_scale;
    CopyWeightTo(file, has_master ? name + ".master" : name, master, no_scale, backend);
  }
  if (!wants_state) {
    for (const char* suffix : {".adam_m", ".adam_v", ".adam_m_absmax", ".adam_v_absmax"}) {
      if (file.Has(name + suffix)) used.insert(name + suffix);
    }
    return;
  }
  BATON_CHECK(param.adam_m.defined() && param.adam_v.defined(),
              "parameter {} comes with only part of its optimizer state", name);
  const auto contents = file.metadata().find("contents");
  BATON_CHECK(file.Has(name + ".adam_m") && file.Has(name + ".adam_v"),
              "{}: no optimizer state for {}{}: this checkpoint cannot be resumed", file.path(),
              name,
              contents != file.metadata().end() && contents->second == "weights"
                  ? " (it holds weights only, as baton compress writes them, for baton eval, "
                    "generate and export)"
                  : "");
  LoadMoment(file, name + ".adam_m", param.adam_m, param.adam_m_absmax, SignedQuantMap(),
             /*non_negative=*/false, backend, used);
  LoadMoment(file, name + ".adam_v", param.adam_v, param.adam_v_absmax, UnsignedQuantMap(),
             /*non_negative=*/true, backend, used);
}

}  // namespace

CheckpointReader CheckpointReader::Open(const std::string& dir) {
  CheckpointReader reader;
  std::string step_dir = dir;
  if (!HasManifest(dir)) {
    BATON_CHECK(IsDirectory(dir), "{}: no such checkpoint directory", dir);
    BATON_CHECK(!ParseStepDirName(fs::path(dir).lexically_normal().filename().string()),
                "{}: incomplete checkpoint: no {} (the save did not finish)", dir,
                kManifestFileName);
    std::string root = dir;
    if (!IsCheckpointsRoot(root) && IsDirectory(Join(dir, kCheckpointsDirName))) {
      root = Join(dir, kCheckpointsDirName);
    }
    BATON_CHECK(IsCheckpointsRoot(root),
                "{}: neither a checkpoint (no {}) nor a checkpoints root (no {}, no step-<N> "
                "directories)",
                dir, kManifestFileName, kLatestFileName);
    step_dir = ResolveRoot(root, reader.skipped_);
  }
  reader.step_dir_ = step_dir;
  const std::string manifest_path = Join(step_dir, kManifestFileName);
  CheckpointManifest manifest = ManifestFromJson(ReadJsonFile(manifest_path), manifest_path);
  reader.step_ = manifest.step;
  reader.dims_ = manifest.dims;
  reader.layer_names_ = std::move(manifest.layer_names);
  reader.files_ = std::move(manifest.files);
  for (const CheckpointFileEntry& entry : reader.files_) {
    const std::string path = Join(step_dir, entry.name);
    BATON_CHECK(FileExists(path), "{}: missing (listed in {})", path, manifest_path);
    const uint64_t size = FileSize(path);
    BATON_CHECK(size == entry.bytes, "{}: {} bytes, but {} lists {} (truncated or replaced)", path,
                size, manifest_path, entry.bytes);
  }
  for (size_t i = 0; i < reader.layer_names_.size(); ++i) {
    reader.Entry(LayerFileName(static_cast<int>(i)));
  }
  const CheckpointFileEntry& state_entry = reader.Entry(kStateFileName);
  reader.VerifyFile(state_entry);
  const std::string state_path = Join(step_dir, kStateFileName);
  reader.state_ = TrainingStateFromJson(ReadJsonFile(state_path), state_path);
  BATON_CHECK(reader.state_.step == reader.step_, "{}: step {} but {} says step {}", state_path,
              reader.state_.step, manifest_path, reader.step_);
  return reader;
}

const CheckpointFileEntry& CheckpointReader::Entry(const std::string& name) const {
  for (const CheckpointFileEntry& entry : files_) {
    if (entry.name == name) return entry;
  }
  BATON_FAIL("{}: {} does not list {}", step_dir_, kManifestFileName, name);
}

void CheckpointReader::VerifyFile(const CheckpointFileEntry& entry) const {
  const std::string path = Join(step_dir_, entry.name);
  const uint64_t size = FileSize(path);
  BATON_CHECK(size == entry.bytes, "{}: {} bytes, but the manifest lists {} (truncated?)", path,
              size, entry.bytes);
  const uint64_t checksum = FileChecksum(path);
  BATON_CHECK(checksum == entry.checksum,
              "{}: checksum {} does not match the manifest's {}: the file is corrupt", path,
              HexDigest(checksum), HexDigest(entry.checksum));
}

void CheckpointReader::VerifyAll() const {
  for (const CheckpointFileEntry& entry : files_) VerifyFile(entry);
}

void CheckpointReader::CheckCompatible(const ModelDims& dims,
                                       const std::vector<LayerSpec>& graph) const {
  BATON_CHECK(SameModel(dims, dims_), "{}: the checkpoint's model is {}, this run's is {}",
              step_dir_, ToString(dims_), ToString(dims));
  BATON_CHECK(graph.size() == layer_names_.size(),
              "{}: the checkpoint has {} layers, this run's graph {}", step_dir_,
              layer_names_.size(), graph.size());
  for (const LayerSpec& spec : graph) {
    const std::string& stored = layer_names_.at(static_cast<size_t>(spec.index));
    BATON_CHECK(spec.name == stored, "{}: layer {} is {} in the checkpoint but {} in this run",
                step_dir_, spec.index, stored, spec.name);
  }
}

SafetensorsFile CheckpointReader::OpenLayer(int index) const {
  BATON_CHECK(index >= 0 && index < static_cast<int>(layer_names_.size()),
              "{}: no layer {} in a {}-layer checkpoint", step_dir_, index, layer_names_.size());
  VerifyFile(Entry(LayerFileName(index)));
  SafetensorsFile file = SafetensorsFile::Open(Join(step_dir_, LayerFileName(index)));
  const auto layer = file.metadata().find("layer");
  const std::string& expected = layer_names_[static_cast<size_t>(index)];
  BATON_CHECK(layer != file.metadata().end() && layer->second == expected,
              "{}: holds layer \"{}\", the manifest says \"{}\"", file.path(),
              layer == file.metadata().end() ? "" : layer->second, expected);
  UnpackSparseTensors(file);  // pruned params come back dense
  return file;
}

void CheckpointReader::LoadLayers(const std::vector<LayerTensors>& layers, Backend& backend) const {
  // Storage that a stored param of `layers` fills: a tied copy sharing it needs no load of its own.
  std::set<const void*> filled;
  for (const LayerTensors& layer : layers) {
    for (const ParamTensors& p : layer.params) {
      if (!p.tied) filled.insert(p.value.raw());
    }
  }
  std::map<int, SafetensorsFile> source_files;  // the originals of tied copies held apart
  for (const LayerTensors& layer : layers) {
    BATON_CHECK(layer.index >= 0 && layer.index < static_cast<int>(layer_names_.size()) &&
                    layer.name == layer_names_[static_cast<size_t>(layer.index)],
                "{}: this run's layer {} is {}, which the checkpoint does not hold there",
                step_dir_, layer.index, layer.name);
    const SafetensorsFile file = OpenLayer(layer.index);
    std::set<std::string> used;
    for (const ParamTensors& p : layer.params) {
      if (!p.tied) {
        LoadParam(file, p, backend, used);
        continue;
      }
      if (filled.count(p.value.raw()) == 1) continue;  // shares the original's storage
      auto source = source_files.find(p.source_layer);
      if (source == source_files.end())
        source = source_files.emplace(p.source_layer, OpenLayer(p.source_layer)).first;
      std::set<std::string> ignored;
      LoadParam(source->second, p, backend, ignored);
      filled.insert(p.value.raw());  // a second copy of it here shares this storage
    }
    for (const BufferTensor& b : layer.buffers) {
      BATON_CHECK(file.Has(b.name),
                  "{}: no {}: the checkpoint was written by a run whose {} kept no such state "
                  "(another model.moe.router?)",
                  file.path(), b.name, layer.name);
      Tensor value = b.value;
      file.CopyTo(b.name, value, backend);
      used.insert(b.name);
    }
    for (const SafetensorsEntry& entry : file.entries()) {
      BATON_CHECK(used.count(entry.name) == 1, "{}: tensor {} belongs to no parameter of {}",
                  file.path(), entry.name, layer.name);
    }
  }
}

}  // namespace baton
