// Checkpoint -> Hugging Face GPT-2 directory (see checkpoint_export.h, docs/safetensors.md).
#include "checkpoint/checkpoint_export.h"

#include <filesystem>
#include <memory>

#include "checkpoint/safetensors_gpt2.h"
#include "core/error.h"
#include "kernels/backend.h"

namespace baton {
namespace {

bool IsOptimizerState(const std::string& name) {
  for (const char* suffix : {".master", ".adam_m", ".adam_v"}) {
    const std::string s = suffix;
    if (name.size() > s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0) {
      return true;
    }
  }
  return false;
}

void CheckGptGraph(const CheckpointReader& checkpoint) {
  const std::vector<std::string>& names = checkpoint.layer_names();
  const int blocks = checkpoint.dims().num_layers;
  bool ok = names.size() == static_cast<size_t>(blocks) + 2 && names.front() == "embedding" &&
            names.back() == "head";
  for (int i = 0; ok && i < blocks; ++i)
    ok = names[static_cast<size_t>(i) + 1] == fmt::format("block.{}", i);
  BATON_CHECK(ok,
              "{}: only a gpt-preset model (embedding, block.0 .. block.{}, head) exports as "
              "GPT-2",
              checkpoint.step_dir(), blocks - 1);
}

}  // namespace

void ExportCheckpointToHf(const CheckpointReader& checkpoint, const std::string& out_dir,
                          DType dtype, std::optional<int64_t> end_of_text_id) {
  BATON_CHECK(IsFloating(dtype), "GPT-2 weights must be f32, f16 or bf16, not {}", Name(dtype));
  CheckGptGraph(checkpoint);
  MemoryLedger ledger;  // conversions are host workspace of this tool, booked like any tensor
  std::unique_ptr<Backend> cpu = MakeCpuBackend(ledger, 1);
  std::vector<SafetensorsFile> files;
  for (int i = 0; i < static_cast<int>(checkpoint.layer_names().size()); ++i) {
    files.push_back(checkpoint.OpenLayer(i));
  }
  NamedTensors tensors;
  for (const SafetensorsFile& file : files) {
    for (const SafetensorsEntry& entry : file.entries()) {
      if (IsOptimizerState(entry.name)) continue;
      const bool use_master = dtype == DType::kF32 && file.Has(entry.name + ".master");
      const std::string source = use_master ? entry.name + ".master" : entry.name;
      Tensor t = Tensor::Empty(cpu->allocator(), entry.shape, dtype, MemCategory::kWorkspace);
      file.CopyTo(source, t, *cpu);
      tensors.emplace_back(Gpt2HfName(entry.name), std::move(t));
    }
  }
  MakeDirectories(out_dir);
  WriteSafetensors((std::filesystem::path(out_dir) / kHfWeightsFileName).string(), tensors,
                   HfMetadata(), cpu.get());
  WriteHfGpt2Config(out_dir, checkpoint.dims(), dtype, end_of_text_id);
}

}  // namespace baton
