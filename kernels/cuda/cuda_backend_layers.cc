// CudaBackend: the GPT layer methods. Each validates its arguments as the CPU backend does and
// queues the kernels of launch.h; materialised attention runs its four products through cuBLASLt
// with the causal softmax kernel in between, flash attention is one kernel each way.
#include <cmath>

#include "core/error.h"
#include "kernels/cuda/arg_checks.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/launch.h"

namespace baton::cuda {
namespace {

struct AttentionShape {
  int64_t batch = 0, seq = 0, channels = 0, heads = 0;
  int64_t head_dim() const { return channels / heads; }
};

AttentionShape CheckAttention(const Tensor& qkv, int num_heads, Device device) {
  CheckFloat(qkv, device, "qkv");
  BATON_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, "qkv {} must be (B, T, 3C)", qkv.ToString());
  const AttentionShape shape{qkv.size(0), qkv.size(1), qkv.size(2) / 3, num_heads};
  BATON_CHECK(num_heads >= 1 && shape.channels % num_heads == 0,
              "{} heads do not divide {} channels", num_heads, shape.channels);
  return shape;
}

// What the flash kernels can take (launch.h): the head dimension and the grid size.
void CheckFlashShape(const AttentionShape& shape, int64_t grid_blocks) {
  BATON_CHECK(shape.head_dim() <= kFlashMaxHeadDim,
              "flash attention takes head dimensions up to {}, got {} ({} channels / {} heads); "
              "use model.attention: materialized",
              kFlashMaxHeadDim, shape.head_dim(), shape.channels, shape.heads);
  BATON_CHECK(shape.seq <= (int64_t{1} << 30) && grid_blocks <= 0x7fffffff,
              "flash attention of batch {} x {} heads x {} positions is too large for one grid",
              shape.batch, shape.heads, shape.seq);
}

// `offset` elements into t's memory.
const void* At(const Tensor& t, int64_t offset) {
  return static_cast<const char*>(t.raw()) + offset * static_cast<int64_t>(SizeOf(t.dtype()));
}
void* At(Tensor& t, int64_t offset) {
  return static_cast<char*>(t.raw()) + offset * static_cast<int64_t>(SizeOf(t.dtype()));
}

// A batch over heads of (rows x cols) slices of a (T, ld) row-major tensor: head h starts at
// column offset + h*D.
GemmMatrix Heads(const Tensor& t, int64_t offset, int64_t ld, int64_t head_dim) {
  return {At(t, offset), t.dtype(), ld, head_dim};
}

// A batch over heads of dense T x T blocks.
GemmMatrix Squares(const Tensor& t, int64_t offset, int64_t seq) {
  return {At(t, offset), t.dtype(), seq, seq * seq};
}

// A bound on EmbeddingBackwardWorkspaceBytes for a meta backend on a machine without a GPU: CUB
// sizes its radix sort's temporary storage from the GPU it runs on, so without one the three
// row arrays are booked exactly and the sort's storage as 16 bytes per row + 64 KiB (its
// per-tile look-back of 4 passes x 256 digits x 4 bytes for tiles of at least 256 rows, plus the
// histograms), which holds for every tile size (docs/memory.md, Limits).
size_t EmbeddingBackwardWorkspaceBound(int64_t rows) {
  const auto array = (static_cast<size_t>(rows) * sizeof(int32_t) + 255) / 256 * 256;
  return 3 * array + 16 * static_cast<size_t>(rows) + (size_t{64} << 10);
}

static_assert(kDeviceIgnoreTarget == kIgnoreTarget);

// Packed documents' segment starts (Backend::AttentionForward): undefined, or (B,T) i32 on this
// device. Their values are not read back to check them (the trainer makes them with PackRows);
// returns the device pointer, or null.
const int32_t* SegmentStarts(const Tensor& segment_starts, int64_t batch, int64_t seq,
                             Device device) {
  if (!segment_starts.defined()) return nullptr;
  CheckI32(segment_starts, device, "segment_starts");
  CheckShape(segment_starts, {batch, seq}, "segment_starts");
  return static_cast<const int32_t*>(segment_starts.raw());
}

void CheckVocabBegin(int64_t vocab_begin) {
  BATON_CHECK(vocab_begin >= 0 && vocab_begin <= kAnyIdBound, "vocab_begin {} is outside [0, 2^31)",
              vocab_begin);
}

// Logits (N, V) of any float dtype, not empty, with targets (N) i32 (their values are checked by
// the kernels). Returns (N, V).
RowsCols CheckCrossEntropy(const Tensor& logits, const Tensor& targets, Device device) {
  CheckFloat(logits, device, "logits");
  CheckI32(targets, device, "targets");
  const RowsCols lm = AsMatrix(logits, "logits");
  BATON_CHECK(lm.rows > 0 && lm.cols > 0, "cross-entropy of empty logits {}", logits.ToString());
  CheckNumel(targets, lm.rows, "targets");
  return lm;
}

}  // namespace

void CudaBackend::EmbeddingForward(const Tensor& tokens, const Tensor& segment_starts,
                                   const Tensor& wte, const Tensor& wpe, Tensor& out) {
  EmbeddingRowsForward(tokens, segment_starts, 0, /*whole=*/true, wte, wpe, out);
}

void CudaBackend::EmbeddingShardForward(const Tensor& tokens, const Tensor& segment_starts,
                                        int64_t vocab_begin, const Tensor& wte, const Tensor& wpe,
                                        Tensor& out) {
  EmbeddingRowsForward(tokens, segment_starts, vocab_begin, /*whole=*/false, wte, wpe, out);
}

void CudaBackend::EmbeddingBackward(const Tensor& tokens, const Tensor& segment_starts,
                                    const Tensor& dout, Tensor& dwte, Tensor& dwpe) {
  EmbeddingRowsBackward(tokens, segment_starts, 0, /*whole=*/true, dout, dwte, dwpe);
}

void CudaBackend::EmbeddingShardBackward(const Tensor& tokens, const Tensor& segment_starts,
                                         int64_t vocab_begin, const Tensor& dout, Tensor& dwte,
                                         Tensor& dwpe) {
  EmbeddingRowsBackward(tokens, segment_starts, vocab_begin, /*whole=*/false, dout, dwte, dwpe);
}

void CudaBackend::EmbeddingRowsForward(const Tensor& tokens, const Tensor& segment_starts,
                                       int64_t vocab_begin, bool whole, const Tensor& wte,
                                       const Tensor& wpe, Tensor& out) {
  Activate();
  CheckVocabBegin(vocab_begin);
  CheckI32(tokens, device(), "tokens");
  CheckFloat(wte, device(), "wte");
  CheckFloat(out, device(), "out");
  BATON_CHECK(tokens.dim() == 2, "tokens {} must be (B, T)", tokens.ToString());
  BATON_CHECK(wte.dim() == 2, "wte {} must be (V, C)", wte.ToString());
  const int64_t batch = tokens.size(0), seq = tokens.size(1), channels = wte.size(1);
  if (wpe.defined()) {  // undefined: Llama's rotary positions, out = wte[tokens]
    CheckFloat(wpe, device(), "wpe");
    BATON_CHECK(wpe.dim() == 2 && wte.size(1) == wpe.size(1),
                "wte {} and wpe {} must be (V, C) and (maxT, C)", wte.ToString(), wpe.ToString());
    BATON_CHECK(seq <= wpe.size(0), "sequence length {} exceeds wpe's {} positions", seq,
                wpe.size(0));
  }
  CheckShape(out, {batch, seq, channels}, "out");
  const int32_t* segments = SegmentStarts(segment_starts, batch, seq, device());
  Compute([&] {
    LaunchEmbeddingForward(static_cast<const int32_t*>(tokens.raw()), segments, wte.raw(),
                           wte.dtype(), wpe.defined() ? wpe.raw() : nullptr,
                           wpe.defined() ? wpe.dtype() : wte.dtype(), out.raw(), out.dtype(), batch,
                           seq, channels, VocabRows{vocab_begin, wte.size(0), whole}, id_error_,
                           stream_);
  });
}

size_t CudaBackend::SortWorkspaceBytes(int64_t rows) const {
  return EmbeddingBackwardWorkspaceBytes(rows);
}

size_t CudaMetaBackend::SortWorkspaceBytes(int64_t rows) const {
  return CudaDeviceCount() == 0 ? EmbeddingBackwardWorkspaceBound(rows)
                                : EmbeddingBackwardWorkspaceBytes(rows);
}

void CudaBackend::EmbeddingRowsBackward(const Tensor& tokens, const Tensor& segment_starts,
                                        int64_t vocab_begin, bool whole, const Tensor& dout,
                                        Tensor& dwte, Tensor& dwpe) {
  Activate();
  CheckVocabBegin(vocab_begin);
  CheckI32(tokens, device(), "tokens");
  CheckFloat(dout, device(), "dout");
  BATON_CHECK(tokens.dim() == 2, "tokens {} must be (B, T)", tokens.ToString());
  BATON_CHECK(dout.dim() == 3, "dout {} must be (B, T, C)", dout.ToString());
  const int64_t batch = tokens.size(0), seq = tokens.size(1), channels = dout.size(2);
  CheckShape(dout, {batch, seq, channels}, "dout");
  const int32_t* segments = SegmentStarts(segment_starts, batch, seq, device());
  const int64_t rows = batch * seq;
  if (dwte.defined()) {
    CheckFloat(dwte, device(), "dwte");
    BATON_CHECK(dwte.dim() == 2 && dwte.size(1) == channels, "dwte {} must be (V, {})",
                dwte.ToString(), channels);
    const size_t bytes = SortWorkspaceBytes(rows);  // the radix sort's, for the scatter-add by id
    Tensor scratch = Workspace(static_cast<int64_t>((bytes + 3) / 4), DType::kF32);
    Compute([&] {
      LaunchEmbeddingBackwardTokens(static_cast<const int32_t*>(tokens.raw()), dout.raw(),
                                    dout.dtype(), dwte.raw(), dwte.dtype(), rows, channels,
                                    VocabRows{vocab_begin, dwte.size(0), whole}, scratch.raw(),
                                    scratch.nbytes(), id_error_, stream_);
    });
  }
  if (dwpe.defined()) {
    CheckFloat(dwpe, device(), "dwpe");
    BATON_CHECK(dwpe.dim() == 2 && dwpe.size(1) == channels && seq <= dwpe.size(0),
                "dwpe {} must be (maxT >= {}, {})", dwpe.ToString(), seq, channels);
    if (segments != nullptr) {
      // Packed documents: dwpe[t - start[b,t]] += dout[b,t], the tokens' scatter-add with the
      // positions as ids (rows of one position summed in row order, no atomics).
      Tensor positions = Workspace(rows, DType::kI32);
      const size_t bytes = SortWorkspaceBytes(rows);  // the radix sort's, for the scatter-add by id
      Tensor scratch = Workspace(static_cast<int64_t>((bytes + 3) / 4), DType::kF32);
      Compute([&] {
        int32_t* p = static_cast<int32_t*>(positions.raw());
        LaunchPositions(segments, rows, seq, p, stream_);
        LaunchEmbeddingBackwardTokens(p, dout.raw(), dout.dtype(), dwpe.raw(), dwpe.dtype(), rows,
                                      channels, VocabRows{0, dwpe.size(0), true}, scratch.raw(),
                                      scratch.nbytes(), id_error_, stream_);
      });
      return;
    }
    // dwpe[t] += sum_b dout[b, t]: column sums of dout seen as (B, T*C) into dwpe's first T rows.
    Tensor partials = Workspace(ColumnSumsPartials(batch, seq * channels), DType::kF32);
    Compute([&] {
      LaunchColumnSums(dout.raw(), dout.dtype(), batch, seq * channels,
                       static_cast<float*>(partials.raw()), dwpe.raw(), dwpe.dtype(), stream_);
    });
  }
}

void CudaBackend::LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   Tensor& out, Tensor& mean, Tensor& rstd) {
  Activate();
  CheckFloat(x, device(), "x");
  CheckFloat(weight, device(), "weight");
  CheckFloat(bias, device(), "bias");
  CheckFloat(out, device(), "out");
  CheckF32(mean, device(), "mean");
  CheckF32(rstd, device(), "rstd");
  const RowsCols xm = AsMatrix(x, "x");
  CheckNumel(weight, xm.cols, "weight");
  CheckNumel(bias, xm.cols, "bias");
  CheckShape(out, x.shape(), "out");
  CheckNumel(mean, xm.rows, "mean");
  CheckNumel(rstd, xm.rows, "rstd");
  Compute([&] {
    LaunchLayerNormForward(x.raw(), x.dtype(), weight.raw(), weight.dtype(), bias.raw(),
                           bias.dtype(), out.raw(), out.dtype(), static_cast<float*>(mean.raw()),
                           static_cast<float*>(rstd.raw()), xm.rows, xm.cols, stream_);
  });
}

void CudaBackend::LayerNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                    const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                    Tensor& dweight, Tensor& dbias) {
  Activate();
  for (const auto& [t, name] : {std::pair{&dout, "dout"},
                                {&x, "x"},
                                {&weight, "weight"},
                                {&dx, "dx"},
                                {&dweight, "dweight"},
                                {&dbias, "dbias"}}) {
    CheckFloat(*t, device(), name);
  }
  CheckF32(mean, device(), "mean");
  CheckF32(rstd, device(), "rstd");
  const RowsCols xm = AsMatrix(x, "x");
  CheckShape(dout, x.shape(), "dout");
  CheckShape(dx, x.shape(), "dx");
  CheckNumel(weight, xm.cols, "weight");
  CheckNumel(dweight, xm.cols, "dweight");
  CheckNumel(dbias, xm.cols, "dbias");
  CheckNumel(mean, xm.rows, "mean");
  CheckNumel(rstd, xm.rows, "rstd");
  Tensor partials = Workspace(2 * ColumnSumsPartials(xm.rows, xm.cols), DType::kF32);
  Compute([&] {
    LaunchLayerNormBackward(dout.raw(), dout.dtype(), x.raw(), x.dtype(), weight.raw(),
                            weight.dtype(), static_cast<const float*>(mean.raw()),
                            static_cast<const float*>(rstd.raw()), dx.raw(), dx.dtype(),
                            dweight.raw(), dweight.dtype(), dbias.raw(), dbias.dtype(),
                            static_cast<float*>(partials.raw()), xm.rows, xm.cols, stream_);
  });
}

void CudaBackend::GeluForward(const Tensor& x, Tensor& out) {
  Activate();
  CheckFloat(x, device(), "x");
  CheckFloat(out, device(), "out");
  CheckShape(out, x.shape(), "out");
  Compute(
      [&] { LaunchGeluForward(x.raw(), x.dtype(), out.raw(), out.dtype(), x.numel(), stream_); });
}

void CudaBackend::GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  Activate();
  CheckFloat(x, device(), "x");
  CheckFloat(dout, device(), "dout");
  CheckFloat(dx, device(), "dx");
  CheckShape(dout, x.shape(), "dout");
  CheckShape(dx, x.shape(), "dx");
  Compute([&] {
    LaunchGeluBackward(x.raw(), x.dtype(), dout.raw(), dout.dtype(), dx.raw(), dx.dtype(),
                       x.numel(), stream_);
  });
}

// Per batch element b, as a batch over heads: S = scale Q K^T into probs (f32), the causal
// softmax in place, then out = P V. With 16-bit qkv, P is also written in that dtype for the PV
// product (cuBLASLt wants both operands in one dtype). When out's dtype differs from qkv's,
// everything runs in f32.
void CudaBackend::AttentionForward(const Tensor& qkv, const Tensor& segment_starts, int num_heads,
                                   Tensor& out, Tensor& probs) {
  Activate();
  const AttentionShape shape = CheckAttention(qkv, num_heads, device());
  CheckFloat(out, device(), "out");
  CheckF32(probs, device(), "probs");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckShape(probs, {shape.batch, shape.heads, shape.seq, shape.seq}, "probs");
  const int32_t* segments = SegmentStarts(segment_starts, shape.batch, shape.seq, device());
  if (shape.batch * shape.seq == 0) return;
  const DType io = out.dtype() == qkv.dtype() ? qkv.dtype() : DType::kF32;
  const Tensor q = Cast(qkv, io);
  Tensor o = out.dtype() == io ? out : Workspace(out.numel(), io).View(out.shape());
  const int64_t t = shape.seq, c = shape.channels, d = shape.head_dim(), nh = shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Tensor probs_io;  // P in the operand dtype, when that isn't f32
  if (io != DType::kF32) probs_io = Workspace(probs.numel(), io);
  const Tensor& p_operand = io == DType::kF32 ? probs : probs_io;
  Compute([&] {
    for (int64_t b = 0; b < shape.batch; ++b) {
      const int64_t qkv_b = b * t * 3 * c;
      GemmProblem scores;
      scores.trans_b = true;
      scores.m = t;
      scores.n = t;
      scores.k = d;
      scores.a = Heads(q, qkv_b, 3 * c, d);
      scores.b = Heads(q, qkv_b + c, 3 * c, d);
      scores.out = At(probs, b * nh * t * t);
      scores.out_dtype = DType::kF32;
      scores.ldo = t;
      scores.out_batch_stride = t * t;
      scores.batch = static_cast<int>(nh);
      scores.alpha = scale;
      gemm_->Run(scores, stream_);
    }
    LaunchCausalSoftmax(static_cast<float*>(probs.raw()), shape.batch * nh * t, t, segments, nh * t,
                        probs_io.defined() ? probs_io.raw() : nullptr, io, stream_);
    for (int64_t b = 0; b < shape.batch; ++b) {
      GemmProblem values;
      values.m = t;
      values.n = d;
      values.k = t;
      values.a = Squares(p_operand, b * nh * t * t, t);
      values.b = Heads(q, b * t * 3 * c + 2 * c, 3 * c, d);
      values.out = At(o, b * t * c);
      values.out_dtype = io;
      values.ldo = c;
      values.out_batch_stride = d;
      values.batch = static_cast<int>(nh);
      gemm_->Run(values, stream_);
    }
    if (o.raw() != out.raw()) LaunchCast(o.raw(), io, out.raw(), out.dtype(), out.numel(), stream_);
  });
}

// Per batch element b, as a batch over heads: dP = dO V^T (f32), dS = scale P (dP - rowsum(P dP))
// in place, then dQ += dS K, dK += dS^T Q, dV += P^T dO. 16-bit operands as in the forward.
void CudaBackend::AttentionBackward(const Tensor& dout, const Tensor& qkv,
                                    const Tensor& segment_starts, const Tensor& probs,
                                    int num_heads, Tensor& dqkv) {
  Activate();
  const AttentionShape shape = CheckAttention(qkv, num_heads, device());
  CheckFloat(dout, device(), "dout");
  CheckF32(probs, device(), "probs");
  CheckFloat(dqkv, device(), "dqkv");
  CheckShape(dout, {shape.batch, shape.seq, shape.channels}, "dout");
  CheckShape(probs, {shape.batch, shape.heads, shape.seq, shape.seq}, "probs");
  CheckShape(dqkv, qkv.shape(), "dqkv");
  const int32_t* segments = SegmentStarts(segment_starts, shape.batch, shape.seq, device());
  if (shape.batch * shape.seq == 0) return;
  const bool uniform = dout.dtype() == qkv.dtype() && dqkv.dtype() == qkv.dtype();
  const DType io = uniform ? qkv.dtype() : DType::kF32;
  const Tensor q = Cast(qkv, io);
  const Tensor g = Cast(dout, io);
  Tensor dq = Cast(dqkv, io);  // accumulated into; dqkv itself when the dtype matches
  const int64_t t = shape.seq, c = shape.channels, d = shape.head_dim(), nh = shape.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Tensor ds = Workspace(nh * t * t, DType::kF32);  // dP, then dS, for one batch element
  Tensor ds_io, probs_io;
  if (io != DType::kF32) {
    ds_io = Workspace(nh * t * t, io);
    probs_io = Workspace(nh * t * t, io);
  }
  Compute([&] {
    for (int64_t b = 0; b < shape.batch; ++b) {
      const int64_t qkv_b = b * t * 3 * c;
      const int64_t probs_b = b * nh * t * t;
      GemmProblem dp;
      dp.trans_b = true;
      dp.m = t;
      dp.n = t;
      dp.k = d;
      dp.a = Heads(g, b * t * c, c, d);
      dp.b = Heads(q, qkv_b + 2 * c, 3 * c, d);
      dp.out = ds.raw();
      dp.out_dtype = DType::kF32;
      dp.ldo = t;
      dp.out_batch_stride = t * t;
      dp.batch = static_cast<int>(nh);
      gemm_->Run(dp, stream_);
      LaunchCausalSoftmaxBackward(static_cast<const float*>(At(probs, probs_b)),
                                  static_cast<float*>(ds.raw()), nh * t, t,
                                  segments == nullptr ? nullptr : segments + b * t, nh * t, scale,
                                  ds_io.defined() ? ds_io.raw() : nullptr,
                                  probs_io.defined() ? probs_io.raw() : nullptr, io, stream_);
      const GemmMatrix ds_operand = Squares(io == DType::kF32 ? ds : ds_io, 0, t);
      const GemmMatrix p_operand =
          io == DType::kF32 ? Squares(probs, probs_b, t) : Squares(probs_io, 0, t);
      // Three products of the same form: out (T, D) head slices of dq, accumulated.
      const auto accumulate = [&](bool trans_a, const GemmMatrix& lhs, const GemmMatrix& rhs,
                                  int64_t out_offset) {
        GemmProblem p;
        p.trans_a = trans_a;
        p.m = t;
        p.n = d;
        p.k = t;
        p.a = lhs;
        p.b = rhs;
        p.out = At(dq, qkv_b + out_offset);
        p.out_dtype = io;
        p.ldo = 3 * c;
        p.out_batch_stride = d;
        p.batch = static_cast<int>(nh);
        p.beta = 1.0f;
        gemm_->Run(p, stream_);
      };
      accumulate(false, ds_operand, Heads(q, qkv_b + c, 3 * c, d), 0);  // dQ += dS K
      accumulate(true, ds_operand, Heads(q, qkv_b, 3 * c, d), c);       // dK += dS^T Q
      accumulate(true, p_operand, Heads(g, b * t * c, c, d), 2 * c);    // dV += P^T dO
    }
    if (dq.raw() != dqkv.raw()) {
      LaunchCast(dq.raw(), io, dqkv.raw(), dqkv.dtype(), dqkv.numel(), stream_);
    }
  });
}

// One kernel (flash_attention.cu): per (query tile, b, h) block, key tiles streamed with an
// online softmax; no T x T scores, no workspace.
void CudaBackend::FlashAttentionForward(const Tensor& qkv, const Tensor& segment_starts,
                                        int num_heads, Tensor& out, Tensor& lse) {
  Activate();
  const AttentionShape shape = CheckAttention(qkv, num_heads, device());
  CheckFloat(out, device(), "out");
  CheckF32(lse, device(), "lse");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckShape(lse, {shape.batch, shape.heads, shape.seq}, "lse");
  CheckFlashShape(shape, FlashForwardBlocks(shape.batch, shape.seq, shape.heads));
  const int32_t* segments = SegmentStarts(segment_starts, shape.batch, shape.seq, device());
  if (shape.batch * shape.seq == 0) return;
  Compute([&] {
    LaunchFlashAttentionForward(qkv.raw(), segments, qkv.dtype(), out.raw(), out.dtype(),
                                static_cast<float*>(lse.raw()), shape.batch, shape.seq,
                                shape.channels, shape.heads, stream_);
  });
}

// One kernel: key blocks (dK, dV) and query blocks (dQ) in one grid, P recomputed from lse, each
// element of dqkv accumulated by one thread in a fixed order (deterministic, no atomics).
void CudaBackend::FlashAttentionBackward(const Tensor& dout, const Tensor& qkv,
                                         const Tensor& segment_starts, const Tensor& out,
                                         const Tensor& lse, int num_heads, Tensor& dqkv) {
  Activate();
  const AttentionShape shape = CheckAttention(qkv, num_heads, device());
  CheckFloat(dout, device(), "dout");
  CheckFloat(out, device(), "out");
  CheckF32(lse, device(), "lse");
  CheckFloat(dqkv, device(), "dqkv");
  CheckShape(dout, {shape.batch, shape.seq, shape.channels}, "dout");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckShape(lse, {shape.batch, shape.heads, shape.seq}, "lse");
  CheckShape(dqkv, qkv.shape(), "dqkv");
  CheckFlashShape(shape, FlashBackwardBlocks(shape.batch, shape.seq, shape.heads));
  const int32_t* segments = SegmentStarts(segment_starts, shape.batch, shape.seq, device());
  if (shape.batch * shape.seq == 0) return;
  Compute([&] {
    LaunchFlashAttentionBackward(dout.raw(), dout.dtype(), qkv.raw(), segments, qkv.dtype(),
                                 out.raw(), out.dtype(), static_cast<const float*>(lse.raw()),
                                 dqkv.raw(), dqkv.dtype(), shape.batch, shape.seq, shape.channels,
                                 shape.heads, stream_);
  });
}

// Two copy kernels and one attention kernel (cached_attention.cu); no workspace.
void CudaBackend::CachedAttentionForward(const Tensor& qkv, int num_heads, int64_t past,
                                         Tensor& k_cache, Tensor& v_cache, Tensor& out) {
  Activate();
  const AttentionShape shape = CheckAttention(qkv, num_heads, device());
  CheckFloat(out, device(), "out");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  for (const Tensor* cache : {&k_cache, &v_cache}) {
    CheckFloat(*cache, device(), "cache");
    BATON_CHECK(cache->dtype() == qkv.dtype() && cache->dim() == 3 &&
                    cache->size(0) == shape.batch && cache->size(2) == shape.channels &&
                    past >= 0 && cache->size(1) >= past + shape.seq,
                "cache {} must be (B={}, S >= {} + {}, C={}) {}", cache->ToString(), shape.batch,
                past, shape.seq, shape.channels, Name(qkv.dtype()));
  }
  BATON_CHECK(shape.head_dim() <= kCachedMaxHeadDim,
              "cached attention takes head dimensions up to {}, got {}", kCachedMaxHeadDim,
              shape.head_dim());
  BATON_CHECK(CachedAttentionBlocks(shape.batch, shape.seq, shape.heads) <= 0x7fffffff,
              "cached attention of batch {} x {} heads x {} queries is too large for one grid",
              shape.batch, shape.heads, shape.seq);
  if (shape.batch * shape.seq == 0) return;
  Compute([&] {
    LaunchCachedAttentionForward(qkv.raw(), qkv.dtype(), k_cache.raw(), v_cache.raw(), out.raw(),
                                 out.dtype(), shape.batch, shape.seq, past, k_cache.size(1),
                                 shape.channels, shape.heads, stream_);
  });
}

void CudaBackend::CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss) {
  Activate();
  const RowsCols lm = CheckCrossEntropy(logits, targets, device());
  CheckF32(loss, device(), "loss");
  CheckNumel(loss, 1, "loss");
  Tensor row_losses = Workspace(lm.rows, DType::kF32);
  Compute([&] {
    LaunchCrossEntropyForward(
        logits.raw(), logits.dtype(), static_cast<const int32_t*>(targets.raw()),
        static_cast<float*>(row_losses.raw()), static_cast<float*>(loss.raw()), lm.rows, lm.cols,
        id_error_, stream_);
  });
}

void CudaBackend::CrossEntropyBackward(const Tensor& logits, const Tensor& targets,
                                       float grad_scale, Tensor& dlogits) {
  Activate();
  const RowsCols lm = CheckCrossEntropy(logits, targets, device());
  CrossEntropyGradient(logits, targets, VocabRows{0, lm.cols, true}, Tensor(), grad_scale, dlogits);
}

void CudaBackend::CrossEntropyShardStats(const Tensor& logits, const Tensor& targets,
                                         int64_t vocab_begin, Tensor& stats) {
  Activate();
  const RowsCols lm = CheckCrossEntropy(logits, targets, device());
  CheckVocabBegin(vocab_begin);
  CheckF32(stats, device(), "stats");
  CheckShape(stats, {lm.rows, 3}, "stats");
  Compute([&] {
    LaunchCrossEntropyShardStats(logits.raw(), logits.dtype(),
                                 static_cast<const int32_t*>(targets.raw()),
                                 VocabRows{vocab_begin, lm.cols, false},
                                 static_cast<float*>(stats.raw()), lm.rows, id_error_, stream_);
  });
}

void CudaBackend::CrossEntropyShardCombine(const Tensor& all_stats, const Tensor& targets,
                                           Tensor& row_stats, Tensor& loss) {
  Activate();
  CheckF32(all_stats, device(), "all_stats");
  CheckI32(targets, device(), "targets");
  CheckF32(row_stats, device(), "row_stats");
  CheckF32(loss, device(), "loss");
  BATON_CHECK(all_stats.dim() == 3 && all_stats.size(0) > 0 && all_stats.size(1) > 0 &&
                  all_stats.size(2) == 3,
              "all_stats {} must be (T >= 1, N >= 1, 3)", all_stats.ToString());
  const int64_t ranks = all_stats.size(0), rows = all_stats.size(1);
  CheckNumel(targets, rows, "targets");
  CheckShape(row_stats, {rows, 2}, "row_stats");
  CheckNumel(loss, 1, "loss");
  Tensor row_losses = Workspace(rows, DType::kF32);
  Compute([&] {
    LaunchCrossEntropyShardCombine(
        static_cast<const float*>(all_stats.raw()), static_cast<const int32_t*>(targets.raw()),
        ranks, rows, static_cast<float*>(row_stats.raw()), static_cast<float*>(row_losses.raw()),
        static_cast<float*>(loss.raw()), id_error_, stream_);
  });
}

void CudaBackend::CrossEntropyShardBackward(const Tensor& logits, const Tensor& targets,
                                            int64_t vocab_begin, const Tensor& row_stats,
                                            float grad_scale, Tensor& dlogits) {
  Activate();
  const RowsCols lm = CheckCrossEntropy(logits, targets, device());
  CheckVocabBegin(vocab_begin);
  CheckF32(row_stats, device(), "row_stats");
  CheckShape(row_stats, {lm.rows, 2}, "row_stats");
  CrossEntropyGradient(logits, targets, VocabRows{vocab_begin, lm.cols, false}, row_stats,
                       grad_scale, dlogits);
}

void CudaBackend::CrossEntropyGradient(const Tensor& logits, const Tensor& targets,
                                       const VocabRows& vocab, const Tensor& row_stats,
                                       float grad_scale, Tensor& dlogits) {
  CheckFloat(dlogits, device(), "dlogits");
  CheckShape(dlogits, logits.shape(), "dlogits");
  BATON_CHECK(dlogits.raw() != logits.raw() || dlogits.dtype() == logits.dtype(),
              "in-place cross-entropy backward needs one dtype, got {} and {}", logits.ToString(),
              dlogits.ToString());
  Tensor factor = Workspace(1, DType::kF32);  // grad_scale / counted rows, computed on the device
  Compute([&] {
    LaunchCrossEntropyBackward(
        logits.raw(), logits.dtype(), static_cast<const int32_t*>(targets.raw()), vocab,
        row_stats.defined() ? static_cast<const float*>(row_stats.raw()) : nullptr, grad_scale,
        static_cast<float*>(factor.raw()), dlogits.raw(), dlogits.dtype(), targets.numel(),
        id_error_, stream_);
  });
}

}  // namespace baton::cuda
