// The analytic cost model (see cost.h; docs/model.md derives the formulas).
#include "model/cost.h"

#include <algorithm>

#include "core/error.h"

namespace baton {
namespace {

// The quantities every formula uses, in int64.
struct Terms {
  int64_t v, max_t, c, nh;  // model
  int64_t b, t, n;          // micro-batch: n = b*t rows
  int64_t a;                // bytes per activation element
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
          dims.context,
          dims.width,
          dims.num_heads,
          shape.batch_size,
          shape.seq_len,
          shape.batch_size * shape.seq_len,
          static_cast<int64_t>(SizeOf(shape.act_dtype)),
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

int64_t ParamCount(const LayerSpec& spec, const ModelDims& dims) {
  Validate(dims);
  const int64_t v = dims.vocab_size, c = dims.width;
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return v * c + int64_t{dims.context} * c;  // wte, wpe
    case LayerKind::kBlock:
      return 12 * c * c + 13 * c;  // ln 2C+2C, c_attn 3C^2+3C, c_proj C^2+C, mlp 8C^2+5C
    case LayerKind::kMlpBlock:
      return 8 * c * c + 7 * c;  // ln 2C, c_fc 4C^2+4C, c_proj 4C^2+C
    case LayerKind::kHead:
      return 2 * c;  // ln_f; the tied wte is the embedding's
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t StoredParamCount(const LayerSpec& spec, const ModelDims& dims) {
  const int64_t own = ParamCount(spec, dims);
  if (spec.kind == LayerKind::kHead) return own + int64_t{dims.vocab_size} * dims.width;
  return own;
}

// ---- per micro-batch

int64_t ForwardFlops(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kBlock:  // GEMMs 2N(3C^2 + C^2 + 4C^2 + 4C^2); QK^T and PV 2*2*B*T*T*C
      return 24 * x.n * x.c * x.c + 4 * x.b * x.t * x.t * x.c;
    case LayerKind::kMlpBlock:
      return 16 * x.n * x.c * x.c;
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
  const int64_t c_fc = x.selective ? 8 * x.n * x.c * x.c : 0;
  switch (spec.kind) {
    case LayerKind::kEmbedding:
    case LayerKind::kHead:
      return 0;
    case LayerKind::kBlock:  // c_fc; QK^T (flash) or QK^T and PV (materialized, selective)
      if (x.flash) return c_fc + 2 * x.b * x.t * x.t * x.c;
      return c_fc + (x.selective ? 4 * x.b * x.t * x.t * x.c : 0);
    case LayerKind::kMlpBlock:
      return c_fc;
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
