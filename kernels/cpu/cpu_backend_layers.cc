// CpuBackend: the GPT layer methods. Each validates its arguments and runs the f32 kernel from
// layer_kernels.h or attention.h. LayerNorm and GELU read and write bf16 activations directly
// (their BF16 overloads), and so does flash attention where the CPU multiplies bf16
// (FlashAttention*Bf16, attention.h). Other 16-bit tensors are converted to f32 for the kernel: the
// row kernels (LayerNorm, GELU, cross-entropy) convert one piece (chunk, row, block of rows) at a
// time into the running thread's buffer and back, so no f32 copy of an activation exists; the
// others stage whole tensors (F32Staging). Either way the f32 arithmetic is the same, and so are
// the bits.
#include <algorithm>
#include <cstring>
#include <initializer_list>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/f32_staging.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layer_kernels.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

// Checked before any kernel runs: kernels index with these ids and must not throw.
void CheckIdsBelow(const Tensor& ids, int64_t bound, const char* name) {
  if (ids.is_meta()) return;  // no ids to read
  const int32_t* p = ids.data<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    BATON_CHECK(p[i] >= 0 && p[i] < bound, "{}[{}] = {} is outside [0, {})", name, i, p[i], bound);
  }
}

// The bound on ids for a vocabulary shard (Backend::EmbeddingShardForward): any id >= 0 may be
// another rank's, so only negative ids are errors (i32 ids are all below 2^31).
constexpr int64_t kAnyId = int64_t{1} << 31;

void CheckVocabBegin(int64_t vocab_begin) {
  BATON_CHECK(vocab_begin >= 0 && vocab_begin < kAnyId, "vocab_begin {} is outside [0, 2^31)",
              vocab_begin);
}

// Targets are class ids in [0, bound) or kIgnoreTarget (a row the cross-entropy does not count).
void CheckTargets(const Tensor& targets, int64_t bound) {
  if (targets.is_meta()) return;
  const int32_t* p = targets.data<int32_t>();
  for (int64_t i = 0; i < targets.numel(); ++i) {
    BATON_CHECK(p[i] == kIgnoreTarget || (p[i] >= 0 && p[i] < bound),
                "targets[{}] = {} is outside [0, {}) and not {} (ignored)", i, p[i], bound,
                kIgnoreTarget);
  }
}

// Packed documents' segment starts (Backend::AttentionForward): undefined, or (B,T) i32 on the
// host. Positions (the embedding's; `documents`): 0 <= start[b,t] <= t, each either t (a
// document starts) or start[b,t-1]. What attention takes, the first key of each query (packed
// documents, narrowed by a sliding window: model/sublayer_ops.cc): 0 <= start[b,t] <= t and
// non-decreasing in t. Returns the data, or null when undefined (or meta).
const int32_t* CheckSegmentStarts(const Tensor& segment_starts, int64_t batch, int64_t seq,
                                  bool documents = false) {
  if (!segment_starts.defined()) return nullptr;
  CheckI32(segment_starts, "segment_starts");
  CheckShape(segment_starts, {batch, seq}, "segment_starts");
  if (segment_starts.is_meta()) return nullptr;
  const int32_t* p = segment_starts.data<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < seq; ++t) {
      const int32_t start = p[b * seq + t];
      const int32_t previous = t > 0 ? p[b * seq + t - 1] : 0;
      if (documents) {
        BATON_CHECK(start == t || (t > 0 && start == previous),
                    "segment_starts[{}, {}] = {}: a token's document starts at the token or where "
                    "the previous token's does",
                    b, t, start);
      } else {
        BATON_CHECK(start >= previous && start <= t,
                    "segment_starts[{}, {}] = {}: a query's first key is at most the query and "
                    "never before the previous query's ({})",
                    b, t, start, previous);
      }
    }
  }
  return p;
}

// How many targets the cross-entropy counts (those not kIgnoreTarget).
int64_t CountedTargets(const Tensor& targets) {
  const int32_t* p = targets.data<int32_t>();
  return targets.numel() - std::count(p, p + targets.numel(), kIgnoreTarget);
}

// The cross-entropy's loss: the sum of row_losses (an ignored row's is 0) in row order, divided
// by the number of counted rows; 0 when none is counted.
float MeanOverCountedRows(const float* row_losses, const Tensor& targets) {
  double sum = 0.0;
  for (int64_t r = 0; r < targets.numel(); ++r) sum += row_losses[r];
  const int64_t counted = CountedTargets(targets);
  return counted == 0 ? 0.0f : static_cast<float>(sum / static_cast<double>(counted));
}

// Logits (N, V) of any float dtype, not empty, with targets (N) i32 in [0, V) or kIgnoreTarget;
// for a shard's logits (N, Vs) (`shard`), any target >= 0 or kIgnoreTarget. Returns (N, V).
RowsCols CheckCrossEntropy(const Tensor& logits, const Tensor& targets, bool shard) {
  CheckFloat(logits, "logits");
  CheckI32(targets, "targets");
  const RowsCols lm = AsMatrix(logits, "logits");
  BATON_CHECK(lm.rows > 0 && lm.cols > 0, "cross-entropy of empty logits {}", logits.ToString());
  CheckNumel(targets, lm.rows, "targets");
  CheckTargets(targets, shard ? kAnyId : lm.cols);
  return lm;
}

AttentionShape CheckAttention(const Tensor& qkv, int num_heads) {
  CheckFloat(qkv, "qkv");
  BATON_CHECK(qkv.dim() == 3 && qkv.size(2) % 3 == 0, "qkv {} must be (B, T, 3C)", qkv.ToString());
  const AttentionShape shape{qkv.size(0), qkv.size(1), qkv.size(2) / 3, num_heads};
  BATON_CHECK(num_heads >= 1 && shape.channels % num_heads == 0,
              "{} heads do not divide {} channels", num_heads, shape.channels);
  return shape;
}

// A key-value cache for `shape`'s new queries after `past` positions: (B,S,C) in qkv's dtype,
// S >= past + Tq, contiguous on the host.
void CheckCache(const Tensor& cache, const Tensor& qkv, const AttentionShape& shape, int64_t past,
                const char* name) {
  CheckHostContiguous(cache, name);
  BATON_CHECK(cache.dtype() == qkv.dtype() && cache.dim() == 3 && cache.size(0) == shape.batch &&
                  cache.size(2) == shape.channels && past >= 0 && cache.size(1) >= past + shape.seq,
              "{} {} must be (B={}, S >= {} + {}, C={}) {}", name, cache.ToString(), shape.batch,
              past, shape.seq, shape.channels, Name(qkv.dtype()));
}

// Copies the column third `third` (1: keys, 2: values) of qkv (B,Tq,3C) into rows
// [past, past + Tq) of cache (B,S,C): the same dtype, so the same bits.
void AppendToCache(const Tensor& qkv, int third, int64_t past, Tensor& cache) {
  const int64_t batch = qkv.size(0), queries = qkv.size(1), c = cache.size(2);
  const int64_t slots = cache.size(1);
  const size_t element = SizeOf(qkv.dtype());
  const char* src = static_cast<const char*>(qkv.raw());
  char* dst = static_cast<char*>(cache.raw());
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < queries; ++i) {
      std::memcpy(dst + ((b * slots + past + i) * c) * element,
                  src + ((b * queries + i) * 3 * c + third * c) * element, c * element);
    }
  }
}

bool AnyHalf(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->dtype() != DType::kF32) return true;
  }
  return false;
}

}  // namespace

float* CpuBackend::PieceBuffer(const Tensor& buffers, int slot, int count, int index,
                               int64_t floats) {
  if (!buffers.defined()) return nullptr;
  return static_cast<float*>(buffers.raw()) + (slot * count + index) * floats;
}

Tensor CpuBackend::PieceBuffers(std::initializer_list<const Tensor*> tensors, int64_t floats) {
  if (!AnyHalf(tensors)) return Tensor();  // every tensor is used in place
  return Workspace(threads_ * static_cast<int64_t>(tensors.size()) * floats);
}

// The whole table is the shard at 0 whose ids must all lie in it.
void CpuBackend::EmbeddingForward(const Tensor& tokens, const Tensor& segment_starts,
                                  const Tensor& wte, const Tensor& wpe, Tensor& out) {
  CheckI32(tokens, "tokens");
  BATON_CHECK(wte.dim() == 2, "wte {} must be (V, C)", wte.ToString());
  CheckIdsBelow(tokens, wte.size(0), "tokens");
  EmbeddingShardForward(tokens, segment_starts, 0, wte, wpe, out);
}

void CpuBackend::EmbeddingShardForward(const Tensor& tokens, const Tensor& segment_starts,
                                       int64_t vocab_begin, const Tensor& wte, const Tensor& wpe,
                                       Tensor& out) {
  CheckI32(tokens, "tokens");
  CheckFloat(wte, "wte");
  CheckFloat(out, "out");
  CheckVocabBegin(vocab_begin);
  BATON_CHECK(tokens.dim() == 2, "tokens {} must be (B, T)", tokens.ToString());
  BATON_CHECK(wte.dim() == 2, "wte {} must be (V, C)", wte.ToString());
  const int64_t batch = tokens.size(0), seq = tokens.size(1), channels = wte.size(1);
  if (wpe.defined()) {
    CheckFloat(wpe, "wpe");
    BATON_CHECK(wpe.dim() == 2 && wte.size(1) == wpe.size(1),
                "wte {} and wpe {} must be (V, C) and (maxT, C)", wte.ToString(), wpe.ToString());
    BATON_CHECK(seq <= wpe.size(0), "sequence length {} exceeds wpe's {} positions", seq,
                wpe.size(0));
  }
  CheckShape(out, {batch, seq, channels}, "out");
  CheckIdsBelow(tokens, kAnyId, "tokens");
  const int32_t* segments = CheckSegmentStarts(segment_starts, batch, seq, /*documents=*/true);
  F32Staging staging(*allocator_, &pool_);
  const float* pwte = staging.In(wte);
  const float* pwpe = staging.In(wpe);
  float* pout = staging.Out(out);
  Compute([&] {
    cpu::EmbeddingForward(tokens.data<int32_t>(), segments, {vocab_begin, wte.size(0)}, pwte, pwpe,
                          pout, batch, seq, channels, &pool_);
    staging.Commit();
  });
}

void CpuBackend::EmbeddingBackward(const Tensor& tokens, const Tensor& segment_starts,
                                   const Tensor& dout, Tensor& dwte, Tensor& dwpe) {
  CheckI32(tokens, "tokens");
  if (dwte.defined()) {
    BATON_CHECK(dwte.dim() == 2, "dwte {} must be (V, C)", dwte.ToString());
    CheckIdsBelow(tokens, dwte.size(0), "tokens");
  }
  EmbeddingShardBackward(tokens, segment_starts, 0, dout, dwte, dwpe);
}

void CpuBackend::EmbeddingShardBackward(const Tensor& tokens, const Tensor& segment_starts,
                                        int64_t vocab_begin, const Tensor& dout, Tensor& dwte,
                                        Tensor& dwpe) {
  CheckI32(tokens, "tokens");
  CheckFloat(dout, "dout");
  CheckVocabBegin(vocab_begin);
  BATON_CHECK(tokens.dim() == 2, "tokens {} must be (B, T)", tokens.ToString());
  BATON_CHECK(dout.dim() == 3, "dout {} must be (B, T, C)", dout.ToString());
  const int64_t batch = tokens.size(0), seq = tokens.size(1), channels = dout.size(2);
  CheckShape(dout, {batch, seq, channels}, "dout");
  const int32_t* segments = CheckSegmentStarts(segment_starts, batch, seq, /*documents=*/true);
  if (dwte.defined()) {
    CheckFloat(dwte, "dwte");
    BATON_CHECK(dwte.dim() == 2 && dwte.size(1) == channels, "dwte {} must be (V, {})",
                dwte.ToString(), channels);
    CheckIdsBelow(tokens, kAnyId, "tokens");
  }
  if (dwpe.defined()) {
    CheckFloat(dwpe, "dwpe");
    BATON_CHECK(dwpe.dim() == 2 && dwpe.size(1) == channels && seq <= dwpe.size(0),
                "dwpe {} must be (maxT >= {}, {})", dwpe.ToString(), seq, channels);
  }
  F32Staging staging(*allocator_, &pool_);
  const float* pdout = staging.In(dout);
  float* pdwte = staging.InOut(dwte);
  float* pdwpe = staging.InOut(dwpe);
  Compute([&] {
    const VocabRows vocab{vocab_begin, dwte.defined() ? dwte.size(0) : 0};
    cpu::EmbeddingBackward(tokens.data<int32_t>(), segments, vocab, pdout, pdwte, pdwpe, batch, seq,
                           channels, &pool_);
    staging.Commit();
  });
}

void CpuBackend::LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                  Tensor& out, Tensor& mean, Tensor& rstd) {
  CheckFloat(x, "x");
  CheckFloat(weight, "weight");
  CheckFloat(bias, "bias");
  CheckFloat(out, "out");
  CheckF32(mean, "mean");
  CheckF32(rstd, "rstd");
  const RowsCols xm = AsMatrix(x, "x");
  CheckNumel(weight, xm.cols, "weight");
  CheckNumel(bias, xm.cols, "bias");
  CheckShape(out, x.shape(), "out");
  CheckNumel(mean, xm.rows, "mean");
  CheckNumel(rstd, xm.rows, "rstd");
  // One row at a time: bf16 x and out read and written directly, others through the slot's
  // buffers; weight and bias staged whole.
  const int64_t cols = xm.cols;
  if (AllBf16({&x, &out})) {
    F32Staging staging(*allocator_, &pool_);
    const float* pw = staging.In(weight);
    const float* pb = staging.In(bias);
    Compute([&] {
      cpu::LayerNormForward(Bf16Data(x), pw, pb, Bf16Data(out), mean.data<float>(),
                            rstd.data<float>(), xm.rows, cols, &pool_);
    });
    return;
  }
  Tensor buffers = PieceBuffers({&x, &out}, cols);
  F32Staging staging(*allocator_, &pool_);
  const float* pw = staging.In(weight);
  const float* pb = staging.In(bias);
  Compute([&] {
    float* pmean = mean.data<float>();
    float* prstd = rstd.data<float>();
    ParallelForWithSlot(xm.rows, &pool_, cols, [&](int64_t r, int slot) {
      const float* px = LoadChunk(x, r * cols, cols, PieceBuffer(buffers, slot, 2, 0, cols));
      float* po = ChunkTarget(out, r * cols, PieceBuffer(buffers, slot, 2, 1, cols));
      cpu::LayerNormForward(px, pw, pb, po, pmean + r, prstd + r, 1, cols, nullptr);
      StoreChunk(po, out, r * cols, cols);
    });
  });
}

void CpuBackend::LayerNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, Tensor& dx,
                                   Tensor& dweight, Tensor& dbias) {
  for (const auto& [t, name] : {std::pair{&dout, "dout"},
                                {&x, "x"},
                                {&weight, "weight"},
                                {&dx, "dx"},
                                {&dweight, "dweight"},
                                {&dbias, "dbias"}}) {
    CheckFloat(*t, name);
  }
  CheckF32(mean, "mean");
  CheckF32(rstd, "rstd");
  const RowsCols xm = AsMatrix(x, "x");
  CheckShape(dout, x.shape(), "dout");
  CheckShape(dx, x.shape(), "dx");
  CheckNumel(weight, xm.cols, "weight");
  CheckNumel(dweight, xm.cols, "dweight");
  CheckNumel(dbias, xm.cols, "dbias");
  CheckNumel(mean, xm.rows, "mean");
  CheckNumel(rstd, xm.rows, "rstd");
  // One block of rows at a time: bf16 dout, x and dx read and written directly, others through
  // the slot's buffers; weight and the weight/bias gradients staged whole.
  const int64_t cols = xm.cols;
  const int64_t blocks = (xm.rows + kLayerNormRowBlock - 1) / kLayerNormRowBlock;
  const int64_t block_floats = kLayerNormRowBlock * cols;
  const bool direct = AllBf16({&dout, &x, &dx});
  Tensor partials = Workspace(LayerNormBackwardScratch(xm.rows, cols));
  Tensor buffers = direct ? Tensor() : PieceBuffers({&dout, &x, &dx}, block_floats);
  F32Staging staging(*allocator_, &pool_);
  const float* pw = staging.In(weight);
  float* pdw = staging.InOut(dweight);
  float* pdb = staging.InOut(dbias);
  Compute([&] {
    const float* pmean = mean.data<float>();
    const float* prstd = rstd.data<float>();
    ParallelForWithSlot(blocks, &pool_, block_floats, [&](int64_t block, int slot) {
      const int64_t r0 = block * kLayerNormRowBlock;
      const int64_t begin = r0 * cols;
      const int64_t n = std::min(xm.rows - r0, kLayerNormRowBlock) * cols;
      float* block_partials = partials.data<float>() + block * 2 * cols;
      if (direct) {
        LayerNormBackwardBlock(Bf16Data(dout) + begin, Bf16Data(x) + begin, pw, pmean + r0,
                               prstd + r0, Bf16Data(dx) + begin, block_partials, n / cols, cols);
        return;
      }
      const float* pdout =
          LoadChunk(dout, begin, n, PieceBuffer(buffers, slot, 3, 0, block_floats));
      const float* px = LoadChunk(x, begin, n, PieceBuffer(buffers, slot, 3, 1, block_floats));
      float* pdx = LoadChunkInOut(dx, begin, n, PieceBuffer(buffers, slot, 3, 2, block_floats));
      LayerNormBackwardBlock(pdout, px, pw, pmean + r0, prstd + r0, pdx, block_partials, n / cols,
                             cols);
      StoreChunk(pdx, dx, begin, n);
    });
    LayerNormBackwardReduce(partials.data<float>(), blocks, pdw, pdb, cols, &pool_);
    staging.Commit();
  });
}

void CpuBackend::GeluForward(const Tensor& x, Tensor& out) {
  CheckFloat(x, "x");
  CheckFloat(out, "out");
  CheckShape(out, x.shape(), "out");
  Compute([&] {
    if (AllBf16({&x, &out})) {
      cpu::GeluForward(Bf16Data(x), Bf16Data(out), x.numel(), &pool_);
      return;
    }
    ParallelChunks(x.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float x_buffer[kChunk], out_buffer[kChunk];
      const int64_t n = end - begin;
      const float* px = LoadChunk(x, begin, n, x_buffer);
      float* po = ChunkTarget(out, begin, out_buffer);
      cpu::GeluForward(px, po, n, nullptr);
      StoreChunk(po, out, begin, n);
    });
  });
}

void CpuBackend::GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) {
  CheckFloat(x, "x");
  CheckFloat(dout, "dout");
  CheckFloat(dx, "dx");
  CheckShape(dout, x.shape(), "dout");
  CheckShape(dx, x.shape(), "dx");
  Compute([&] {
    if (AllBf16({&x, &dout, &dx})) {
      cpu::GeluBackward(Bf16Data(x), Bf16Data(dout), Bf16Data(dx), x.numel(), &pool_);
      return;
    }
    ParallelChunks(x.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float x_buffer[kChunk], dout_buffer[kChunk], dx_buffer[kChunk];
      const int64_t n = end - begin;
      const float* px = LoadChunk(x, begin, n, x_buffer);
      const float* pdout = LoadChunk(dout, begin, n, dout_buffer);
      float* pdx = LoadChunkInOut(dx, begin, n, dx_buffer);
      cpu::GeluBackward(px, pdout, pdx, n, nullptr);
      StoreChunk(pdx, dx, begin, n);
    });
  });
}

void CpuBackend::AttentionForward(const Tensor& qkv, const Tensor& segment_starts, int num_heads,
                                  Tensor& out, Tensor& probs) {
  const AttentionShape shape = CheckAttention(qkv, num_heads);
  const int32_t* segments = CheckSegmentStarts(segment_starts, shape.batch, shape.seq);
  CheckFloat(out, "out");
  CheckF32(probs, "probs");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckShape(probs, {shape.batch, shape.heads, shape.seq, shape.seq}, "probs");
  F32Staging staging(*allocator_, &pool_);
  const float* pqkv = staging.In(qkv);
  float* pout = staging.Out(out);
  Compute([&] {
    cpu::AttentionForward(pqkv, segments, pout, probs.data<float>(), shape, &pool_);
    staging.Commit();
  });
}

void CpuBackend::AttentionBackward(const Tensor& dout, const Tensor& qkv,
                                   const Tensor& segment_starts, const Tensor& probs, int num_heads,
                                   Tensor& dqkv) {
  const AttentionShape shape = CheckAttention(qkv, num_heads);
  const int32_t* segments = CheckSegmentStarts(segment_starts, shape.batch, shape.seq);
  CheckFloat(dout, "dout");
  CheckF32(probs, "probs");
  CheckFloat(dqkv, "dqkv");
  CheckShape(dout, {shape.batch, shape.seq, shape.channels}, "dout");
  CheckShape(probs, {shape.batch, shape.heads, shape.seq, shape.seq}, "probs");
  CheckShape(dqkv, qkv.shape(), "dqkv");
  Tensor scratch = Workspace(AttentionBackwardScratch(shape, threads_));
  F32Staging staging(*allocator_, &pool_);
  const float* pdout = staging.In(dout);
  const float* pqkv = staging.In(qkv);
  float* pdqkv = staging.InOut(dqkv);
  Compute([&] {
    cpu::AttentionBackward(pdout, pqkv, segments, probs.data<float>(), pdqkv, scratch.data<float>(),
                           shape, &pool_);
    staging.Commit();
  });
}

void CpuBackend::FlashAttentionForward(const Tensor& qkv, const Tensor& segment_starts,
                                       int num_heads, Tensor& out, Tensor& lse) {
  const AttentionShape shape = CheckAttention(qkv, num_heads);
  const int32_t* segments = CheckSegmentStarts(segment_starts, shape.batch, shape.seq);
  CheckFloat(out, "out");
  CheckF32(lse, "lse");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckShape(lse, {shape.batch, shape.heads, shape.seq}, "lse");
  if (AllBf16({&qkv, &out}) && Bf16GemmInUse()) {  // bf16 products, nothing staged
    Tensor scratch = Workspace(FlashAttentionForwardScratchBf16(shape, threads_));
    Compute([&] {
      cpu::FlashAttentionForwardBf16(Bf16Data(qkv), segments, Bf16Data(out), lse.data<float>(),
                                     scratch.data<float>(), shape, &pool_);
    });
    return;
  }
  Tensor scratch = Workspace(FlashAttentionForwardScratch(shape, threads_));
  F32Staging staging(*allocator_, &pool_);
  const float* pqkv = staging.In(qkv);
  float* pout = staging.Out(out);
  Compute([&] {
    cpu::FlashAttentionForward(pqkv, segments, pout, lse.data<float>(), scratch.data<float>(),
                               shape, &pool_);
    staging.Commit();
  });
}

void CpuBackend::FlashAttentionBackward(const Tensor& dout, const Tensor& qkv,
                                        const Tensor& segment_starts, const Tensor& out,
                                        const Tensor& lse, int num_heads, Tensor& dqkv) {
  const AttentionShape shape = CheckAttention(qkv, num_heads);
  const int32_t* segments = CheckSegmentStarts(segment_starts, shape.batch, shape.seq);
  CheckFloat(dout, "dout");
  CheckFloat(out, "out");
  CheckF32(lse, "lse");
  CheckFloat(dqkv, "dqkv");
  CheckShape(dout, {shape.batch, shape.seq, shape.channels}, "dout");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckShape(lse, {shape.batch, shape.heads, shape.seq}, "lse");
  CheckShape(dqkv, qkv.shape(), "dqkv");
  if (AllBf16({&dout, &qkv, &out, &dqkv}) && Bf16GemmInUse()) {  // bf16 products, nothing staged
    Tensor scratch = Workspace(FlashAttentionBackwardScratchBf16(shape, threads_));
    Compute([&] {
      cpu::FlashAttentionBackwardBf16(Bf16Data(dout), Bf16Data(qkv), segments, Bf16Data(out),
                                      lse.data<float>(), Bf16Data(dqkv), scratch.data<float>(),
                                      shape, &pool_);
    });
    return;
  }
  Tensor scratch = Workspace(FlashAttentionBackwardScratch(shape, threads_));
  F32Staging staging(*allocator_, &pool_);
  const float* pdout = staging.In(dout);
  const float* pqkv = staging.In(qkv);
  const float* pout = staging.In(out);
  float* pdqkv = staging.InOut(dqkv);
  Compute([&] {
    cpu::FlashAttentionBackward(pdout, pqkv, segments, pout, lse.data<float>(), pdqkv,
                                scratch.data<float>(), shape, &pool_);
    staging.Commit();
  });
}

// New keys and values are copied into the caches first; then the kernel reads f32: qkv and the
// caches in place when f32, else qkv staged whole (F32Staging) and the caches' first past + Tq
// rows converted into workspace.
void CpuBackend::CachedAttentionForward(const Tensor& qkv, int num_heads, int64_t past,
                                        Tensor& k_cache, Tensor& v_cache, Tensor& out) {
  const AttentionShape shape = CheckAttention(qkv, num_heads);
  CheckHostContiguous(qkv, "qkv");
  CheckFloat(out, "out");
  CheckShape(out, {shape.batch, shape.seq, shape.channels}, "out");
  CheckCache(k_cache, qkv, shape, past, "k_cache");
  CheckCache(v_cache, qkv, shape, past, "v_cache");
  const int64_t keys = past + shape.seq;
  const int64_t c = shape.channels;
  const bool half = qkv.dtype() != DType::kF32;
  Tensor scratch = Workspace(CachedAttentionScratch(threads_));
  Tensor k_f32 = half ? Workspace(shape.batch * keys * c) : Tensor();
  Tensor v_f32 = half ? Workspace(shape.batch * keys * c) : Tensor();
  F32Staging staging(*allocator_, &pool_);
  CachedAttentionArgs args;
  args.q = staging.In(qkv);
  args.q_ld = 3 * c;
  args.q_batch = shape.seq * 3 * c;
  args.out = staging.Out(out);
  args.past = past;
  args.shape = shape;
  args.bf16_probs = AllBf16({&qkv, &out}) && Bf16GemmInUse();  // as FlashAttentionForward
  Compute([&] {
    AppendToCache(qkv, 1, past, k_cache);
    AppendToCache(qkv, 2, past, v_cache);
    const int64_t slots = k_cache.size(1);
    if (half) {
      for (int64_t b = 0; b < shape.batch; ++b) {
        const size_t offset = b * slots * c * SizeOf(qkv.dtype());
        ConvertFloatsParallel(static_cast<const char*>(k_cache.raw()) + offset, qkv.dtype(),
                              k_f32.data<float>() + b * keys * c, DType::kF32, keys * c, &pool_);
        ConvertFloatsParallel(static_cast<const char*>(v_cache.raw()) + offset, qkv.dtype(),
                              v_f32.data<float>() + b * keys * c, DType::kF32, keys * c, &pool_);
      }
    }
    args.k = half ? k_f32.data<float>() : k_cache.data<float>();
    args.v = half ? v_f32.data<float>() : v_cache.data<float>();
    args.kv_ld = c;
    args.kv_batch = (half ? keys : slots) * c;
    cpu::CachedAttentionForward(args, scratch.data<float>(), &pool_);
    staging.Commit();
  });
}

void CpuBackend::CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss) {
  const RowsCols lm = CheckCrossEntropy(logits, targets, /*shard=*/false);
  CheckF32(loss, "loss");
  CheckNumel(loss, 1, "loss");
  Tensor row_losses = Workspace(lm.rows);
  Tensor buffers = PieceBuffers({&logits}, lm.cols);  // one row at a time
  Compute([&] {
    const int32_t* ptargets = targets.data<int32_t>();
    float* plosses = row_losses.data<float>();
    ParallelForWithSlot(lm.rows, &pool_, lm.cols, [&](int64_t r, int slot) {
      const float* prow =
          LoadChunk(logits, r * lm.cols, lm.cols, PieceBuffer(buffers, slot, 1, 0, lm.cols));
      cpu::CrossEntropyRowLosses(prow, ptargets + r, plosses + r, 1, lm.cols, nullptr);
    });
    loss.data<float>()[0] = MeanOverCountedRows(plosses, targets);
  });
}

void CpuBackend::CrossEntropyBackward(const Tensor& logits, const Tensor& targets, float grad_scale,
                                      Tensor& dlogits) {
  const RowsCols lm = CheckCrossEntropy(logits, targets, /*shard=*/false);
  CrossEntropyGradient(logits, targets, {0, lm.cols}, Tensor(), grad_scale, dlogits);
}

void CpuBackend::CrossEntropyShardStats(const Tensor& logits, const Tensor& targets,
                                        int64_t vocab_begin, Tensor& stats) {
  const RowsCols lm = CheckCrossEntropy(logits, targets, /*shard=*/true);
  CheckVocabBegin(vocab_begin);
  CheckF32(stats, "stats");
  CheckShape(stats, {lm.rows, 3}, "stats");
  Tensor buffers = PieceBuffers({&logits}, lm.cols);  // one row at a time
  Compute([&] {
    const int32_t* ptargets = targets.data<int32_t>();
    float* pstats = stats.data<float>();
    ParallelForWithSlot(lm.rows, &pool_, lm.cols, [&](int64_t r, int slot) {
      const float* prow =
          LoadChunk(logits, r * lm.cols, lm.cols, PieceBuffer(buffers, slot, 1, 0, lm.cols));
      cpu::CrossEntropyShardStats(prow, ptargets + r, {vocab_begin, lm.cols}, pstats + 3 * r, 1,
                                  nullptr);
    });
  });
}

void CpuBackend::CrossEntropyShardCombine(const Tensor& all_stats, const Tensor& targets,
                                          Tensor& row_stats, Tensor& loss) {
  CheckF32(all_stats, "all_stats");
  CheckI32(targets, "targets");
  CheckF32(row_stats, "row_stats");
  CheckF32(loss, "loss");
  BATON_CHECK(all_stats.dim() == 3 && all_stats.size(0) > 0 && all_stats.size(1) > 0 &&
                  all_stats.size(2) == 3,
              "all_stats {} must be (T >= 1, N >= 1, 3)", all_stats.ToString());
  const int64_t ranks = all_stats.size(0), rows = all_stats.size(1);
  CheckNumel(targets, rows, "targets");
  CheckTargets(targets, kAnyId);
  CheckShape(row_stats, {rows, 2}, "row_stats");
  CheckNumel(loss, 1, "loss");
  Tensor row_losses = Workspace(rows);
  Compute([&] {
    cpu::CrossEntropyCombineStats(all_stats.data<float>(), targets.data<int32_t>(), ranks, rows,
                                  row_stats.data<float>(), row_losses.data<float>());
    loss.data<float>()[0] = MeanOverCountedRows(row_losses.data<float>(), targets);
  });
}

void CpuBackend::CrossEntropyShardBackward(const Tensor& logits, const Tensor& targets,
                                           int64_t vocab_begin, const Tensor& row_stats,
                                           float grad_scale, Tensor& dlogits) {
  const RowsCols lm = CheckCrossEntropy(logits, targets, /*shard=*/true);
  CheckVocabBegin(vocab_begin);
  CheckF32(row_stats, "row_stats");
  CheckShape(row_stats, {lm.rows, 2}, "row_stats");
  CrossEntropyGradient(logits, targets, {vocab_begin, lm.cols}, row_stats, grad_scale, dlogits);
}

void CpuBackend::CrossEntropyGradient(const Tensor& logits, const Tensor& targets, VocabRows vocab,
                                      const Tensor& row_stats, float grad_scale, Tensor& dlogits) {
  CheckFloat(dlogits, "dlogits");
  CheckShape(dlogits, logits.shape(), "dlogits");
  // One row at a time. dlogits may be logits: the kernel works in place, and each row is read
  // (into its own buffer when 16-bit) before it is written.
  const int64_t rows = targets.numel(), cols = vocab.rows;
  Tensor buffers = PieceBuffers({&logits, &dlogits}, cols);
  Compute([&] {
    const int64_t counted = CountedTargets(targets);
    const float factor = counted == 0 ? 0.0f : grad_scale / static_cast<float>(counted);
    const int32_t* ptargets = targets.data<int32_t>();
    const float* pstats = row_stats.defined() ? row_stats.data<float>() : nullptr;
    ParallelForWithSlot(rows, &pool_, cols, [&](int64_t r, int slot) {
      const int64_t begin = r * cols;
      const float* prow = LoadChunk(logits, begin, cols, PieceBuffer(buffers, slot, 2, 0, cols));
      float* pout = ChunkTarget(dlogits, begin, PieceBuffer(buffers, slot, 2, 1, cols));
      cpu::CrossEntropyBackward(prow, ptargets + r, vocab,
                                pstats == nullptr ? nullptr : pstats + 2 * r, factor, pout, 1,
                                nullptr);
      StoreChunk(pout, dlogits, begin, cols);
    });
  });
}

}  // namespace baton::cpu
