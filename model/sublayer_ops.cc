// The attention and MLP sublayers' kernels (see sublayer_ops.h).
#include "model/sublayer_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <tuple>

#include "core/error.h"

namespace baton::model_ops {
namespace {

constexpr MemCategory kActivations = MemCategory::kActivations;
constexpr MemCategory kWorkspace = MemCategory::kWorkspace;

// ln (B,T,C) = LayerNorm(x) with its row statistics mean, rstd (N) f32, booked under `category`.
struct NormOutput {
  Tensor ln, mean, rstd;
};
NormOutput LayerNormOf(Backend& backend, const Norm& norm, const Tensor& x, MemCategory category) {
  const int64_t rows = x.size(0) * x.size(1);
  NormOutput o{NewTensor(backend, x.shape(), x.dtype(), category),
               norm.rms ? Tensor() : NewTensor(backend, {rows}, DType::kF32, category),
               NewTensor(backend, {rows}, DType::kF32, category)};
  Tensor ln_rows = Rows(o.ln);
  NormRowsForward(backend, norm, Rows(x), ln_rows, o.mean, o.rstd);
  return o;
}

const Tensor* BiasOf(const Linear& linear) {
  return linear.bias != nullptr ? &linear.bias->value : nullptr;
}

}  // namespace

Tensor NormForward(Backend& backend, const Norm& norm, const Tensor& x, const std::string& prefix,
                   Stash& stash) {
  BATON_CHECK(x.dim() == 3, "sublayer input must be (B,T,C), got {}", x.ToString());
  NormOutput o = LayerNormOf(backend, norm, x, kActivations);
  stash.Put(prefix + "x", x);
  stash.Put(prefix + "ln", o.ln);
  if (o.mean.defined()) stash.Put(prefix + "mean", std::move(o.mean));  // LayerNorm only
  stash.Put(prefix + "rstd", std::move(o.rstd));
  return o.ln;
}

Tensor ResidualNormBackward(Backend& backend, const Norm& norm, const Tensor& dy, const Tensor& dln,
                            const std::string& prefix, const Stash& stash, MemCategory category) {
  Tensor dx = NewTensor(backend, dy.shape(), dy.dtype(), category);
  backend.Copy(dy, dx);
  Tensor dx_rows = Rows(dx);
  const Tensor mean = norm.rms ? Tensor() : stash.Get(prefix + "mean");
  NormRowsBackward(backend, norm, Rows(dln), Rows(stash.Get(prefix + "x")), mean,
                   stash.Get(prefix + "rstd"), dx_rows);
  return dx;
}

Tensor AddResidual(Backend& backend, const Tensor& x, const Tensor& branch) {
  Tensor y = NewTensor(backend, x.shape(), x.dtype(), kActivations);
  backend.Add(x, branch, y);
  return y;
}

Tensor LinearForward(Backend& backend, const Linear& linear, const Tensor& x,
                     MemCategory category) {
  Shape shape = x.shape();
  shape.back() = (linear.weight_v != nullptr ? linear.weight_v : linear.weight)->value.size(1);
  Tensor y = NewTensor(backend, shape, x.dtype(), category);
  Tensor y_rows = Rows(y);
  const Tensor& w = linear.weight->value;
  if (linear.weight_v != nullptr) {  // low rank: h = x @ U (N, r), y = h @ V + b
    Tensor h = NewTensor(backend, {Rows(x).size(0), w.size(1)}, x.dtype(), kWorkspace);
    backend.Matmul(Rows(x), false, w, false, h, false);
    backend.Matmul(h, false, linear.weight_v->value, false, y_rows, false, BiasOf(linear));
    return y;
  }
  if (w.dtype() == DType::kI8) {  // INT8 weights (model/int8_weights.h): dequantised just in time
    Tensor dense = NewTensor(backend, w.shape(), x.dtype(), kWorkspace);
    backend.DequantizeInt8(w, linear.weight->scale, dense);
    backend.Matmul(Rows(x), false, dense, false, y_rows, false, BiasOf(linear));
    return y;
  }
  backend.Matmul(Rows(x), false, w, false, y_rows, false, BiasOf(linear));
  return y;
}

Tensor SumOverTensorGroup(Backend& backend, Tensor partial, TensorGroup* tensor,
                          MemCategory category) {
  if (TensorSize(tensor) == 1) return partial;
  if (tensor->sequence_parallel()) return ScatterSequenceSum(backend, *tensor, partial, category);
  tensor->AllReduceSum(partial);
  return partial;
}

namespace {

// A row-parallel linear (tensor parallelism; LinearForward without a group): this rank's partial
// product x @ W_t, plus the bias on rank 0 only, summed over the group; under sequence
// parallelism, this rank's part of the sequence of that sum (a reduce-scatter).
Tensor RowParallelForward(Backend& backend, const Linear& linear, const Tensor& x,
                          MemCategory category, TensorGroup* tensor) {
  if (TensorSize(tensor) == 1) return LinearForward(backend, linear, x, category);
  Linear partial = linear;
  if (tensor->rank() != 0) partial.bias = nullptr;
  const bool scattered = tensor->sequence_parallel();
  return SumOverTensorGroup(backend,
                            LinearForward(backend, partial, x, scattered ? kWorkspace : category),
                            tensor, category);
}

// The gradient of a column-parallel linear's input: each rank's dx covers its columns only, so
// the group sums them (the conjugate of the forward's identity); under sequence parallelism
// each rank keeps its part of the sequence of the sum (workspace).
Tensor InputGradient(Backend& backend, Tensor dx, TensorGroup* tensor) {
  return SumOverTensorGroup(backend, std::move(dx), tensor, kWorkspace);
}

}  // namespace

Tensor LinearBackward(Backend& backend, const Linear& linear, const Tensor& x, const Tensor& dy,
                      WeightGradSink& sink) {
  BATON_CHECK(linear.weight->value.dtype() != DType::kI8,
              "{} holds INT8 weights, which are for inference (baton eval, baton generate): "
              "training needs the dense checkpoint",
              linear.weight->name);
  Shape shape = dy.shape();
  shape.back() = linear.weight->value.size(0);
  Tensor dx = NewTensor(backend, shape, dy.dtype(), kWorkspace);
  Tensor dx_rows = Rows(dx);
  if (linear.weight_v != nullptr) {
    // Low rank: h = x @ U is recomputed (the forward keeps nothing of it); dV += h^T dy,
    // dh = dy @ V^T, dU += x^T dh, dx = dh @ U^T. h and dh are weight-GEMM operands.
    const Tensor& u = linear.weight->value;
    const int64_t rows = Rows(x).size(0);
    Tensor h = NewTensor(backend, {rows, u.size(1)}, x.dtype(), sink.operand_category());
    backend.Matmul(Rows(x), false, u, false, h, false);
    Tensor dh = NewTensor(backend, {rows, u.size(1)}, dy.dtype(), sink.operand_category());
    backend.Matmul(Rows(dy), false, linear.weight_v->value, true, dh, false);
    backend.Matmul(dh, false, u, true, dx_rows, false);
    sink.Add(*linear.weight_v, h, Rows(dy));
    sink.Add(*linear.weight, Rows(x), dh);
    if (linear.bias != nullptr) backend.BiasBackward(Rows(dy), linear.bias->grad);
    return dx;
  }
  backend.Matmul(Rows(dy), false, linear.weight->value, true, dx_rows, false);
  sink.Add(*linear.weight, Rows(x), Rows(dy));
  if (linear.bias != nullptr) backend.BiasBackward(Rows(dy), linear.bias->grad);
  return dx;
}

namespace {

// (B,T,NH D) of this rank's query heads, from its qkv (B,T,(NH+2KVH)D): attention's output.
Shape HeadsShape(const AttentionParams& params, const Tensor& qkv) {
  const int64_t head_dim = qkv.size(2) / (params.heads.query + 2 * params.heads.kv);
  return {qkv.size(0), qkv.size(1), params.heads.query * head_dim};
}

// Qwen3's q/k norms on qkv (B,T,(NH+2KVH)D) in place: the query heads (the first NH D columns) and
// the key heads (the next KVH D) taken out, each head's D values RMS-normalised with its norm's
// weight, and put back. With a stash, the heads' inputs and row statistics are kept for
// QkNormBackward ("attn.q_in", "attn.q_rstd", "attn.k_in", "attn.k_rstd"); without (inference)
// they are workspace.
void QkNormForward(Backend& backend, const AttentionParams& params, Tensor& qkv, Stash* stash) {
  const int64_t rows = qkv.size(0) * qkv.size(1);
  const int64_t dim = qkv.size(2) / (params.heads.query + 2 * params.heads.kv);
  const MemCategory category = stash != nullptr ? kActivations : kWorkspace;
  int64_t column = 0;
  for (const auto& [norm, heads, name] : {std::tuple{&params.q_norm, params.heads.query, "q"},
                                          std::tuple{&params.k_norm, params.heads.kv, "k"}}) {
    const int64_t cols = heads * dim;
    Tensor in = NewTensor(backend, {rows, cols}, qkv.dtype(), category);
    backend.CopyColumns(qkv, column, in, 0, cols);
    Tensor out = NewTensor(backend, {rows, cols}, qkv.dtype(), kWorkspace);
    Tensor rstd = NewTensor(backend, {rows * heads}, DType::kF32, category);
    Tensor out_heads = out.View({rows * heads, dim});
    NormRowsForward(backend, *norm, in.View({rows * heads, dim}), out_heads, Tensor(), rstd);
    backend.CopyColumns(out, 0, qkv, column, cols);
    if (stash != nullptr) {
      stash->Put(fmt::format("attn.{}_in", name), std::move(in));
      stash->Put(fmt::format("attn.{}_rstd", name), std::move(rstd));
    }
    column += cols;
  }
}

// Its transpose on dqkv (B,T,(NH+2KVH)D) in place: the gradient of the normalised query and key
// heads becomes that of their inputs; the norms' weight gradients accumulate.
void QkNormBackward(Backend& backend, const AttentionParams& params, Tensor& dqkv,
                    const Stash& stash) {
  const int64_t rows = dqkv.size(0) * dqkv.size(1);
  const int64_t dim = dqkv.size(2) / (params.heads.query + 2 * params.heads.kv);
  int64_t column = 0;
  for (const auto& [norm, heads, name] : {std::tuple{&params.q_norm, params.heads.query, "q"},
                                          std::tuple{&params.k_norm, params.heads.kv, "k"}}) {
    const int64_t cols = heads * dim;
    Tensor dout = NewTensor(backend, {rows, cols}, dqkv.dtype(), kWorkspace);
    backend.CopyColumns(dqkv, column, dout, 0, cols);
    Tensor din = NewZeros(backend, {rows, cols}, dqkv.dtype(), kWorkspace);
    Tensor din_heads = din.View({rows * heads, dim});
    NormRowsBackward(backend, *norm, dout.View({rows * heads, dim}),
                     stash.Get(fmt::format("attn.{}_in", name)).View({rows * heads, dim}), Tensor(),
                     stash.Get(fmt::format("attn.{}_rstd", name)), din_heads);
    backend.CopyColumns(din, 0, dqkv, column, cols);
    column += cols;
  }
}

// (B,NH,T,T) over the whole sequence, from qkv (B,T,...).
Shape ProbsShape(const Tensor& qkv, int num_heads) {
  return {qkv.size(0), num_heads, qkv.size(1), qkv.size(1)};
}

// The qkv the multi-head attention kernels read: qkv itself, or with grouped-query attention its
// key/value heads repeated to every query head (B,T,3C), booked as workspace.
Tensor FullQkv(Backend& backend, const AttentionParams& params, const Tensor& qkv) {
  if (!params.heads.grouped()) return qkv;
  const int64_t c = qkv.size(2) / (params.heads.query + 2 * params.heads.kv) * params.heads.query;
  Tensor full = NewTensor(backend, {qkv.size(0), qkv.size(1), 3 * c}, qkv.dtype(), kWorkspace);
  backend.RepeatKv(qkv, params.heads, full);
  return full;
}

// act = gelu(fc), or SwiGLU's silu(gate) * up of fc = [gate | up], booked under `category`.
Tensor ActivationOf(Backend& backend, const MlpParams& params, const Tensor& fc,
                    MemCategory category) {
  Shape shape = fc.shape();
  if (params.swiglu) shape.back() /= 2;
  Tensor act = NewTensor(backend, shape, fc.dtype(), category);
  if (params.swiglu) {
    backend.SwiGluForward(fc, act);
  } else {
    backend.GeluForward(fc, act);
  }
  return act;
}

// The first key each query attends, as the attention kernels take it (Backend::AttentionForward's
// segment_starts): the document's first position (packed documents) or 0, raised to t - W + 1
// under a sliding window of W. segment_starts itself where no window binds (W = 0 or W >= T);
// otherwise a (B,T) i32 workspace tensor, made on the host (a GPU's segment starts read back
// first) and copied to the backend. Rotary positions keep segment_starts: only what a query sees
// narrows.
Tensor AttentionStarts(Backend& backend, const Tensor& segment_starts, int64_t batch, int64_t seq,
                       int window) {
  if (window <= 0 || window >= seq) return segment_starts;
  Tensor starts = NewTensor(backend, {batch, seq}, DType::kI32, kWorkspace);
  if (starts.is_meta()) return starts;  // a ledger-only backend: the booking is what counts
  std::vector<int32_t> host(static_cast<size_t>(batch * seq), 0);
  Tensor host_view = Tensor::Wrap(host.data(), {batch, seq}, DType::kI32);
  if (segment_starts.defined()) {
    backend.Copy(segment_starts, host_view);
    backend.Synchronize();
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      int32_t& start = host[static_cast<size_t>(b * seq + t)];
      start = std::max(start, static_cast<int32_t>(std::max<int64_t>(0, t - window + 1)));
    }
  }
  backend.Copy(host_view, starts);
  backend.Synchronize();  // `host` must outlive an asynchronous copy
  return starts;
}

}  // namespace

Tensor AttentionSublayerForward(Backend& backend, const AttentionParams& params, const Tensor& x,
                                const Tensor& segment_starts, bool selective_recompute,
                                Stash& stash) {
  const Tensor ln = NormForward(backend, params.ln, x, "attn.", stash);  // x's part of the sequence
  Tensor qkv =
      LinearForward(backend, params.c_attn, WholeSequence(backend, params.tensor, ln, kWorkspace),
                    kActivations);  // (B,T,(NH+2KVH)D)
  if (params.q_norm.weight != nullptr) QkNormForward(backend, params, qkv, &stash);
  if (params.rotary) {
    backend.RotaryEmbedding(qkv, segment_starts, 0, params.heads, params.rope, /*inverse=*/false);
  }
  stash.Put("attn.qkv", qkv);
  Tensor out = NewTensor(backend, HeadsShape(params, qkv), x.dtype(), kActivations);
  const int num_heads = params.heads.query;
  Tensor full = FullQkv(backend, params, qkv);
  Tensor starts =
      AttentionStarts(backend, segment_starts, qkv.size(0), qkv.size(1), params.sliding_window);
  if (params.flash) {  // the row log-sum-exps are all backward needs: kept under selective too
    Tensor lse =
        NewTensor(backend, {qkv.size(0), num_heads, qkv.size(1)}, DType::kF32, kActivations);
    backend.FlashAttentionForward(full, starts, num_heads, out, lse);
    stash.Put("attn.lse", std::move(lse));
  } else {
    Tensor probs = NewTensor(backend, ProbsShape(qkv, num_heads), DType::kF32,
                             selective_recompute ? kWorkspace : kActivations);
    backend.AttentionForward(full, starts, num_heads, out, probs);
    if (!selective_recompute) stash.Put("attn.probs", std::move(probs));
  }
  starts = Tensor();
  full = Tensor();
  stash.Put("attn.out", out);
  const Tensor proj = RowParallelForward(backend, params.c_proj, out, kWorkspace, params.tensor);
  return AddResidual(backend, x, proj);
}

Tensor AttentionSublayerBackward(Backend& backend, const AttentionParams& params, const Tensor& dy,
                                 const Tensor& segment_starts, const Stash& stash,
                                 WeightGradSink& sink, MemCategory dx_category) {
  const Tensor& qkv = stash.Get("attn.qkv");  // rotated, when rotary
  const bool flash = stash.Has("attn.lse");   // the forward's kind decides
  const int num_heads = params.heads.query;
  Tensor full = FullQkv(backend, params, qkv);
  Tensor starts =
      AttentionStarts(backend, segment_starts, qkv.size(0), qkv.size(1), params.sliding_window);
  Tensor probs;
  if (stash.Has("attn.probs")) {
    probs = stash.Get("attn.probs");
  } else if (!flash) {  // selective recompute: the same kernel on the same qkv gives the same probs
    probs = NewTensor(backend, ProbsShape(qkv, num_heads), DType::kF32, kWorkspace);
    Tensor scratch = NewTensor(backend, HeadsShape(params, qkv), dy.dtype(), kWorkspace);
    backend.AttentionForward(full, starts, num_heads, scratch, probs);
  }
  // dy is c_proj's output gradient: under sequence parallelism gathered, a weight-GEMM operand.
  const Tensor dy_whole = WholeSequence(backend, params.tensor, dy, sink.operand_category());
  Tensor dout = LinearBackward(backend, params.c_proj, stash.Get("attn.out"), dy_whole, sink);
  const bool grouped = params.heads.grouped();
  Tensor dfull =
      NewZeros(backend, full.shape(), qkv.dtype(), grouped ? kWorkspace : sink.operand_category());
  if (flash) {
    backend.FlashAttentionBackward(dout, full, starts, stash.Get("attn.out"), stash.Get("attn.lse"),
                                   num_heads, dfull);
  } else {
    backend.AttentionBackward(dout, full, starts, probs, num_heads, dfull);
  }
  starts = Tensor();
  dout = Tensor();
  probs = Tensor();
  full = Tensor();
  Tensor dqkv = dfull;
  if (grouped) {  // each key/value head's gradient: the sum over its group's query heads
    dqkv = NewZeros(backend, qkv.shape(), qkv.dtype(), sink.operand_category());
    backend.RepeatKvBackward(dfull, params.heads, dqkv);
  }
  dfull = Tensor();
  if (params.rotary) {  // the gradient of the unrotated q and k: the rotation's transpose
    backend.RotaryEmbedding(dqkv, segment_starts, 0, params.heads, params.rope, /*inverse=*/true);
  }
  if (params.q_norm.weight != nullptr) QkNormBackward(backend, params, dqkv, stash);
  Tensor dln = LinearBackward(
      backend, params.c_attn,
      WholeSequence(backend, params.tensor, stash.Get("attn.ln"), sink.operand_category()), dqkv,
      sink);
  dqkv = Tensor();
  dln = InputGradient(backend, std::move(dln), params.tensor);
  return ResidualNormBackward(backend, params.ln, dy, dln, "attn.", stash, dx_category);
}

Tensor MlpSublayerForward(Backend& backend, const MlpParams& params, const Tensor& x,
                          bool selective_recompute, Stash& stash) {
  const Tensor ln = NormForward(backend, params.ln, x, "mlp.", stash);  // x's part of the sequence
  const MemCategory wide = selective_recompute ? kWorkspace : kActivations;
  Tensor fc =
      LinearForward(backend, params.c_fc, WholeSequence(backend, params.tensor, ln, kWorkspace),
                    wide);  // (B,T,4C) or (B,T,2H)
  Tensor act = ActivationOf(backend, params, fc, wide);
  if (!selective_recompute) {
    stash.Put("mlp.fc", fc);
    stash.Put("mlp.act", act);
  }
  fc = Tensor();
  const Tensor proj = RowParallelForward(backend, params.c_proj, act, kWorkspace, params.tensor);
  act = Tensor();
  return AddResidual(backend, x, proj);
}

Tensor MlpSublayerBackward(Backend& backend, const MlpParams& params, const Tensor& dy,
                           const Stash& stash, WeightGradSink& sink, MemCategory dx_category) {
  const Tensor ln =
      WholeSequence(backend, params.tensor, stash.Get("mlp.ln"), sink.operand_category());
  const Tensor dy_whole = WholeSequence(backend, params.tensor, dy, sink.operand_category());
  Tensor fc;
  Tensor act;
  if (stash.Has("mlp.fc")) {
    fc = stash.Get("mlp.fc");
    act = stash.Get("mlp.act");
  } else {  // selective recompute; act may be kept for BackwardWeight, so it is an operand
    fc = LinearForward(backend, params.c_fc, ln, kWorkspace);
    act = ActivationOf(backend, params, fc, sink.operand_category());
  }
  Tensor dact = LinearBackward(backend, params.c_proj, act, dy_whole, sink);
  act = Tensor();
  Tensor dfc = NewZeros(backend, fc.shape(), fc.dtype(), sink.operand_category());
  if (params.swiglu) {
    backend.SwiGluBackward(fc, dact, dfc);
  } else {
    backend.GeluBackward(fc, dact, dfc);
  }
  dact = Tensor();
  fc = Tensor();
  Tensor dln = LinearBackward(backend, params.c_fc, ln, dfc, sink);
  dfc = Tensor();
  dln = InputGradient(backend, std::move(dln), params.tensor);
  return ResidualNormBackward(backend, params.ln, dy, dln, "mlp.", stash, dx_category);
}

namespace {

// ln (B,T,C) = LayerNorm(x), its statistics and itself workspace (nothing is stashed).
Tensor NormInference(Backend& backend, const Norm& norm, const Tensor& x) {
  return LayerNormOf(backend, norm, x, kWorkspace).ln;
}

}  // namespace

Tensor AttentionSublayerCached(Backend& backend, const AttentionParams& params, const Tensor& x,
                               int64_t context, KvCache& cache) {
  BATON_CHECK(TensorSize(params.tensor) == 1,
              "inference with a key-value cache runs on one tensor rank (a checkpoint holds the "
              "whole model: generate with parallel.tensor 1)");
  Tensor qkv = LinearForward(backend, params.c_attn, NormInference(backend, params.ln, x),
                             kWorkspace);  // (B,T,(NH+2KVH)D)
  if (params.q_norm.weight != nullptr) QkNormForward(backend, params, qkv, nullptr);
  // The cache holds every query head's keys and values: NH D columns.
  const int64_t batch = x.size(0), t = x.size(1), c = HeadsShape(params, qkv).back();
  if (!cache.keys.defined()) {
    cache.keys = NewTensor(backend, {batch, context, c}, x.dtype(), kActivations);
    cache.values = NewTensor(backend, {batch, context, c}, x.dtype(), kActivations);
    cache.length.assign(static_cast<size_t>(batch), 0);
    cache.first.assign(static_cast<size_t>(batch), 0);
  }
  BATON_CHECK(
      cache.rows() == batch && cache.keys.size(0) == batch && cache.keys.dtype() == x.dtype() &&
          *std::max_element(cache.length.begin(), cache.length.end()) + t <= cache.keys.size(1),
      "a key-value cache {} holding {} positions per row cannot take {} more of {}",
      cache.keys.ToString(), fmt::join(cache.length, ", "), t, x.ToString());
  Tensor out = NewTensor(backend, HeadsShape(params, qkv), x.dtype(), kWorkspace);  // (B,T,NH D)
  // Rows at the same positions run as one; rows of different lengths one by one (the linears
  // above and below still run every row at once).
  const bool aligned = std::all_of(cache.length.begin(), cache.length.end(),
                                   [&](int64_t n) { return n == cache.length.front(); }) &&
                       std::all_of(cache.first.begin(), cache.first.end(),
                                   [&](int64_t f) { return f == cache.first.front(); });
  for (int64_t b = 0; b < (aligned ? 1 : batch); ++b) {
    const int64_t end = aligned ? batch : b + 1;
    const auto row = static_cast<size_t>(b);
    Tensor rows_qkv = qkv.Slice(0, b, end);
    if (params.rotary) {
      backend.RotaryEmbedding(rows_qkv, Tensor(), cache.end(b), params.heads, params.rope,
                              /*inverse=*/false);
    }
    const Tensor full = FullQkv(backend, params, rows_qkv);
    Tensor keys = cache.keys.Slice(0, b, end), values = cache.values.Slice(0, b, end);
    Tensor rows_out = out.Slice(0, b, end);
    backend.CachedAttentionForward(full, params.heads.query, cache.length[row], keys, values,
                                   rows_out);
  }
  for (int64_t& length : cache.length) length += t;
  qkv = Tensor();
  const Tensor proj = LinearForward(backend, params.c_proj, out, kWorkspace);
  return AddResidual(backend, x, proj);
}

Tensor MlpSublayerInference(Backend& backend, const MlpParams& params, const Tensor& x) {
  BATON_CHECK(TensorSize(params.tensor) == 1,
              "inference with a key-value cache runs on one tensor rank (a checkpoint holds the "
              "whole model: generate with parallel.tensor 1)");
  Tensor fc = LinearForward(backend, params.c_fc, NormInference(backend, params.ln, x),
                            kWorkspace);  // (B,T,4C) or (B,T,2H)
  Tensor act = ActivationOf(backend, params, fc, kWorkspace);
  fc = Tensor();
  const Tensor proj = LinearForward(backend, params.c_proj, act, kWorkspace);
  act = Tensor();
  return AddResidual(backend, x, proj);
}

namespace {

// A sublayer's collectives: ln gathered for the column-parallel linear, its output summed (or
// scattered); backward gathers dy and ln (weight-GEMM operands) and sums (or scatters) the
// input's gradient; per step, sequence parallelism sums the norm's partial gradients.
LayerCollectives NormedLinearPairCollectives(int64_t rows, int64_t width, DType act_dtype,
                                             bool norm_bias, const TensorLayout& layout) {
  using Kind = TensorCollective::Kind;
  LayerCollectives c;
  if (layout.tensor == 1) return c;
  const TensorCollective whole{Kind::kGatherSequence, rows * width, act_dtype};
  if (layout.sequence_parallel) {
    c.forward = {whole, {Kind::kScatterSequenceSum, rows * width, act_dtype}};
    c.backward = {whole, whole, {Kind::kScatterSequenceSum, rows * width, act_dtype}};
    c.step_end.push_back({Kind::kGradientSum, width, DType::kF32});
    if (norm_bias) c.step_end.push_back({Kind::kGradientSum, width, DType::kF32});
  } else {
    c.forward = {{Kind::kSum, rows * width, act_dtype}};
    c.backward = {{Kind::kSum, rows * width, act_dtype}};
  }
  return c;
}

}  // namespace

LayerCollectives AttentionSublayerCollectives(int64_t rows, int64_t width, DType act_dtype,
                                              bool norm_bias, const TensorLayout& layout) {
  return NormedLinearPairCollectives(rows, width, act_dtype, norm_bias, layout);
}

LayerCollectives MlpSublayerCollectives(int64_t rows, int64_t width, DType act_dtype,
                                        bool norm_bias, const TensorLayout& layout) {
  return NormedLinearPairCollectives(rows, width, act_dtype, norm_bias, layout);
}

}  // namespace baton::model_ops
