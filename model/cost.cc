// The analytic cost model (see cost.h; docs/model.md derives the formulas).
#include "model/cost.h"

#include <algorithm>

#include "core/error.h"

namespace baton {
namespace {

// The quantities every formula uses, in int64.
struct Terms {
  int64_t v, c;     // model: vocabulary, width
  int64_t b, t, n;  // micro-batch: n = b*t rows
  bool selective;
  bool flash;
};

Terms MakeTerms(const ModelDims& dims, const MicroBatchShape& shape) {
  Validate(dims);
  BATON_CHECK(shape.batch_size > 0 && shape.seq_len > 0, "micro-batch shape ({}, {})",
              shape.batch_size, shape.seq_len);
  BATON_CHECK(shape.seq_len <= dims.context, "sequence length {} exceeds the context {}",
              shape.seq_len, dims.context);
  return {dims.vocab_size,
          dims.width,
          shape.batch_size,
          shape.seq_len,
          shape.batch_size * shape.seq_len,
          shape.selective_recompute,
          shape.flash_attention};
}

void CheckRange(const std::vector<LayerSpec>& graph, int first, int last) {
  BATON_CHECK(0 <= first && first <= last && last < static_cast<int>(graph.size()),
              "layer range [{}, {}] outside a graph of {} layers", first, last, graph.size());
}

template <typename Fn>
int64_t SumRange(const std::vector<LayerSpec>& graph, int first, int last, Fn fn) {
  CheckRange(graph, first, last);
  int64_t total = 0;
  for (int i = first; i <= last; ++i) total += fn(graph[static_cast<size_t>(i)]);
  return total;
}

}  // namespace

// ---- parameters

namespace {

// Weight-matrix entries of a linear (in, out): dense in*out, low rank r*(in + out).
int64_t WeightCount(int64_t in, int64_t out, int64_t rank) {
  return rank > 0 ? rank * (in + out) : in * out;
}

// A norm: LayerNorm weight and bias 2C; RMSNorm (Llama) weight C.
int64_t NormParams(const ModelDims& dims) {
  return dims.spec().norm_bias() ? 2 * dims.width : dims.width;
}

// The attention sublayer: ln_1, c_attn (C, Q) weight + Q bias, c_proj weight + C bias; Q = 3C, or
// (NH + 2 KVH) D with grouped-query attention; Llama has no biases.
int64_t AttentionParams(const ModelDims& dims) {
  const int64_t c = dims.width, q = dims.qkv_width(), r = dims.low_rank_attn;
  const int64_t biases = dims.spec().linear_biases ? q + c : 0;
  return NormParams(dims) + WeightCount(c, q, r) + WeightCount(c, c, r) + biases;
}

// The MLP sublayer: ln_2, c_fc (C, F) weight + F bias, c_proj (H, C) weight + C bias; GPT-2
// F = H = 4C, SwiGLU F = 2H; Llama has no biases.
int64_t MlpParams(const ModelDims& dims) {
  const int64_t c = dims.width, f = dims.fc_width(), h = dims.hidden(), r = dims.low_rank_mlp;
  const int64_t biases = dims.spec().linear_biases ? f + c : 0;
  return NormParams(dims) + WeightCount(c, f, r) + WeightCount(h, c, r) + biases;
}

// The block's parameters its share group's first block holds (model.share); 0 for that block.
int64_t SharedParams(const LayerSpec& spec, const ModelDims& dims) {
  if (spec.block_index < 0 || dims.share_leader(spec.block_index) == spec.block_index) return 0;
  int64_t shared = dims.share_mlp ? MlpParams(dims) : 0;
  if (spec.kind == LayerKind::kBlock && dims.share_attention) shared += AttentionParams(dims);
  return shared;
}

}  // namespace

int64_t StoredParamCount(const LayerSpec& spec, const ModelDims& dims) {
  Validate(dims);
  const int64_t v = dims.vocab_size, c = dims.width;
  switch (spec.kind) {
    case LayerKind::kEmbedding:  // wte, and wpe with learned positions
      return v * c + (dims.learned_positions() ? int64_t{dims.context} * c : 0);
    case LayerKind::kBlock:  // dense: 12C^2 + 13C
      return AttentionParams(dims) + MlpParams(dims);
    case LayerKind::kMlpBlock:  // dense: 8C^2 + 7C
      return MlpParams(dims);
    case LayerKind::kHead:
      return NormParams(dims) + v * c;  // ln_f and the tied copy of wte, or lm_head
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t ParamCount(const LayerSpec& spec, const ModelDims& dims) {
  const int64_t stored = StoredParamCount(spec, dims);
  if (spec.kind == LayerKind::kHead && dims.tie_embeddings) {
    return stored - int64_t{dims.vocab_size} * dims.width;
  }
  return stored - SharedParams(spec, dims);
}

int64_t StoredParamCount(const std::vector<LayerSpec>& graph, int first, int last,
                         const ModelDims& dims) {
  CheckRange(graph, first, last);
  int64_t total = 0;
  bool embedding = false;
  for (int i = first; i <= last; ++i) {
    const LayerSpec& spec = graph[static_cast<size_t>(i)];
    total += StoredParamCount(spec, dims);
    if (spec.kind == LayerKind::kEmbedding) embedding = true;
    // The head's wte is the embedding's own tensor when both are in the range (TieEmbedding).
    if (spec.kind == LayerKind::kHead && embedding && dims.tie_embeddings) {
      total -= int64_t{dims.vocab_size} * dims.width;
    }
    // A shared copy whose group has a block earlier in the range shares that one's storage.
    if (spec.block_index > 0 && i > first &&
        dims.share_leader(spec.block_index) != spec.block_index)
      total -= SharedParams(spec, dims);
  }
  return total;
}

// ---- per micro-batch

namespace {

// Forward GEMM FLOPs of the attention sublayer's and the MLP sublayer's linears.
int64_t AttentionLinearFlops(const Terms& x, const ModelDims& dims) {
  const int64_t r = dims.low_rank_attn;
  return 2 * x.n * (WeightCount(x.c, dims.qkv_width(), r) + WeightCount(x.c, x.c, r));
}
int64_t MlpLinearFlops(const Terms& x, const ModelDims& dims) {
  const int64_t r = dims.low_rank_mlp;
  return 2 * x.n * (WeightCount(x.c, dims.fc_width(), r) + WeightCount(dims.hidden(), x.c, r));
}

}  // namespace

int64_t ForwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kBlock:  // dense GEMMs 2N(3C^2 + C^2 + 4C^2 + 4C^2); QK^T and PV 2*2*B*T*T*C
      return AttentionLinearFlops(x, dims) + MlpLinearFlops(x, dims) + 4 * x.b * x.t * x.t * x.c;
    case LayerKind::kMlpBlock:
      return MlpLinearFlops(x, dims);
    case LayerKind::kHead:
      return 2 * x.n * x.c * x.v;
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t BackwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  return 2 * ForwardFlops(spec, dims, shape);
}

int64_t RecomputeFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  // Selective recompute redoes c_fc's forward; a low-rank linear's backward redoes x @ U.
  const int64_t r_mlp = dims.low_rank_mlp, r_attn = dims.low_rank_attn;
  const int64_t c_fc = x.selective ? 2 * x.n * WeightCount(x.c, dims.fc_width(), r_mlp) : 0;
  const int64_t mlp_low_rank = r_mlp > 0 ? 2 * x.n * r_mlp * (x.c + dims.hidden()) : 0;
  const int64_t attn_low_rank = r_attn > 0 ? 2 * x.n * r_attn * (x.c + x.c) : 0;
  switch (spec.kind) {
    case LayerKind::kEmbedding:
    case LayerKind::kHead:
      return 0;
    case LayerKind::kBlock: {  // c_fc; QK^T (flash) or QK^T and PV (materialized, selective)
      const int64_t linears = c_fc + mlp_low_rank + attn_low_rank;
      if (x.flash) return linears + 2 * x.b * x.t * x.t * x.c;
      return linears + (x.selective ? 4 * x.b * x.t * x.t * x.c : 0);
    }
    case LayerKind::kMlpBlock:
      return c_fc + mlp_low_rank;
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

// ---- sums

int64_t ParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims) {
  if (graph.empty()) return 0;
  return SumRange(graph, 0, static_cast<int>(graph.size()) - 1,
                  [&](const LayerSpec& s) { return ParamCount(s, dims); });
}

int64_t ForwardFlops(const std::vector<LayerSpec>& graph, int first, int last,
                     const ModelDims& dims, const MicroBatchShape& shape) {
  return SumRange(graph, first, last,
                  [&](const LayerSpec& s) { return ForwardFlops(s, dims, shape); });
}

double ModelFlopsPerToken(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                          int64_t seq_len) {
  BATON_CHECK(!graph.empty(), "empty graph");
  const MicroBatchShape shape{1, seq_len, DType::kF32, false};
  const int64_t forward = ForwardFlops(graph, 0, static_cast<int>(graph.size()) - 1, dims, shape);
  return 3.0 * static_cast<double>(forward) / static_cast<double>(seq_len);
}

}  // namespace baton
