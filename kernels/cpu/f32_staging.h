// F32Staging: f32 views of a kernel call's tensors, so each kernel is written once, for f32.
//
// f32 tensors are used in place (no copy, no allocation). A bf16/f16 tensor is converted into an
// f32 workspace tensor booked through the backend's allocator; the ones asked for with Out() or
// InOut() are converted back by Commit(). Tensors that alias (same storage, same dtype) share one
// f32 copy, so in-place kernels stay in place. The workspace is released when the staging object
// goes. Meta tensors (core/tensor.h) are booked the same way and never converted. One staging
// object serves one kernel call on one thread.
#pragma once

#include <initializer_list>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "kernels/cpu/fast_math.h"

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
// rows, blocks of rows, GEMM blocks) and convert each into a small f32 buffer of the running
// thread instead of the whole tensor (F32Staging). t must be contiguous; offsets, counts and
// leading dimensions are in elements.

// Elements per chunk of the elementwise ops (and of their reductions' fixed blocks, so that block
// sums do not depend on the thread count); 16-bit chunks are converted on the stack.
inline constexpr int64_t kChunk = 4096;

// A row-major f32 matrix: element (r, c) at data[r * ld + c].
struct MatrixView {
  float* data = nullptr;
  int64_t ld = 0;
};

// Rows [row0, row0 + rows) and columns [col0, col0 + cols) of t, read as a row-major matrix with
// ld columns: t's own memory when it is f32, else converted into `buffer` (ld = cols).
MatrixView LoadSubMatrix(const Tensor& t, int64_t ld, int64_t row0, int64_t rows, int64_t col0,
                         int64_t cols, float* buffer);
// Where to compute that part of t: t's memory when f32, else `buffer` (then StoreSubMatrix).
MatrixView SubMatrixTarget(const Tensor& t, int64_t ld, int64_t row0, int64_t col0, int64_t cols,
                           float* buffer);
// Converts a computed part back into t (nothing when t is f32: it was computed in place).
void StoreSubMatrix(const MatrixView& values, Tensor& t, int64_t ld, int64_t row0, int64_t rows,
                    int64_t col0, int64_t cols);

// The same for n consecutive elements from `offset` (a one-row part).
const float* LoadChunk(const Tensor& t, int64_t offset, int64_t n, float* buffer);
float* ChunkTarget(Tensor& t, int64_t offset, float* buffer);
// As LoadChunk for a piece that is read and written (then StoreChunk).
float* LoadChunkInOut(Tensor& t, int64_t offset, int64_t n, float* buffer);
void StoreChunk(const float* values, Tensor& t, int64_t offset, int64_t n);

// Whether every tensor is bf16: kernels overloaded for BF16 (fast_math.h) then read and write
// them where they are, with no f32 piece in between.
bool AllBf16(std::initializer_list<const Tensor*> tensors);
// A bf16 tensor's elements.
inline BF16* Bf16Data(const Tensor& t) { return static_cast<BF16*>(t.raw()); }

// Converts n floats between dtypes in fixed-size chunks on `pool` (null: serially).
void ConvertFloatsParallel(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                           ThreadPool* pool);

}  // namespace baton::cpu
