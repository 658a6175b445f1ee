// CudaBackend: the Backend of kernels/backend.h on one NVIDIA GPU, made by MakeCudaBackend.
//
// GEMMs go through cuBLASLt (gemm.h); everything else is a CUDA kernel of this folder (launch.h).
// All work is queued on the backend's one compute stream, in call order; Synchronize() waits for
// it. Calls that return host values (SumOfSquares, AllFinite) and copies to or from host memory
// synchronise the stream before returning. Tensors are device tensors on this GPU, contiguous,
// allocated from allocator() (a CachingAllocator booked in the ledger); Copy() also takes host
// tensors on either side.
//
// Errors: argument errors throw at once. Out-of-range token or target ids are found by the
// kernels (which skip them) and thrown by the next synchronising call, naming the id.
// Numerics: f32 arithmetic on f32/bf16/f16 storage; deterministic (no float atomics, fixed
// reduction orders, one cuBLASLt algorithm per problem). f32 GEMMs are exact f32 unless
// options.allow_tf32.
//
// Every method first validates its arguments and books its workspace, then hands what it queues
// on the GPU to Compute(). CudaMetaBackend (MakeCudaMetaBackend, for the memory planner) is this
// backend with a MetaAllocator for cuda:N and a Compute() that runs nothing: the same checks and
// bookings (the cuBLASLt workspace included), no GPU touched, and no kernel with a meta branch of
// its own.
//
// Thread safety: one backend serves one thread, which it makes use its GPU (cudaSetDevice) on
// every call. Tensors must be released before the backend (they return to its allocator).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "core/function_ref.h"
#include "kernels/backend.h"
#include "kernels/cuda/caching_allocator.h"

namespace baton::cuda {

struct IdError;
struct VocabRows;  // launch.h
class CublasLtGemm;

struct CudaBackendOptions {
  bool allow_tf32 = false;                 // f32 GEMMs on tensor cores (10-bit mantissa inputs)
  bool force_cublas = false;               // every GEMM through cuBLAS, not cuBLASLt (tests)
  size_t gemm_workspace_bytes = 32 << 20;  // cuBLASLt workspace, booked as workspace
};

class CudaBackend : public Backend {
 public:
  // Throws baton::Error when GPU `device_index` does not exist (or no driver is loaded).
  CudaBackend(MemoryLedger& ledger, int device_index, CudaBackendOptions options = {});
  ~CudaBackend() override;

  // The compute stream: everything this backend does is ordered on it. A communicator orders its
  // own stream after this one with events (record here, wait there) and back.
  cudaStream_t stream() const { return stream_; }
  CachingAllocator& caching_allocator();  // not in a CudaMetaBackend
  const CudaBackendOptions& options() const { return options_; }

  Device device() const override { return Device::Cuda(index_); }
  Allocator& allocator() override { return *allocator_; }
  void Synchronize() override;

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
  void MoeDispatch(const Tensor& x, const Tensor& slots, const Tensor& weights,
                   Tensor& out) override;
  void MoeCombine(const Tensor& y, const Tensor& slots, const Tensor& weights,
                  Tensor& out) override;
  void MoeCombineWeightsBackward(const Tensor& dout, const Tensor& y, const Tensor& slots,
                                 Tensor& dweights) override;
  void SwiGluBackward(const Tensor& gate_up, const Tensor& dout, Tensor& dgate_up) override;
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
  void AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamWConfig& config,
             float grad_scale) override;
  void DequantizeInt8(const Tensor& q, const Tensor& scale, Tensor& out) override;
  void ApplyMask(Tensor& t, const Tensor& mask) override;
  void AdamW8bit(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_absmax, Tensor& v,
                 Tensor& v_absmax, const AdamWConfig& config, float grad_scale) override;

 protected:
  // CudaMetaBackend's: books what the other constructor books, touches no GPU.
  CudaBackend(std::unique_ptr<MetaAllocator> allocator, int device_index,
              CudaBackendOptions options);

 private:
  // A method's second half, after its checks and bookings: queues (or, where the method reads a
  // result back, runs) `computation`'s GPU work.
  virtual void Compute(FunctionRef<void()> computation) const { computation(); }
  // The bytes of the radix sort's temporary storage for an embedding backward over `rows` ids.
  virtual size_t SortWorkspaceBytes(int64_t rows) const;
  // Makes this backend's GPU current on the calling thread.
  void Activate() const;
  // Uninitialised device scratch, booked as workspace; freed (to the cache) with the handle.
  Tensor Workspace(int64_t elements, DType dtype);
  // A device copy of t in `dtype` (t itself when it already is).
  Tensor Cast(const Tensor& t, DType dtype);
  // Waits for the stream (reading back the id-error record on it), then raises an id error the
  // kernels recorded, if any.
  void SyncAndCheck();
  // The embedding over a token table of the whole vocabulary (`whole`: ids past it are errors)
  // or of one rank's shard from vocab_begin: EmbeddingForward and EmbeddingShardForward.
  void EmbeddingRowsForward(const Tensor& tokens, const Tensor& segment_starts, int64_t vocab_begin,
                            bool whole, const Tensor& wte, const Tensor& wpe, Tensor& out);
  void EmbeddingRowsBackward(const Tensor& tokens, const Tensor& segment_starts,
                             int64_t vocab_begin, bool whole, const Tensor& dout, Tensor& dwte,
                             Tensor& dwpe);
  // CrossEntropyBackward (row_stats undefined: each row's own softmax) and
  // CrossEntropyShardBackward after their own checks: dlogits's, then the kernels over logits'
  // columns = the vocabulary rows `vocab`.
  void CrossEntropyGradient(const Tensor& logits, const Tensor& targets, const VocabRows& vocab,
                            const Tensor& row_stats, float grad_scale, Tensor& dlogits);
  // Row-major GEMM on tensors of supported dtypes (see gemm.h): out = op(a) op(b) (+ bias).
  void RunMatmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
                 bool accumulate, const Tensor* bias);

  int index_;
  CudaBackendOptions options_;
  std::unique_ptr<Allocator> allocator_;  // a CachingAllocator, or CudaMetaBackend's MetaAllocator
  cudaStream_t stream_ = nullptr;         // null in a CudaMetaBackend
  Tensor id_error_buffer_;                // device memory for the kernels' first bad id...
  IdError* id_error_ = nullptr;           // ...as an IdError; read back by SyncAndCheck
  Tensor gemm_workspace_;
  std::unique_ptr<CublasLtGemm> gemm_;
};

// The CUDA backend that books and never computes (MakeCudaMetaBackend): stands for GPU
// `device_index` without using any GPU. Its tensors are meta tensors, each method checks its
// arguments and books what CudaBackend's would, and Compute() drops the GPU work: SumOfSquares
// returns 0, AllFinite true. Where the machine has no GPU, an embedding backward books a bound on
// the sort's storage instead of its exact size (docs/memory.md, Limits).
class CudaMetaBackend final : public CudaBackend {
 public:
  CudaMetaBackend(MemoryLedger& ledger, int device_index, CudaBackendOptions options = {});

 private:
  void Compute(FunctionRef<void()>) const override {}
  size_t SortWorkspaceBytes(int64_t rows) const override;
};

// Number of CUDA devices, or 0 when there is none or no driver (never throws). `why` (optional)
// gets the reason when it returns 0, e.g. "cudaGetDeviceCount: CUDA driver version is
// insufficient for CUDA runtime version (cudaErrorInsufficientDriver)".
int CudaDeviceCount(std::string* why = nullptr);

}  // namespace baton::cuda

namespace baton {
// The CUDA backend on GPU `device_index`; options default to exact f32 GEMMs.
std::unique_ptr<Backend> MakeCudaBackend(MemoryLedger& ledger, int device_index,
                                         cuda::CudaBackendOptions options = {});
// The CUDA backend in meta mode (see CudaBackend): books what it would on GPU `device_index`,
// computes nothing, needs no GPU.
std::unique_ptr<Backend> MakeCudaMetaBackend(MemoryLedger& ledger, int device_index,
                                             cuda::CudaBackendOptions options = {});
}  // namespace baton
