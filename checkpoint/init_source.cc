// model.init_from's resolution (see init_source.h).
#include "checkpoint/init_source.h"

#include <filesystem>

#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors_llama.h"
#include "core/error.h"

namespace baton {

InitSource ResolveInitSource(const std::string& init_from, const std::string& config_path,
                             bool llama_preset) {
  namespace fs = std::filesystem;
  if (init_from.empty()) return {};
  if (IsHfLlamaFolder(init_from)) return {InitSource::Kind::kHfLlamaFolder, init_from};
  std::error_code error;
  if (!fs::is_directory(init_from, error)) return {InitSource::Kind::kGpt2File, init_from};
  try {
    CheckpointReader::Open(init_from);
    return {InitSource::Kind::kCheckpoint, init_from};
  } catch (const Error& e) {
    if (llama_preset && fs::exists(fs::path(init_from) / "config.json", error)) {
      HfLlamaFolder::Open(init_from);  // names what makes the folder's config.json not a Llama
    }
    const fs::path weights = fs::path(init_from) / "model.safetensors";
    BATON_CHECK(fs::is_regular_file(weights, error), "{}: model.init_from {}: {}", config_path,
                init_from, e.what());
    return {InitSource::Kind::kGpt2File, weights.string()};
  }
}

}  // namespace baton
