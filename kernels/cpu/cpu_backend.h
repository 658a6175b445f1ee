// CpuBackend: the Backend of kernels/backend.h on the host, made by MakeCpuBackend.
//
// GEMMs go to oneDNN matmul primitives (gemm.h); everything else is plain C++ loops, parallel
// over independent rows (a ThreadPool of `num_threads` threads) with cross-row sums in a fixed
// order, so the result bits do not depend on the thread count. Kernels compute in f32. Where all
// of a LayerNorm's, GELU's, Add's or Accumulate's activations are bf16 (and BiasBackward's dout),
// the kernel reads and writes them directly, widening and narrowing in registers. Other 16-bit
// tensors are staged through f32 workspace booked in the ledger (F32Staging), or, in elementwise
// ops and the row kernels, converted a piece at a time (chunks on the stack, rows or blocks of
// rows in per-thread buffers booked as workspace), so no f32 copy of them exists. Every path gives
// the f32 kernel's result on the same values, rounded once. The exception is
// Matmul of bf16 operands on a CPU that multiplies bf16 (Bf16GemmInUse): oneDNN reads them as
// they are and accumulates in f32. All tensors must be contiguous host tensors. Every call runs to
// completion before returning.
//
// Threads: the backend's pool does all the work, GEMMs included (each oneDNN call runs on
// one thread, once per fixed block of c; see gemm.h).
// Every kernel has two halves: first it validates its arguments and books its workspace and
// staging, then it hands its computation to Compute(). CpuMetaBackend (MakeCpuMetaBackend, the
// ledger-only backend the memory planner runs the real stage code on) is this backend with a
// MetaAllocator and a Compute() that runs nothing: the same checks and the same bookings, by
// construction, and no kernel has a meta branch of its own.
//
// Thread safety: one backend serves one thread; several backends may run concurrently.
#pragma once

#include <initializer_list>
#include <memory>

#include "core/function_ref.h"
#include "kernels/backend.h"
#include "kernels/cpu/thread_pool.h"

namespace baton::cpu {

struct VocabRows;  // layer_kernels.h

class CpuBackend : public Backend {
 public:
  CpuBackend(MemoryLedger& ledger, int num_threads);

  int num_threads() const { return threads_; }

  Device device() const override { return Device::Cpu(); }
  Allocator& allocator() override { return *allocator_; }
  void Synchronize() override {}

  void Zero(Tensor& t) override;
  void Copy(const Tensor& src, Tensor& dst) override;

  void Matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
              bool accumulate, const Tensor* bias) override;
  void BiasBackward(const Tensor& dout, Tensor& dbias) override;

  using Backend::AttentionBackward;
  using Backend::AttentionForward;
  using Backend::EmbeddingBackward;
  using Backend::EmbeddingForward;
  using Backend::FlashAttentionBackward;
  using Backend::FlashAttentionForward;
  void EmbeddingForward(const Tensor& tokens, const Tensor& segment_starts, const Tensor& wte,
                        const Tensor& wpe, Tensor& out) override;
  void EmbeddingBackward(const Tensor& tokens, const Tensor& segment_starts, const Tensor& dout,
                         Tensor& dwte, Tensor& dwpe) override;
  void EmbeddingShardForward(const Tensor& tokens, const Tensor& segment_starts,
                             int64_t vocab_begin, const Tensor& wte, const Tensor& wpe,
                             Tensor& out) override;
  void EmbeddingShardBackward(const Tensor& tokens, const Tensor& segment_starts,
                              int64_t vocab_begin, const Tensor& dout, Tensor& dwte,
                              Tensor& dwpe) override;
  void LayerNormForward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& out,
                        Tensor& mean, Tensor& rstd) override;
  void LayerNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                         const Tensor& mean, const Tensor& rstd, Tensor& dx, Tensor& dweight,
                         Tensor& dbias) override;
  void GeluForward(const Tensor& x, Tensor& out) override;
  void GeluBackward(const Tensor& x, const Tensor& dout, Tensor& dx) override;
  void AttentionForward(const Tensor& qkv, const Tensor& segment_starts, int num_heads, Tensor& out,
                        Tensor& probs) override;
  void AttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& segment_starts,
                         const Tensor& probs, int num_heads, Tensor& dqkv) override;
  void FlashAttentionForward(const Tensor& qkv, const Tensor& segment_starts, int num_heads,
                             Tensor& out, Tensor& lse) override;
  void FlashAttentionBackward(const Tensor& dout, const Tensor& qkv, const Tensor& segment_starts,
                              const Tensor& out, const Tensor& lse, int num_heads,
                              Tensor& dqkv) override;
  void CachedAttentionForward(const Tensor& qkv, int num_heads, int64_t past, Tensor& k_cache,
                              Tensor& v_cache, Tensor& out) override;
  void CrossEntropyForward(const Tensor& logits, const Tensor& targets, Tensor& loss) override;
  void CrossEntropyBackward(const Tensor& logits, const Tensor& targets, float grad_scale,
                            Tensor& dlogits) override;
  void CrossEntropyShardStats(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                              Tensor& stats) override;
  void CrossEntropyShardCombine(const Tensor& all_stats, const Tensor& targets, Tensor& row_stats,
                                Tensor& loss) override;
  void CrossEntropyShardBackward(const Tensor& logits, const Tensor& targets, int64_t vocab_begin,
                                 const Tensor& row_stats, float grad_scale,
                                 Tensor& dlogits) override;

  void RmsNormForward(const Tensor& x, const Tensor& weight, float eps, Tensor& out,
                      Tensor& rstd) override;
  void RmsNormBackward(const Tensor& dout, const Tensor& x, const Tensor& weight,
                       const Tensor& rstd, Tensor& dx, Tensor& dweight) override;
  void SwiGluForward(const Tensor& gate_up, Tensor& out) override;
  void SwiGluBackward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) override;
  void MoeDispatch(const Tensor& x, const Tensor& slots, const Tensor& weights,
                   Tensor& out) override;
  void MoeCombine(const Tensor& y, const Tensor& slots, const Tensor& weights,
                  Tensor& out) override;
  void MoeCombineWeightsBackward(const Tensor& dout, const Tensor& y, const Tensor& slots,
                                 Tensor& dweights) override;
  void RotaryEmbedding(Tensor& qkv, const Tensor& segment_starts, int64_t start,
                       const AttentionHeads& heads, const RopeConfig& rope, bool inverse) override;
  void RepeatKv(const Tensor& qkv, const AttentionHeads& heads, Tensor& out) override;
  void RepeatKvBackward(const Tensor& dout, const AttentionHeads& heads, Tensor& dqkv) override;
  void CopyColumns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col,
                   int64_t cols) override;

  void Add(const Tensor& a, const Tensor& b, Tensor& out) override;
  void Accumulate(const Tensor& x, Tensor& acc) override;
  void Scale(Tensor& t, float factor) override;

  double SumOfSquares(const Tensor& t) override;
  bool AllFinite(const Tensor& t) override;
  void DequantizeInt8(const Tensor& q, const Tensor& scale, Tensor& out) override;
  void ApplyMask(Tensor& t, const Tensor& mask) override;
  void AdamW8bit(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_absmax, Tensor& v,
                 Tensor& v_absmax, const AdamWConfig& config, float grad_scale) override;
  void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
             float grad_scale) override;

 protected:
  // Tensors from `allocator`; `num_threads` sizes the per-thread buffers booked, `pool_threads`
  // the pool that computes.
  CpuBackend(std::unique_ptr<Allocator> allocator, int num_threads, int pool_threads);

 private:
  // A kernel's second half, after its checks and bookings: runs `computation` (on the calling
  // thread; it uses the pool itself). The booked workspace is released after it, when the kernel
  // returns.
  virtual void Compute(FunctionRef<void()> computation) { computation(); }

  // Uninitialised f32 scratch of `floats` elements, booked as workspace.
  Tensor Workspace(int64_t floats);
  // Matmul with a 16-bit operand or out, m, n, k > 0, on a CPU that multiplies f32 only: the
  // operand every block of Sgemm shares (op(b) when c is cut by rows, op(a) by columns) and the
  // bias are staged whole; the other operand and out are converted block by block in per-thread
  // buffers, so neither has an f32 copy. Each block is the call Sgemm makes (gemm.h).
  void MatmulByBlocks(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
                      bool accumulate, const Tensor* bias, int64_t m, int64_t n, int64_t k);
  // Per-thread buffers for a row kernel that converts its 16-bit tensors one piece at a time:
  // `floats` per tensor per pool thread, as workspace. Undefined when every tensor is f32.
  Tensor PieceBuffers(std::initializer_list<const Tensor*> tensors, int64_t floats);
  // Buffer `index` (of `count`, `floats` each) of pool slot `slot` in PieceBuffers' tensor; null
  // when there is none (every tensor f32, so none is needed).
  static float* PieceBuffer(const Tensor& buffers, int slot, int count, int index, int64_t floats);
  // CrossEntropyBackward (row_stats undefined: each row's own softmax) and
  // CrossEntropyShardBackward, after their own checks: dlogits's checks, then the kernel over
  // logits' columns = the vocabulary rows `vocab`.
  void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, VocabRows vocab,
                            const Tensor& row_stats, float grad_scale, Tensor& dlogits);

  std::unique_ptr<Allocator> allocator_;  // CpuAllocator, or CpuMetaBackend's MetaAllocator
  int threads_;
  ThreadPool pool_;
};

// The CPU backend that books and never computes (MakeCpuMetaBackend): its tensors are meta
// tensors (core/tensor.h), each kernel checks its arguments and books exactly what CpuBackend's
// would for `num_threads` threads, and Compute() drops the computation. So SumOfSquares returns
// 0, AllFinite true, and copies move nothing.
class CpuMetaBackend final : public CpuBackend {
 public:
  CpuMetaBackend(MemoryLedger& ledger, int num_threads);

 private:
  void Compute(FunctionRef<void()>) override {}
};

}  // namespace baton::cpu
