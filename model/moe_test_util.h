// Fixtures of the mixture-of-experts layer tests (test-only; model/moe_test.cc,
// model/expert_parallel_test.cc): tiny MoE dims and their variants, and a layer built with random
// parameters, inputs and a routing bias off zero.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/random.h"
#include "model/dims.h"
#include "model/graph.h"
#include "model/test_util.h"

namespace baton::moe_test {

inline MoeDims Experts(int num_experts, int top_k) {
  MoeDims moe;
  moe.num_experts = num_experts;
  moe.top_k = top_k;
  moe.expert_hidden = 4;
  return moe;
}

inline constexpr int64_t kBatch = 2;
inline constexpr int64_t kSeq = 4;

// V=11, T=6, L=2, NH=4, C=16, Llama blocks, 4 experts of width 6, two per token.
inline ModelDims MoeModel(bool shared = true, bool gate = true) {
  ModelDims dims{11, 6, 2, 4, 16};
  dims.family = ModelFamily::kLlama;
  dims.num_kv_heads = 2;
  dims.mlp_hidden = 12;
  dims.rope.theta = 10000.0;
  dims.moe = Experts(4, 2);
  dims.moe.expert_hidden = 6;
  if (shared) {
    dims.moe.shared_experts = 1;
    dims.moe.shared_hidden = 5;
    dims.moe.shared_gate = gate;
  }
  return dims;
}

inline LayerSpec SpecOf(LayerKind kind, const ModelDims& dims) {
  for (const LayerSpec& spec : kind == LayerKind::kMlpBlock ? MlpGraph(dims) : GptGraph(dims)) {
    if (spec.kind == kind) return spec;
  }
  BATON_FAIL("no {} in the graph", Name(kind));
}

struct MoeCase {
  model_test::CpuFixture fx;
  ModelDims dims;
  std::unique_ptr<Layer> layer;
  MicroBatch batch;
  Tensor x, r;

  MoeCase(LayerKind kind, const ModelDims& d) : dims(d) {
    layer = BuildLayer(SpecOf(kind, dims), dims, *fx.backend, DType::kF32, DType::kF32, 4321);
    Rng rng(11);
    batch = model_test::RandomBatch(fx.allocator(), kBatch, kSeq, dims.vocab_size, rng);
    x = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
    r = model_test::RandomActivation(fx.allocator(), {kBatch, kSeq, dims.width}, DType::kF32, rng);
    Rng params(99);
    model_test::RandomizeParams(*layer, params, 0.3f);
    // sigmoid_bias: a bias off zero, unequal across the experts (rate 0.25: +-0.25 a step).
    layer->UpdateRoutingBias({8, 0, 0, 0});
    layer->UpdateRoutingBias({0, 0, 8, 0});
  }
  std::vector<float> Bias() {
    const Tensor bias = layer->routing_bias().values;
    if (!bias.defined()) return {};
    return {bias.data<float>(), bias.data<float>() + bias.numel()};
  }
  std::map<std::string, const float*> Params() {
    std::map<std::string, const float*> out;
    for (Param* p : layer->params())
      out[p->name.substr(p->name.find('.', 2) + 1)] = p->value.data<float>();
    return out;
  }
};

// The variants every layer test runs: shared experts with and without their gate, raw top-k
// weights, topk_softmax, a capacity that drops, top-1, sigmoid_bias with a bias off zero.
inline std::vector<ModelDims> Variants() {
  std::vector<ModelDims> out;
  out.push_back(MoeModel());
  ModelDims raw = MoeModel(true, false);
  raw.moe.norm_topk_prob = false;
  out.push_back(raw);
  ModelDims topk_softmax = MoeModel(false);
  topk_softmax.moe.router = MoeDims::Router::kTopkSoftmax;
  out.push_back(topk_softmax);
  ModelDims capacity = MoeModel();
  capacity.moe.capacity_factor = 0.75;  // 3 rows per expert of 8 tokens x 2 choices: drops
  out.push_back(capacity);
  ModelDims top1 = MoeModel(false);
  top1.moe.top_k = 1;
  out.push_back(top1);
  ModelDims sigmoid = MoeModel(true, false);
  sigmoid.moe.router = MoeDims::Router::kSigmoidBias;
  sigmoid.moe.bias_update_rate = 0.25;
  out.push_back(sigmoid);
  return out;
}

}  // namespace baton::moe_test
