// F32Staging: f32 views of a kernel call's tensors, so each kernel is written once, for f32.
//
// f32 tensors are used in place (no copy, no allocation). A bf16/f16 tensor is converted into an
// f32 workspace tensor booked through the backend's allocator; the ones asked for with Out() or
// InOut() are converted back by Commit(). Tensors that alias (same storage, same dtype) share one
// f32 copy, so in-place kernels stay in place. The workspace is released when the staging object
// goes. Meta tensors (core/tensor.h) are booked the same way and never converted. One staging
// object serves one kernel call on one thread.
#pragma once

#include <vector>

#include "core/memory.h"
#include "core/tensor.h"

namespace baton::cpu {

class ThreadPool;

class F32Staging {
 public:
  F32Staging(Allocator& allocator, ThreadPool* pool) : allocator_(allocator), pool_(pool) {}
  F32Staging(const F32Staging&) = delete;
  F32Staging& operator=(const F32Staging&) = delete;

  // Read-only input. Undefined tensors give nullptr.
  const float* In(const Tensor& t);
  // Read and written (accumulating outputs). Undefined tensors give nullptr.
  float* InOut(Tensor& t);
  // Written only; the contents before the kernel are unspecified.
  float* Out(Tensor& t);
  // Converts every written 16-bit tensor back from its f32 copy. Call once, after the kernel.
  void Commit();

 private:
  struct Entry {
    Tensor target;
    Tensor f32;  // undefined when the target is itself f32
    bool loaded = false;
    bool written = false;
  };
  float* Stage(const Tensor& t, bool load, bool write);

  Allocator& allocator_;
  ThreadPool* pool_;
  std::vector<Entry> entries_;  // a handful per call
};

// Staging a piece at a time, for kernels that work on independent pieces (chunks of elements,
// rows, blocks of rows) and convert each into a small f32 buffer of the running thread instead
// of the whole tensor (F32Staging). t must be contiguous; offsets and counts are in elements.
//
// n f32 values of t from `offset`: t's own memory when it is f32, else converted into `buffer`.
const float* LoadChunk(const Tensor& t, int64_t offset, int64_t n, float* buffer);
// Where to compute a piece of t: t's memory when f32, else `buffer` (then StoreChunk).
float* ChunkTarget(Tensor& t, int64_t offset, float* buffer);
// As LoadChunk for a piece that is read and written (then StoreChunk).
float* LoadChunkInOut(Tensor& t, int64_t offset, int64_t n, float* buffer);
// Converts a computed piece back into t (nothing when t is f32: it was computed in place).
void StoreChunk(const float* values, Tensor& t, int64_t offset, int64_t n);

// Converts n floats between dtypes in fixed-size chunks on `pool` (null: serially).
void ConvertFloatsParallel(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                           ThreadPool* pool);

}  // namespace baton::cpu
