// The analytic cost model (see cost.h; docs/model.md derives the formulas).
#include "model/cost.h"

#include <algorithm>

#include "core/error.h"
#include "model/sublayer.h"

namespace baton {
namespace {

// The quantities the head's formula uses, in int64, after checking the shape (a block's
// sublayers count their own: model/sublayer.h).
struct Terms {
  int64_t v, c;  // model: vocabulary, width
  int64_t n;     // micro-batch: b*t rows
};

Terms MakeTerms(const ModelDims& dims, const MicroBatchShape& shape) {
  Validate(dims);
  BATON_CHECK(shape.batch_size > 0 && shape.seq_len > 0, "micro-batch shape ({}, {})",
              shape.batch_size, shape.seq_len);
  BATON_CHECK(shape.seq_len <= dims.context, "sequence length {} exceeds the context {}",
              shape.seq_len, dims.context);
  return {dims.vocab_size, dims.width, shape.batch_size * shape.seq_len};
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

// A norm: LayerNorm weight and bias 2C; RMSNorm (Llama) weight C.
int64_t NormParams(const ModelDims& dims) {
  return dims.spec().norm_bias() ? 2 * dims.width : dims.width;
}

// A block's parameters: its sublayers' (model/sublayer.h), those its share group's first block
// holds (`shared_only`) or all.
int64_t BlockParams(const LayerSpec& spec, const ModelDims& dims, bool shared_only) {
  int64_t count = 0;
  for (const auto& sublayer : SublayersOf(spec.kind, dims, spec.block_index)) {
    if (!shared_only || sublayer->shared()) count += ParamCount(*sublayer);
  }
  return count;
}

// The block's parameters its share group's first block holds (model.share); 0 for that block.
int64_t SharedParams(const LayerSpec& spec, const ModelDims& dims) {
  if (spec.block_index < 0 || dims.share_leader(spec.block_index) == spec.block_index) return 0;
  return BlockParams(spec, dims, /*shared_only=*/true);
}

}  // namespace

int64_t StoredParamCount(const LayerSpec& spec, const ModelDims& dims) {
  Validate(dims);
  const int64_t v = dims.vocab_size, c = dims.width;
  switch (spec.kind) {
    case LayerKind::kEmbedding:  // wte, and wpe with learned positions
      return v * c + (dims.learned_positions() ? int64_t{dims.context} * c : 0);
    case LayerKind::kBlock:     // GPT-2 dense: 12C^2 + 13C
    case LayerKind::kMlpBlock:  // dense: 8C^2 + 7C
      return BlockParams(spec, dims, /*shared_only=*/false);
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

int64_t ForwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kBlock:  // GPT-2 dense GEMMs 2N(3C^2 + C^2 + 4C^2 + 4C^2); QK^T and PV 4BTTC
    case LayerKind::kMlpBlock: {
      int64_t flops = 0;
      for (const auto& sublayer : SublayersOf(spec.kind, dims, spec.block_index)) {
        flops += sublayer->ForwardFlops(shape);
      }
      return flops;
    }
    case LayerKind::kHead:
      return 2 * x.n * x.c * x.v;
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t BackwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  return 2 * ForwardFlops(spec, dims, shape);
}

int64_t RecomputeFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  MakeTerms(dims, shape);  // checks the shape
  int64_t flops = 0;       // the embedding and the head redo nothing
  for (const auto& sublayer : SublayersOf(spec.kind, dims, spec.block_index)) {
    flops += sublayer->RecomputeFlops(shape);
  }
  return flops;
}

// ---- sums

int64_t ParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims) {
  if (graph.empty()) return 0;
  return SumRange(graph, 0, static_cast<int>(graph.size()) - 1,
                  [&](const LayerSpec& s) { return ParamCount(s, dims); });
}

int64_t ExpertParamCount(const LayerSpec& spec, const ModelDims& dims) {
  if (spec.block_index < 0 || !dims.moe_block(spec.block_index)) return 0;
  return int64_t{dims.moe.num_experts} * 3 * dims.width * dims.moe.expert_hidden;
}

int64_t ActiveParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims) {
  int64_t idle = 0;  // the experts a token is not routed to
  for (const LayerSpec& spec : graph) {
    const int64_t experts = ExpertParamCount(spec, dims);
    if (experts > 0)
      idle += experts / dims.moe.num_experts * (dims.moe.num_experts - dims.moe.top_k);
  }
  return ParamCount(graph, dims) - idle;
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
