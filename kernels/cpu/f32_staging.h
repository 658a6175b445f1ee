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

// Converts n floats between dtypes in fixed-size chunks on `pool` (null: serially).
void ConvertFloatsParallel(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                           ThreadPool* pool);

}  // namespace baton::cpu
