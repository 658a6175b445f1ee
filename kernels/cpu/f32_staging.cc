// F32Staging: f32 copies of 16-bit tensors for the CPU kernels (see f32_staging.h).
#include "kernels/cpu/f32_staging.h"

#include "core/error.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {

void ConvertFloatsParallel(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                           ThreadPool* pool) {
  const size_t src_size = SizeOf(src_dtype);
  const size_t dst_size = SizeOf(dst_dtype);
  ParallelChunks(n, 1 << 14, pool, [&](int64_t begin, int64_t end) {
    ConvertFloats(static_cast<const char*>(src) + begin * src_size, src_dtype,
                  static_cast<char*>(dst) + begin * dst_size, dst_dtype,
                  static_cast<size_t>(end - begin));
  });
}

bool AllBf16(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->dtype() != DType::kBF16) return false;
  }
  return true;
}

MatrixView LoadSubMatrix(const Tensor& t, int64_t ld, int64_t row0, int64_t rows, int64_t col0,
                         int64_t cols, float* buffer) {
  if (t.dtype() == DType::kF32) {
    return {const_cast<float*>(static_cast<const float*>(t.raw())) + row0 * ld + col0, ld};
  }
  for (int64_t r = 0; r < rows; ++r) {
    ConvertFloats(static_cast<const char*>(t.raw()) + ((row0 + r) * ld + col0) * 2 /* 16-bit */,
                  t.dtype(), buffer + r * cols, DType::kF32, static_cast<size_t>(cols));
  }
  return {buffer, cols};
}

MatrixView SubMatrixTarget(const Tensor& t, int64_t ld, int64_t row0, int64_t col0, int64_t cols,
                           float* buffer) {
  if (t.dtype() == DType::kF32) return {static_cast<float*>(t.raw()) + row0 * ld + col0, ld};
  return {buffer, cols};
}

void StoreSubMatrix(const MatrixView& values, Tensor& t, int64_t ld, int64_t row0, int64_t rows,
                    int64_t col0, int64_t cols) {
  if (t.dtype() == DType::kF32) return;  // computed in place
  for (int64_t r = 0; r < rows; ++r) {
    ConvertFloats(values.data + r * values.ld, DType::kF32,
                  static_cast<char*>(t.raw()) + ((row0 + r) * ld + col0) * 2, t.dtype(),
                  static_cast<size_t>(cols));
  }
}

// A chunk is row 0, columns [offset, offset + n), of t read as one row.
const float* LoadChunk(const Tensor& t, int64_t offset, int64_t n, float* buffer) {
  return LoadSubMatrix(t, 0, 0, 1, offset, n, buffer).data;
}

float* ChunkTarget(Tensor& t, int64_t offset, float* buffer) {
  return SubMatrixTarget(t, 0, 0, offset, 0, buffer).data;
}

float* LoadChunkInOut(Tensor& t, int64_t offset, int64_t n, float* buffer) {
  return LoadSubMatrix(t, 0, 0, 1, offset, n, buffer).data;
}

void StoreChunk(const float* values, Tensor& t, int64_t offset, int64_t n) {
  StoreSubMatrix({const_cast<float*>(values), n}, t, 0, 0, 1, offset, n);
}

float* F32Staging::Stage(const Tensor& t, bool load, bool write) {
  if (!t.defined()) return nullptr;
  BATON_CHECK(IsFloating(t.dtype()), "expected a float tensor, got {}", t.ToString());
  if (t.dtype() == DType::kF32) return static_cast<float*>(t.raw());
  Entry* entry = nullptr;
  for (Entry& e : entries_) {
    if (e.target.raw() == t.raw() && e.target.dtype() == t.dtype()) {
      BATON_CHECK(e.target.numel() == t.numel(), "{} partly overlaps {}", t.ToString(),
                  e.target.ToString());
      entry = &e;
    }
  }
  if (entry == nullptr) {
    entries_.push_back(
        {t, Tensor::Empty(allocator_, t.shape(), DType::kF32, MemCategory::kWorkspace)});
    entry = &entries_.back();
  }
  if (load && !entry->loaded) {
    if (!t.is_meta()) {
      ConvertFloatsParallel(t.raw(), t.dtype(), entry->f32.raw(), DType::kF32, t.numel(), pool_);
    }
    entry->loaded = true;
  }
  entry->written = entry->written || write;
  return static_cast<float*>(entry->f32.raw());
}

const float* F32Staging::In(const Tensor& t) { return Stage(t, /*load=*/true, /*write=*/false); }
float* F32Staging::InOut(Tensor& t) { return Stage(t, /*load=*/true, /*write=*/true); }
float* F32Staging::Out(Tensor& t) { return Stage(t, /*load=*/false, /*write=*/true); }

void F32Staging::Commit() {
  for (Entry& e : entries_) {
    if (!e.written) continue;
    if (!e.target.is_meta()) {
      ConvertFloatsParallel(e.f32.raw(), DType::kF32, e.target.raw(), e.target.dtype(),
                            e.target.numel(), pool_);
    }
    e.written = false;
  }
}

}  // namespace baton::cpu
