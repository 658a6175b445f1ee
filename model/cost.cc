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
          shape.selective_recompute};
}

constexpr int64_t kF32Bytes = 4;

// Bytes of attention probabilities (B,NH,T,T) f32.
int64_t ProbsBytes(const Terms& x) { return x.b * x.nh * x.t * x.t * kF32Bytes; }
// Bytes of one (N,C) activation: the unit of most stash and workspace formulas.
int64_t RowBytes(const Terms& x) { return x.n * x.c * x.a; }
// LayerNorm mean and rstd (N) f32.
int64_t NormStatsBytes(const Terms& x) { return 2 * x.n * kF32Bytes; }

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

bool RangeHoldsTiedPair(const std::vector<LayerSpec>& graph, int first, int last) {
  bool embedding = false;
  bool head = false;
  for (int i = first; i <= last; ++i) {
    embedding |= graph[static_cast<size_t>(i)].kind == LayerKind::kEmbedding;
    head |= graph[static_cast<size_t>(i)].kind == LayerKind::kHead;
  }
  return embedding && head;
}

}  // namespace

int64_t WorkspacePeaks::max() const {
  return std::max({forward, backward, backward_input, backward_weight});
}

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

int64_t ParamBytes(const LayerSpec& spec, const ModelDims& dims, DType param_dtype) {
  return StoredParamCount(spec, dims) * static_cast<int64_t>(SizeOf(param_dtype));
}

int64_t GradBytes(const LayerSpec& spec, const ModelDims& dims) {
  return StoredParamCount(spec, dims) * kF32Bytes;
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
  if (!x.selective) return 0;
  switch (spec.kind) {
    case LayerKind::kEmbedding:
    case LayerKind::kHead:
      return 0;
    case LayerKind::kBlock:  // attention's QK^T and PV, and c_fc
      return 4 * x.b * x.t * x.t * x.c + 8 * x.n * x.c * x.c;
    case LayerKind::kMlpBlock:
      return 8 * x.n * x.c * x.c;
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t StashBytes(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  const int64_t u = RowBytes(x);
  // The MLP sublayer: x, ln (N,C), mean, rstd; fc and gelu (N,4C) unless selective.
  const int64_t mlp = 2 * u + NormStatsBytes(x) + (x.selective ? 0 : 8 * u);
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kBlock:  // attention: x, ln, out (N,C), qkv (N,3C), mean, rstd; probs
      return 6 * u + NormStatsBytes(x) + (x.selective ? 0 : ProbsBytes(x)) + mlp;
    case LayerKind::kMlpBlock:
      return mlp;
    case LayerKind::kHead:  // x, ln (N,C), mean, rstd, logits (N,V)
      return 2 * u + NormStatsBytes(x) + x.n * x.v * x.a;
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t WeightStashBytes(const LayerSpec& spec, const ModelDims& dims,
                         const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  const int64_t u = RowBytes(x);
  // mlp.c_proj (gelu 4u, dy u), mlp.c_fc (ln u, dfc 4u)
  const int64_t mlp = 10 * u;
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return 0;
    case LayerKind::kBlock:  // + attn.c_proj (out u, dx2 u), attn.c_attn (ln u, dqkv 3u)
      return mlp + 6 * u;
    case LayerKind::kMlpBlock:
      return mlp;
    case LayerKind::kHead:  // wte (dlogits (N,V), ln u)
      return x.n * x.v * x.a + u;
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

int64_t OutputBytes(const LayerSpec& spec, const ModelDims& dims, const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  return spec.kind == LayerKind::kHead ? kF32Bytes : RowBytes(x);  // the loss, or (B,T,C)
}

// The peaks follow the allocation order in sublayers.cc and head.cc, in units of u = (N,C):
// attention backward holds dy/dx2 (u, workspace unless deferred) + dout u + dqkv 3u (workspace
// unless deferred), + recomputed probs P and a scratch u under selective; the MLP backward holds
// dgelu 4u + dfc 4u (unless deferred), + recomputed fc 4u and gelu 4u (unless deferred).
WorkspacePeaks WorkspaceBytes(const LayerSpec& spec, const ModelDims& dims,
                              const MicroBatchShape& shape) {
  const Terms x = MakeTerms(dims, shape);
  const int64_t u = RowBytes(x);
  const int64_t p = ProbsBytes(x);
  const bool sel = x.selective;
  const WorkspacePeaks mlp = {sel ? 8 * u : u, sel ? 12 * u : 8 * u, sel ? 8 * u : 4 * u, 0};
  switch (spec.kind) {
    case LayerKind::kEmbedding:
      return {};
    case LayerKind::kBlock: {
      const WorkspacePeaks attn = {sel ? std::max(p, u) : u, sel ? 5 * u + p : 5 * u,
                                   sel ? u + p : u, 0};
      return {std::max(attn.forward, mlp.forward), std::max(attn.backward, mlp.backward),
              std::max(attn.backward_input, mlp.backward_input), 0};
    }
    case LayerKind::kMlpBlock:
      return mlp;
    case LayerKind::kHead:  // dln
      return {0, u, u, 0};
  }
  BATON_FAIL("unknown layer kind {}", static_cast<int>(spec.kind));
}

// ---- sums

int64_t ParamCount(const std::vector<LayerSpec>& graph, const ModelDims& dims) {
  if (graph.empty()) return 0;
  return SumRange(graph, 0, static_cast<int>(graph.size()) - 1,
                  [&](const LayerSpec& s) { return ParamCount(s, dims); });
}

int64_t ParamBytes(const std::vector<LayerSpec>& graph, int first, int last, const ModelDims& dims,
                   DType param_dtype) {
  int64_t total = SumRange(graph, first, last,
                           [&](const LayerSpec& s) { return ParamBytes(s, dims, param_dtype); });
  if (RangeHoldsTiedPair(graph, first, last)) {
    total -= int64_t{dims.vocab_size} * dims.width * static_cast<int64_t>(SizeOf(param_dtype));
  }
  return total;
}

int64_t GradBytes(const std::vector<LayerSpec>& graph, int first, int last, const ModelDims& dims) {
  return SumRange(graph, first, last, [&](const LayerSpec& s) { return GradBytes(s, dims); });
}

int64_t ForwardFlops(const std::vector<LayerSpec>& graph, int first, int last,
                     const ModelDims& dims, const MicroBatchShape& shape) {
  return SumRange(graph, first, last,
                  [&](const LayerSpec& s) { return ForwardFlops(s, dims, shape); });
}

int64_t StashBytes(const std::vector<LayerSpec>& graph, int first, int last, const ModelDims& dims,
                   const MicroBatchShape& shape) {
  return SumRange(graph, first, last,
                  [&](const LayerSpec& s) { return StashBytes(s, dims, shape); });
}

double ModelFlopsPerToken(const std::vector<LayerSpec>& graph, const ModelDims& dims,
                          int64_t seq_len) {
  BATON_CHECK(!graph.empty(), "empty graph");
  const MicroBatchShape shape{1, seq_len, DType::kF32, false};
  const int64_t forward = ForwardFlops(graph, 0, static_cast<int>(graph.size()) - 1, dims, shape);
  return 3.0 * static_cast<double>(forward) / static_cast<double>(seq_len);
}

}  // namespace baton
