// Checkpoint -> Hugging Face GPT-2 or Llama directory (see checkpoint_export.h,
// docs/safetensors.md).
#include "checkpoint/checkpoint_export.h"

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/safetensors_gpt2.h"
#include "checkpoint/safetensors_llama.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace baton {
namespace {

// The parameter an optimizer-state tensor belongs to ("h.0.ln_1.weight.adam_m" ->
// "h.0.ln_1.weight"; 8-bit state's absmax, INT8 scales and pruning masks too); nullopt for a
// parameter's own tensor.
std::optional<std::string> OptimizerStateOf(const std::string& name) {
  for (const char* suffix :
       {".master", ".adam_m", ".adam_v", ".adam_m_absmax", ".adam_v_absmax", ".scale", ".mask"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return name.substr(0, name.size() - s.size());
    }
  }
  return std::nullopt;
}

void CheckGptGraph(const CheckpointReader& checkpoint) {
  const std::vector<std::string>& names = checkpoint.layer_names();
  const int blocks = checkpoint.dims().num_layers;
  bool ok = names.size() == static_cast<size_t>(blocks) + 2 && names.front() == "embedding" &&
            names.back() == "head";
  for (int i = 0; ok && i < blocks; ++i)
    ok = names[static_cast<size_t>(i) + 1] == fmt::format("block.{}", i);
  BATON_CHECK(ok,
              "{}: only a gpt- or llama-preset model (embedding, block.0 .. block.{}, head) "
              "exports to Hugging Face",
              checkpoint.step_dir(), blocks - 1);
}

// Every parameter the checkpoint stores (names in `known`, shapes from `shape_of`), f32 on the
// host: for an f32 export a 16-bit run's fp32 masters, INT8 weights dequantised. A tensor the
// checkpoint should not hold is refused, not exported (a layer file may match its manifest's
// checksum and still be wrong).
template <typename ShapeOf>
std::map<std::string, Tensor> ReadStoredParams(const CheckpointReader& checkpoint,
                                               const std::vector<std::string>& stored_names,
                                               ShapeOf shape_of, DType dtype, Backend& cpu) {
  std::vector<SafetensorsFile> files;
  for (int i = 0; i < static_cast<int>(checkpoint.layer_names().size()); ++i) {
    files.push_back(checkpoint.OpenLayer(i));
  }
  const std::set<std::string> known(stored_names.begin(), stored_names.end());
  std::map<std::string, Tensor> stored;
  for (const SafetensorsFile& file : files) {
    for (const SafetensorsEntry& entry : file.entries()) {
      const std::optional<std::string> state_of = OptimizerStateOf(entry.name);
      BATON_CHECK(known.count(state_of.value_or(entry.name)) == 1,
                  "{}: tensor {} is not a parameter of this {} {} (or its optimizer state); "
                  "refusing to export it",
                  file.path(), entry.name, ToString(checkpoint.dims()),
                  checkpoint.dims().llama() ? "Llama" : "GPT-2");
      if (state_of) continue;
      const bool use_master = dtype == DType::kF32 && file.Has(entry.name + ".master");
      const std::string source = use_master ? entry.name + ".master" : entry.name;
      // The model's shape, not the file's: a layer file may match its checksum and still hold a
      // tensor of another shape (CopyWeightTo refuses the mismatch, naming file and tensor).
      const Shape shape = shape_of(entry.name);
      Tensor t = Tensor::Empty(cpu.allocator(), shape, DType::kF32, MemCategory::kWorkspace);
      Tensor no_scale;
      CopyWeightTo(file, source, t, no_scale, cpu);  // INT8 weights dequantised
      BATON_CHECK(stored.emplace(entry.name, std::move(t)).second,
                  "{}: tensor {} is also in another layer's file; refusing to export it twice",
                  file.path(), entry.name);
    }
  }
  for (const std::string& name : stored_names) {
    BATON_CHECK(stored.count(name) == 1, "{}: no tensor {} in the checkpoint's layer files",
                checkpoint.step_dir(), name);
  }
  return stored;
}

// Every GPT-2 tensor, dense: a shared block's from its group's first block, a low-rank weight
// as U @ V (f32, on the CPU backend).
NamedTensors Gpt2Tensors(const CheckpointReader& checkpoint, DType dtype, Backend& cpu) {
  const ModelDims& dims = checkpoint.dims();
  const std::map<std::string, Tensor> stored = ReadStoredParams(
      checkpoint, StoredGpt2ParamNames(dims),
      [&](const std::string& name) { return Gpt2ParamShape(name, dims); }, dtype, cpu);
  NamedTensors tensors;
  for (const std::string& name : Gpt2ParamNames(dims.num_layers)) {
    const std::string source = StoredGpt2Name(name, dims);
    Tensor dense;
    if (const auto it = stored.find(source); it != stored.end()) {
      dense = it->second;
    } else {
      const Tensor& u = stored.at(source + "_u");
      const Tensor& v = stored.at(source + "_v");
      dense = Tensor::Empty(cpu.allocator(), {u.size(0), v.size(1)}, DType::kF32,
                            MemCategory::kWorkspace);
      cpu.Matmul(u, false, v, false, dense, false);
    }
    Tensor out = Tensor::Empty(cpu.allocator(), dense.shape(), dtype, MemCategory::kWorkspace);
    ConvertFloats(dense.raw(), DType::kF32, out.raw(), dtype, static_cast<size_t>(dense.numel()));
    tensors.emplace_back(Gpt2HfName(name), std::move(out));
  }
  return tensors;
}

// Every Hugging Face Llama tensor, each Baton parameter split and transposed into its parts.
NamedTensors LlamaTensors(const CheckpointReader& checkpoint, DType dtype, Backend& cpu) {
  const ModelDims& dims = checkpoint.dims();
  BATON_CHECK(!dims.shares() && dims.low_rank_attn == 0 && dims.low_rank_mlp == 0,
              "{}: exporting a shared or low-rank Llama ({}) is not supported; only dense Llamas "
              "export",
              checkpoint.step_dir(), ToString(dims));
  const std::vector<std::string> names = LlamaParamNames(dims);
  const std::map<std::string, Tensor> stored = ReadStoredParams(
      checkpoint, names, [&](const std::string& name) { return LlamaParamShape(name, dims); },
      dtype, cpu);
  NamedTensors tensors;
  for (const std::string& name : names) {
    for (auto& t : LlamaHfTensorsOf(name, stored.at(name), dims, dtype, cpu.allocator())) {
      tensors.push_back(std::move(t));
    }
  }
  return tensors;
}

}  // namespace

void ExportCheckpointToHf(const CheckpointReader& checkpoint, const std::string& out_dir,
                          DType dtype, std::optional<int64_t> end_of_text_id,
                          std::optional<int64_t> begin_of_text_id) {
  const bool llama = checkpoint.dims().llama();
  BATON_CHECK(IsFloating(dtype), "{} weights must be f32, f16 or bf16, not {}",
              llama ? "Llama" : "GPT-2", Name(dtype));
  CheckGptGraph(checkpoint);
  MemoryLedger ledger;  // conversions are host workspace of this tool, booked like any tensor
  std::unique_ptr<Backend> cpu = MakeCpuBackend(ledger, 1);
  const NamedTensors tensors =
      llama ? LlamaTensors(checkpoint, dtype, *cpu) : Gpt2Tensors(checkpoint, dtype, *cpu);
  MakeDirectories(out_dir);
  WriteSafetensors((std::filesystem::path(out_dir) / kHfWeightsFileName).string(), tensors,
                   HfMetadata(), cpu.get());
  if (llama) {
    WriteHfLlamaConfig(out_dir, checkpoint.dims(), dtype, begin_of_text_id, end_of_text_id);
  } else {
    WriteHfGpt2Config(out_dir, checkpoint.dims(), dtype, end_of_text_id);
  }
}

}  // namespace baton
