// Helpers of the Hugging Face import/export tests (safetensors_llama_test.cc,
// safetensors_moe_test.cc): a tiny Llama's dims, experts added to them, a refusal's message, and
// the logits of a folder transformers wrote against the ones it stored.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/safetensors_llama.h"
#include "core/error.h"
#include "kernels/testing/numeric_check.h"
#include "model/graph.h"
#include "worker/stage_tensors.h"

namespace baton::checkpoint_test {

template <typename F>
inline std::string ErrorOf(F action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// V=11, maxT=5, L=2, NH=4, C=16 (D=4), SwiGLU hidden 24, Llama 3 rope scaling.
inline ModelDims TinyLlamaDims(int kv_heads, bool tied) {
  ModelDims dims{11, 5, 2, 4, 16};
  dims.family = ModelFamily::kLlama;
  dims.num_kv_heads = kv_heads;
  dims.mlp_hidden = 24;
  dims.norm_eps = 1e-5f;
  dims.rope = {500000.0, 8.0, 1.0, 4.0, 64};
  dims.tie_embeddings = tied;
  return dims;
}

// Experts in every block of `dims` (3 of width 8, two per token), as a Mixtral has them, or with
// a gated shared expert of width 12 as a Qwen2-MoE.
inline void AddExperts(ModelDims& dims, bool shared) {
  dims.moe.num_experts = 3;
  dims.moe.top_k = 2;
  dims.moe.expert_hidden = 8;
  if (shared) {
    dims.moe.shared_experts = 1;
    dims.moe.shared_hidden = 12;
    dims.moe.shared_gate = true;
    dims.moe.norm_topk_prob = false;
  }
}

// The logits of `folder` (loaded as model.init_from loads it: InitFromHfLlama) for the fixture's
// input_ids, against the ones transformers stored: the normalised error. Baton's CPU forward in
// f32; the two differ by summation order only.
inline double ErrorAgainstTransformers(const std::string& dir, const nlohmann::json& reference,
                                       const std::function<void(const ModelDims&)>& check_dims) {
  const auto ids = reference["input_ids"].get<std::vector<std::vector<int32_t>>>();
  const int64_t batch = static_cast<int64_t>(ids.size());
  const int64_t seq = static_cast<int64_t>(ids[0].size());
  HfLlamaFolder folder = HfLlamaFolder::Open(dir);
  Fixture f;
  f.dims = DimsOfHfLlama(folder.config(), seq);
  f.graph = GptGraph(f.dims);
  check_dims(f.dims);
  ValidateHfLlamaFolder(folder, f.dims);
  Rank whole = f.MakeRank({{0, f.last_layer()}}, 0, 1, DType::kF32, /*seed=*/5);
  InitFromHfLlama(folder, f.dims, whole.model->params(), whole.optimizer.get(), *f.backend);
  std::vector<int32_t> tokens;
  for (const auto& row : ids) tokens.insert(tokens.end(), row.begin(), row.end());
  std::vector<int32_t> targets(tokens.size(), 0);
  MicroBatch micro;
  micro.tokens = Tensor::Wrap(tokens.data(), {batch, seq}, DType::kI32);
  micro.targets = Tensor::Wrap(targets.data(), {batch, seq}, DType::kI32);
  std::vector<Stash> stashes(whole.model->layers().size());
  Tensor x;
  size_t i = 0;
  for (auto& [index, layer] : whole.model->layers()) x = layer->Forward(x, micro, stashes[i++]);
  const Tensor& logits = stashes.back().Get("logits");  // (B*T, V)
  std::vector<float> expected;
  for (const auto& row : reference["logits"]) {
    for (const auto& position : row) {
      for (const auto& v : position) expected.push_back(v.get<float>());
    }
  }
  EXPECT_EQ(logits.numel(), static_cast<int64_t>(expected.size()));
  if (logits.numel() != static_cast<int64_t>(expected.size())) return 1.0;
  const std::span<const float> got(logits.data<float>(), expected.size());
  EXPECT_GT(numeric_check::NormalisedError(got, std::vector<float>(expected.size(), 0.0f)), 0.5);
  return numeric_check::NormalisedError(got, expected);
}

// The folder `dir` loaded as model.init_from loads it and exported again into `out` (ExportHfLlama:
// config.json and model.safetensors); returns the model's dims (context `context`).
inline ModelDims LoadAndExport(const std::string& dir, int64_t context, const std::string& out) {
  HfLlamaFolder folder = HfLlamaFolder::Open(dir);
  Fixture f;
  f.dims = DimsOfHfLlama(folder.config(), context);
  f.graph = GptGraph(f.dims);
  Rank whole = f.MakeRank({{0, f.last_layer()}}, 0, 1);
  LoadLlamaParamsFromHf(folder, f.dims, whole.param_tensors(), *f.backend);
  ExportHfLlama(out, whole.param_tensors(), f.dims, *f.backend);
  return f.dims;
}

}  // namespace baton::checkpoint_test
