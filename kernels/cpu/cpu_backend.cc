// CpuBackend: construction, memory, GEMM, elementwise ops, reductions and AdamW (the GPT layer
// methods are in cpu_backend_layers.cc).
#include "kernels/cpu/cpu_backend.h"

#include <malloc.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/checks.h"
#include "kernels/cpu/f32_staging.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/layer_kernels.h"
#include "kernels/cpu/parallel.h"
#include "kernels/quantize.h"

namespace baton {

std::unique_ptr<Backend> MakeCpuBackend(MemoryLedger& ledger, int num_threads) {
  return std::make_unique<cpu::CpuBackend>(ledger, num_threads);
}

std::unique_ptr<Backend> MakeCpuMetaBackend(MemoryLedger& ledger, int num_threads) {
  return std::make_unique<cpu::CpuMetaBackend>(ledger, num_threads);
}

namespace cpu {
namespace {

void CheckSameShape(const Tensor& a, const Tensor& b, const char* name_a, const char* name_b) {
  BATON_CHECK(a.shape() == b.shape(), "{} {} and {} {} differ in shape", name_a, a.ToString(),
              name_b, b.ToString());
}

// Non-finite means all exponent bits set, in each format.
bool ChunkAllFinite(const void* data, DType dtype, int64_t n) {
  uint32_t bad = 0;
  if (dtype == DType::kF32) {
    const uint32_t* bits = static_cast<const uint32_t*>(data);
    for (int64_t i = 0; i < n; ++i) bad |= (bits[i] & 0x7f800000u) == 0x7f800000u;
  } else {
    const uint16_t* bits = static_cast<const uint16_t*>(data);
    const uint16_t mask = dtype == DType::kF16 ? 0x7c00u : 0x7f80u;
    for (int64_t i = 0; i < n; ++i) bad |= (bits[i] & mask) == mask;
  }
  return bad == 0;
}

// A step's activations are allocated and freed again every step. glibc would hand the pages of
// large freed blocks back to the OS (munmap, or trimming the heap top) and the next step would
// fault them in again, zeroed by the kernel: measured, the first micro-batches of each step ran
// ~1.7x slower (bench/README.md, "Where the bubble went"). So every process with a computing CPU
// backend keeps its freed memory for reuse: blocks up to 32 MiB (glibc's largest threshold) come
// from the heap and the heap is never trimmed. Resident memory then stays at its peak, as with
// any caching allocator; the ledger still books live tensors only.
void KeepFreedMemory() {
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  });
}

// out = bias broadcast to every row (or out += it), in out's dtype: the bias term of a bf16
// product that oneDNN then accumulates onto (beta = 1).
void BroadcastBiasRows(const Tensor& bias, Tensor& out, int64_t m, int64_t n, bool accumulate) {
  std::vector<float> bias_f32(static_cast<size_t>(n));
  std::vector<float> row(static_cast<size_t>(n));
  ConvertFloats(bias.raw(), bias.dtype(), bias_f32.data(), DType::kF32, static_cast<size_t>(n));
  char* base = static_cast<char*>(out.raw());
  const size_t row_bytes = static_cast<size_t>(n) * SizeOf(out.dtype());
  if (!accumulate && m > 0) {  // the bias in out's dtype once, then copied to every row
    ConvertFloats(bias_f32.data(), DType::kF32, base, out.dtype(), static_cast<size_t>(n));
    for (int64_t i = 1; i < m; ++i)
      std::memcpy(base + static_cast<size_t>(i) * row_bytes, base, row_bytes);
    return;
  }
  for (int64_t i = 0; i < m; ++i) {
    void* target = base + static_cast<size_t>(i) * row_bytes;
    ConvertFloats(target, out.dtype(), row.data(), DType::kF32, static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) row[j] += bias_f32[j];
    ConvertFloats(row.data(), DType::kF32, target, out.dtype(), static_cast<size_t>(n));
  }
}

// out = a + b over n bf16 elements, the sum in f32 (out may be a or b).
BATON_SIMD_CLONES void AddRange(const BF16* a, const BF16* b, BF16* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Narrow<BF16>(Widen(a[i]) + Widen(b[i]));
}

}  // namespace

CpuBackend::CpuBackend(MemoryLedger& ledger, int num_threads)
    : CpuBackend(std::make_unique<CpuAllocator>(ledger), num_threads, num_threads) {
  KeepFreedMemory();
}

CpuBackend::CpuBackend(std::unique_ptr<Allocator> allocator, int num_threads, int pool_threads)
    : allocator_(std::move(allocator)), threads_(num_threads), pool_(pool_threads) {}

CpuMetaBackend::CpuMetaBackend(MemoryLedger& ledger, int num_threads)
    : CpuBackend(std::make_unique<MetaAllocator>(ledger, Device::Cpu()), num_threads,
                 /*pool_threads=*/1) {}

Tensor CpuBackend::Workspace(int64_t floats) {
  return Tensor::Empty(*allocator_, {floats}, DType::kF32, MemCategory::kWorkspace);
}

void CpuBackend::Zero(Tensor& t) {
  CheckHostContiguous(t, "t");
  Compute([&] {
    if (t.nbytes() > 0) std::memset(t.raw(), 0, t.nbytes());
  });
}

void CpuBackend::Copy(const Tensor& src, Tensor& dst) {
  CheckHostContiguous(src, "src");
  CheckHostContiguous(dst, "dst");
  CheckSameShape(src, dst, "src", "dst");
  Compute([&] {
    if (src.dtype() == dst.dtype()) {
      if (src.raw() == dst.raw()) return;
      const char* from = static_cast<const char*>(src.raw());
      char* to = static_cast<char*>(dst.raw());
      const int64_t bytes = static_cast<int64_t>(src.nbytes());
      ParallelChunks(bytes, 1 << 18, &pool_, [&](int64_t begin, int64_t end) {
        std::memmove(to + begin, from + begin, static_cast<size_t>(end - begin));
      });
      return;
    }
    BATON_CHECK(IsFloating(src.dtype()) && IsFloating(dst.dtype()), "cannot copy {} into {}",
                src.ToString(), dst.ToString());
    ConvertFloatsParallel(src.raw(), src.dtype(), dst.raw(), dst.dtype(), src.numel(), &pool_);
  });
}

void CpuBackend::Matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& out,
                        bool accumulate, const Tensor* bias) {
  CheckFloat(a, "a");
  CheckFloat(b, "b");
  CheckFloat(out, "out");
  const RowsCols am = AsMatrix(a, "a");
  const RowsCols bm = AsMatrix(b, "b");
  const RowsCols om = AsMatrix(out, "out");
  const int64_t m = trans_a ? am.cols : am.rows;
  const int64_t k = trans_a ? am.rows : am.cols;
  const int64_t n = trans_b ? bm.rows : bm.cols;
  BATON_CHECK(k == (trans_b ? bm.cols : bm.rows),
              "Matmul: op(a) of {} has {} columns but op(b) "
              "of {} has {} rows",
              a.ToString(), k, b.ToString(), trans_b ? bm.cols : bm.rows);
  BATON_CHECK(om.rows == m && om.cols == n, "Matmul: out {} must be ({}, {})", out.ToString(), m,
              n);
  BATON_CHECK(out.raw() != a.raw() && out.raw() != b.raw(), "Matmul: out aliases an input");
  if (bias != nullptr) {
    CheckFloat(*bias, "bias");
    CheckNumel(*bias, n, "bias");
  }
  if (a.dtype() == DType::kBF16 && b.dtype() == DType::kBF16 &&
      (out.dtype() == DType::kF32 || out.dtype() == DType::kBF16) && Bf16GemmInUse()) {
    // bf16 x bf16 with f32 accumulation in oneDNN: no f32 copy of the operands.
    Compute([&] {
      float beta = accumulate ? 1.0f : 0.0f;
      if (bias != nullptr) {
        BroadcastBiasRows(*bias, out, m, n, accumulate);
        beta = 1.0f;
      }
      Bf16Gemm(trans_a, trans_b, m, n, k, 1.0f, a.raw(), am.cols, b.raw(), bm.cols, beta, out.raw(),
               out.dtype(), n, &pool_);
    });
    return;
  }
  const bool any_half =
      a.dtype() != DType::kF32 || b.dtype() != DType::kF32 || out.dtype() != DType::kF32;
  if (any_half && m > 0 && n > 0 && k > 0) {
    MatmulByBlocks(a, trans_a, b, trans_b, out, accumulate, bias, m, n, k);
    return;
  }
  F32Staging staging(*allocator_, &pool_);
  const float* pa = staging.In(a);
  const float* pb = staging.In(b);
  const float* pbias = bias != nullptr ? staging.In(*bias) : nullptr;
  float* po = accumulate ? staging.InOut(out) : staging.Out(out);
  Compute([&] {
    float beta = accumulate ? 1.0f : 0.0f;
    if (pbias != nullptr) {
      BroadcastRows(pbias, po, m, n, accumulate, &pool_);
      beta = 1.0f;
    }
    Sgemm(trans_a, trans_b, m, n, k, 1.0f, pa, am.cols, pb, bm.cols, beta, po, n, &pool_);
    staging.Commit();
  });
}

void CpuBackend::MatmulByBlocks(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                                Tensor& out, bool accumulate, const Tensor* bias, int64_t m,
                                int64_t n, int64_t k) {
  // Sgemm's blocks of c: rows [begin, begin + size) of c and of op(a), with all of op(b); or
  // columns of c and of op(b), with all of op(a).
  const GemmBlocking g = BlockingOf(m, n);
  const Tensor& varying = g.split_rows ? a : b;
  const int64_t c_cross = g.split_rows ? n : m;                   // c's other side
  const int64_t block = std::min(g.block, g.split_rows ? m : n);  // one short block: its size
  const int64_t varying_floats = varying.dtype() == DType::kF32 ? 0 : block * k;
  const int64_t c_floats = out.dtype() == DType::kF32 ? 0 : block * c_cross;
  const int64_t slot_floats = varying_floats + c_floats;
  const int64_t slots = g.blocks == 1 ? 1 : threads_;  // a single block runs inline
  Tensor buffers = slot_floats > 0 ? Workspace(slots * slot_floats) : Tensor();
  F32Staging staging(*allocator_, &pool_);
  const float* shared = staging.In(g.split_rows ? b : a);  // mostly a weight
  const float* pbias = bias != nullptr ? staging.In(*bias) : nullptr;
  Compute([&] {
    CheckGemmSizes(m, n, k);  // before the parallel loop: its tasks must not throw
    const float beta = accumulate || pbias != nullptr ? 1.0f : 0.0f;
    ParallelForWithSlot(g.blocks, &pool_, g.block * c_cross * k, [&](int64_t index, int slot) {
      const int64_t begin = index * g.block;
      const int64_t size = std::min(g.block, (g.split_rows ? m : n) - begin);
      float* varying_buffer =
          varying_floats > 0 ? buffers.data<float>() + slot * slot_floats : nullptr;
      float* c_buffer =
          c_floats > 0 ? buffers.data<float>() + slot * slot_floats + varying_floats : nullptr;
      // The block of the varying operand, as stored: op(a)'s rows are a's rows, or its columns
      // when transposed; op(b)'s columns are b's columns, or its rows when transposed.
      MatrixView part;
      if (g.split_rows) {
        part = trans_a ? LoadSubMatrix(a, m, 0, k, begin, size, varying_buffer)
                       : LoadSubMatrix(a, k, begin, size, 0, k, varying_buffer);
      } else {
        part = trans_b ? LoadSubMatrix(b, k, begin, size, 0, k, varying_buffer)
                       : LoadSubMatrix(b, n, 0, k, begin, size, varying_buffer);
      }
      const int64_t row0 = g.split_rows ? begin : 0, rows = g.split_rows ? size : m;
      const int64_t col0 = g.split_rows ? 0 : begin, cols = g.split_rows ? n : size;
      const MatrixView c = accumulate ? LoadSubMatrix(out, n, row0, rows, col0, cols, c_buffer)
                                      : SubMatrixTarget(out, n, row0, col0, cols, c_buffer);
      if (pbias != nullptr) {
        for (int64_t r = 0; r < rows; ++r) {
          BroadcastRows(pbias + col0, c.data + r * c.ld, 1, cols, accumulate, nullptr);
        }
      }
      if (g.split_rows) {
        SgemmBlock(trans_a, trans_b, size, n, k, 1.0f, part.data, part.ld, shared, trans_b ? k : n,
                   beta, c.data, c.ld);
      } else {
        SgemmBlock(trans_a, trans_b, m, size, k, 1.0f, shared, trans_a ? m : k, part.data, part.ld,
                   beta, c.data, c.ld);
      }
      StoreSubMatrix(c, out, n, row0, rows, col0, cols);
    });
  });
}

void CpuBackend::BiasBackward(const Tensor& dout, Tensor& dbias) {
  CheckFloat(dout, "dout");
  CheckFloat(dbias, "dbias");
  const RowsCols dm = AsMatrix(dout, "dout");
  CheckNumel(dbias, dm.cols, "dbias");
  F32Staging staging(*allocator_, &pool_);
  const bool direct = AllBf16({&dout});  // summed as it is, not staged
  const float* pd = direct ? nullptr : staging.In(dout);
  float* pdbias = staging.InOut(dbias);
  Compute([&] {
    if (direct) {
      ColumnSumsAccumulate(Bf16Data(dout), dm.rows, dm.cols, pdbias, &pool_);
    } else {
      ColumnSumsAccumulate(pd, dm.rows, dm.cols, pdbias, &pool_);
    }
    staging.Commit();
  });
}

void CpuBackend::Add(const Tensor& a, const Tensor& b, Tensor& out) {
  CheckFloat(a, "a");
  CheckFloat(b, "b");
  CheckFloat(out, "out");
  CheckSameShape(a, out, "a", "out");
  CheckSameShape(b, out, "b", "out");
  Compute([&] {
    if (AllBf16({&a, &b, &out})) {
      ParallelChunks(out.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
        AddRange(Bf16Data(a) + begin, Bf16Data(b) + begin, Bf16Data(out) + begin, end - begin);
      });
      return;
    }
    ParallelChunks(out.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float a_buffer[kChunk], b_buffer[kChunk], out_buffer[kChunk];
      const int64_t n = end - begin;
      const float* pa = LoadChunk(a, begin, n, a_buffer);
      const float* pb = LoadChunk(b, begin, n, b_buffer);
      float* po = ChunkTarget(out, begin, out_buffer);
      for (int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
      StoreChunk(po, out, begin, n);
    });
  });
}

void CpuBackend::Accumulate(const Tensor& x, Tensor& acc) {
  CheckFloat(x, "x");
  CheckFloat(acc, "acc");
  CheckSameShape(x, acc, "x", "acc");
  Compute([&] {
    if (AllBf16({&x, &acc})) {
      ParallelChunks(acc.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
        AddRange(Bf16Data(x) + begin, Bf16Data(acc) + begin, Bf16Data(acc) + begin, end - begin);
      });
      return;
    }
    ParallelChunks(acc.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float x_buffer[kChunk], acc_buffer[kChunk];
      const int64_t n = end - begin;
      const float* px = LoadChunk(x, begin, n, x_buffer);
      float* pacc = LoadChunkInOut(acc, begin, n, acc_buffer);
      for (int64_t i = 0; i < n; ++i) pacc[i] += px[i];
      StoreChunk(pacc, acc, begin, n);
    });
  });
}

void CpuBackend::Scale(Tensor& t, float factor) {
  CheckFloat(t, "t");
  Compute([&] {
    ParallelChunks(t.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float buffer[kChunk];
      const int64_t n = end - begin;
      float* p = LoadChunkInOut(t, begin, n, buffer);
      for (int64_t i = 0; i < n; ++i) p[i] *= factor;
      StoreChunk(p, t, begin, n);
    });
  });
}

void CpuBackend::DequantizeInt8(const Tensor& q, const Tensor& scale, Tensor& out) {
  CheckI8(q, "q");
  CheckF32(scale, "scale");
  CheckFloat(out, "out");
  CheckInt8WeightShapes(q, scale, out);
  Compute([&] {
    const int64_t cols = q.size(1);
    const int8_t* codes = q.data<int8_t>();
    const float* scales = scale.data<float>();
    ParallelChunks(q.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float buffer[kChunk];
      const int64_t n = end - begin;
      float* values = ChunkTarget(out, begin, buffer);
      for (int64_t i = 0; i < n; ++i) {
        values[i] = static_cast<float>(codes[begin + i]) * scales[(begin + i) % cols];
      }
      StoreChunk(values, out, begin, n);
    });
  });
}

void CpuBackend::ApplyMask(Tensor& t, const Tensor& mask) {
  CheckFloat(t, "t");
  CheckU8(mask, "mask");
  CheckSameShape(t, mask, "t", "mask");
  Compute([&] {
    const size_t element = SizeOf(t.dtype());
    char* values = static_cast<char*>(t.raw());
    const uint8_t* keep = mask.data<uint8_t>();
    ParallelChunks(t.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        if (keep[i] == 0) std::memset(values + static_cast<size_t>(i) * element, 0, element);
      }
    });
  });
}

double CpuBackend::SumOfSquares(const Tensor& t) {
  CheckFloat(t, "t");
  const int64_t blocks = (t.numel() + kChunk - 1) / kChunk;
  Tensor partials = Workspace(2 * blocks);  // one double per block
  double total = 0.0;                       // the meta backend's: nothing is summed
  Compute([&] {
    double* block_sums = reinterpret_cast<double*>(partials.raw());
    ParallelChunks(t.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float buffer[kChunk];
      const int64_t n = end - begin;
      const float* p = LoadChunk(t, begin, n, buffer);
      double lanes[4] = {};
      int64_t i = 0;
      for (; i + 4 <= n; i += 4) {
        for (int j = 0; j < 4; ++j) lanes[j] += static_cast<double>(p[i + j]) * p[i + j];
      }
      for (; i < n; ++i) lanes[0] += static_cast<double>(p[i]) * p[i];
      block_sums[begin / kChunk] = (lanes[0] + lanes[2]) + (lanes[1] + lanes[3]);
    });
    for (int64_t block = 0; block < blocks; ++block) total += block_sums[block];
  });
  return total;
}

bool CpuBackend::AllFinite(const Tensor& t) {
  CheckFloat(t, "t");
  std::atomic<bool> all_finite{true};  // the meta backend's answer: nothing is read
  Compute([&] {
    const size_t element = SizeOf(t.dtype());
    ParallelChunks(t.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      const char* data = static_cast<const char*>(t.raw()) + begin * static_cast<int64_t>(element);
      if (!ChunkAllFinite(data, t.dtype(), end - begin)) {
        all_finite.store(false, std::memory_order_relaxed);
      }
    });
  });
  return all_finite.load();
}

namespace {

// AdamW's per-call scalars, formed as PyTorch forms them: in double, then used as float.
struct AdamWScalars {
  float b1, b2, one_minus_b1, one_minus_b2, decay, step_size, bias_correction2_sqrt, eps;
};

AdamWScalars ScalarsOf(const AdamWConfig& config) {
  const auto step = static_cast<double>(config.step);
  AdamWScalars s;
  s.b1 = config.beta1;
  s.b2 = config.beta2;
  s.one_minus_b1 = static_cast<float>(1.0 - s.b1);
  s.one_minus_b2 = static_cast<float>(1.0 - s.b2);
  s.decay = static_cast<float>(1.0 - static_cast<double>(config.lr) * config.weight_decay);
  s.step_size = static_cast<float>(config.lr / (1.0 - std::pow(static_cast<double>(s.b1), step)));
  s.bias_correction2_sqrt =
      static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(s.b2), step)));
  s.eps = config.eps;
  return s;
}

// One element's AdamW update of m, v and p, in the order torch.optim.AdamW applies it.
inline void AdamWElement(const AdamWScalars& s, float g, float& m, float& v, float& p) {
  m = s.b1 * m + s.one_minus_b1 * g;
  v = s.b2 * v + s.one_minus_b2 * g * g;
  p *= s.decay;
  const float denom = std::sqrt(v) / s.bias_correction2_sqrt + s.eps;
  p += -s.step_size * (m / denom);
}

// AdamWElement over n elements, g scaled by grad_scale: vectorised (AVX2 where the CPU has it),
// each lane the same bits as the scalar update.
BATON_SIMD_CLONES void AdamWRow(const AdamWScalars& s, const float* g, float grad_scale, float* m,
                                float* v, float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) AdamWElement(s, g[i] * grad_scale, m[i], v[i], p[i]);
}

// out[i] = map[codes[i]] * absmax: a block of 8-bit state as f32 (gathers under AVX2).
BATON_SIMD_CLONES void DequantizeRow(const uint8_t* codes, const float* map, float absmax,
                                     float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = map[codes[i]] * absmax;
}

#if defined(__x86_64__) && defined(__GNUC__)
// DequantizeRow where the CPU has AVX-512 F/BW: the 256-entry map held in 16 registers and each
// code looked up by eight two-register permutes (vpermt2ps: 32 entries each) and three blends on
// the code's top bits, about three times as fast as a gather; the same products, so the same bits.
// (g++ 12 warns, wrongly, that the intrinsics' _mm512_undefined placeholders may be used
// uninitialised.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw"))) void DequantizeRowAvx512(const uint8_t* codes,
                                                                     const float* map, float absmax,
                                                                     float* out, int64_t n) {
  __m512 table[16];
  for (int k = 0; k < 16; ++k) table[k] = _mm512_loadu_ps(map + 16 * k);
  const __m512 scale = _mm512_set1_ps(absmax);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i code =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i)));
    __m512 part[8];  // map[32 q + (code mod 32)] for q = 0..7
    for (int q = 0; q < 8; ++q) {
      part[q] = _mm512_permutex2var_ps(table[2 * q], code, table[2 * q + 1]);
    }
    const __mmask16 bit5 = _mm512_test_epi32_mask(code, _mm512_set1_epi32(32));
    const __mmask16 bit6 = _mm512_test_epi32_mask(code, _mm512_set1_epi32(64));
    const __mmask16 bit7 = _mm512_test_epi32_mask(code, _mm512_set1_epi32(128));
    for (int q = 0; q < 4; ++q) part[q] = _mm512_mask_mov_ps(part[2 * q], bit5, part[2 * q + 1]);
    for (int q = 0; q < 2; ++q) part[q] = _mm512_mask_mov_ps(part[2 * q], bit6, part[2 * q + 1]);
    const __m512 value = _mm512_mask_mov_ps(part[0], bit7, part[1]);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(value, scale));
  }
  for (; i < n; ++i) out[i] = map[codes[i]] * absmax;
}

// AdamWElement on sixteen lanes: its operations in its order, so the same bits.
struct AdamWVectors {
  __m512 b1, one_minus_b1, b2, one_minus_b2, decay, eps, bias_correction2_sqrt, minus_step_size;
};
__attribute__((target("avx512f"), always_inline)) inline void AdamW16(const AdamWVectors& c,
                                                                      __m512 g, __m512& m,
                                                                      __m512& v, __m512& p) {
  m = _mm512_add_ps(_mm512_mul_ps(c.b1, m), _mm512_mul_ps(c.one_minus_b1, g));
  v = _mm512_add_ps(_mm512_mul_ps(c.b2, v), _mm512_mul_ps(_mm512_mul_ps(c.one_minus_b2, g), g));
  p = _mm512_mul_ps(p, c.decay);
  const __m512 denom =
      _mm512_add_ps(_mm512_div_ps(_mm512_sqrt_ps(v), c.bias_correction2_sqrt), c.eps);
  p = _mm512_add_ps(p, _mm512_mul_ps(c.minus_step_size, _mm512_div_ps(m, denom)));
}

// AdamWRow over one block where the CPU has AVX-512 F, also returning AbsMaxF of the new m and v
// (the absmax their codes are scaled by): sixteen lanes at a time, the tail masked (its loads
// and stores only: AMD's masked stores are slow where the line is not yet in cache), and
// max(|x|, max) skipping NaN as std::max(max, |x|) does, so the same bits as AdamWRow and
// AbsMaxRow.
__attribute__((target("avx512f"))) void AdamWRowAbsMaxAvx512(const AdamWScalars& s, const float* g,
                                                             float grad_scale, float* m, float* v,
                                                             float* p, int64_t n, float& max_m,
                                                             float& max_v) {
  const AdamWVectors c = {_mm512_set1_ps(s.b1),
                          _mm512_set1_ps(s.one_minus_b1),
                          _mm512_set1_ps(s.b2),
                          _mm512_set1_ps(s.one_minus_b2),
                          _mm512_set1_ps(s.decay),
                          _mm512_set1_ps(s.eps),
                          _mm512_set1_ps(s.bias_correction2_sqrt),
                          _mm512_set1_ps(-s.step_size)};
  const __m512 scale = _mm512_set1_ps(grad_scale);
  __m512 largest_m = _mm512_setzero_ps(), largest_v = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 mi = _mm512_loadu_ps(m + i), vi = _mm512_loadu_ps(v + i), pi = _mm512_loadu_ps(p + i);
    AdamW16(c, _mm512_mul_ps(_mm512_loadu_ps(g + i), scale), mi, vi, pi);
    _mm512_storeu_ps(m + i, mi);
    _mm512_storeu_ps(v + i, vi);
    _mm512_storeu_ps(p + i, pi);
    largest_m = _mm512_max_ps(_mm512_abs_ps(mi), largest_m);
    largest_v = _mm512_max_ps(_mm512_abs_ps(vi), largest_v);
  }
  if (i < n) {
    const __mmask16 lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    // Masked-off lanes compute zeros: |0| never raises a maximum that starts at 0.
    __m512 mi = _mm512_maskz_loadu_ps(lanes, m + i), vi = _mm512_maskz_loadu_ps(lanes, v + i);
    __m512 pi = _mm512_maskz_loadu_ps(lanes, p + i);
    AdamW16(c, _mm512_mul_ps(_mm512_maskz_loadu_ps(lanes, g + i), scale), mi, vi, pi);
    _mm512_mask_storeu_ps(m + i, lanes, mi);
    _mm512_mask_storeu_ps(v + i, lanes, vi);
    _mm512_mask_storeu_ps(p + i, lanes, pi);
    largest_m = _mm512_max_ps(_mm512_abs_ps(mi), largest_m);
    largest_v = _mm512_max_ps(_mm512_abs_ps(vi), largest_v);
  }
  alignas(64) float lanes_m[16], lanes_v[16];
  _mm512_store_ps(lanes_m, largest_m);
  _mm512_store_ps(lanes_v, largest_v);
  max_m = *std::max_element(lanes_m, lanes_m + 16);  // no NaN among them
  max_v = *std::max_element(lanes_v, lanes_v + 16);
}
#pragma GCC diagnostic pop
#endif

// The dequantiser for this CPU: the AVX-512 lookup above, or DequantizeRow's clones.
using DequantizeFn = void (*)(const uint8_t*, const float*, float, float*, int64_t);
DequantizeFn Dequantizer() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  if (avx512) return DequantizeRowAvx512;
#endif
  return DequantizeRow;
}

// AbsMaxF compiled for AVX2 too.
BATON_SIMD_CLONES float AbsMaxRow(const float* x, int64_t n) { return AbsMaxF(x, n); }

// One block's AdamW update of its decoded m and v and its parameters, with the new m's and v's
// absmax: AdamWRowAbsMaxAvx512 where the CPU has AVX-512 F, else AdamWRow and AbsMaxRow.
using UpdateBlockFn = void (*)(const AdamWScalars&, const float*, float, float*, float*, float*,
                               int64_t, float&, float&);
void UpdateBlockPortable(const AdamWScalars& s, const float* g, float grad_scale, float* m,
                         float* v, float* p, int64_t n, float& max_m, float& max_v) {
  AdamWRow(s, g, grad_scale, m, v, p, n);
  max_m = AbsMaxRow(m, n);
  max_v = AbsMaxRow(v, n);  // v >= 0: its absolute maximum is its maximum
}
UpdateBlockFn BlockUpdater() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return AdamWRowAbsMaxAvx512;
#endif
  return UpdateBlockPortable;
}

}  // namespace

void CpuBackend::AdamW(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                       const AdamWConfig& config, float grad_scale) {
  CheckF32(param, "param");
  CheckFloat(grad, "grad");
  CheckF32(m, "m");
  CheckF32(v, "v");
  CheckSameShape(param, grad, "param", "grad");
  CheckSameShape(param, m, "param", "m");
  CheckSameShape(param, v, "param", "v");
  BATON_CHECK(config.step >= 1, "AdamW step is 1-based, got {}", config.step);
  Compute([&] {
    const AdamWScalars s = ScalarsOf(config);
    float* pp = param.data<float>();
    float* pm = m.data<float>();
    float* pv = v.data<float>();
    ParallelChunks(param.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float buffer[kChunk];
      const float* g = LoadChunk(grad, begin, end - begin, buffer);
      AdamWRow(s, g, grad_scale, pm + begin, pv + begin, pp + begin, end - begin);
    });
  });
}

void CpuBackend::AdamW8bit(Tensor& param, const Tensor& grad, Tensor& m, Tensor& m_absmax,
                           Tensor& v, Tensor& v_absmax, const AdamWConfig& config,
                           float grad_scale) {
  CheckF32(param, "param");
  CheckFloat(grad, "grad");
  CheckU8(m, "m");
  CheckU8(v, "v");
  CheckF32(m_absmax, "m_absmax");
  CheckF32(v_absmax, "v_absmax");
  CheckSameShape(param, grad, "param", "grad");
  CheckSameShape(param, m, "param", "m");
  CheckSameShape(param, v, "param", "v");
  CheckQuantBlocks(param, m_absmax, v_absmax);
  BATON_CHECK(config.step >= 1, "AdamW step is 1-based, got {}", config.step);
  Compute([&] {
    static_assert(kChunk % kQuantBlock == 0, "a quantisation block never straddles two chunks");
    const AdamWScalars s = ScalarsOf(config);
    const QuantMap& m_map = SignedQuantMap();
    const QuantMap& v_map = UnsignedQuantMap();
    const QuantCoder& m_coder = SignedQuantCoder();
    const QuantCoder& v_coder = UnsignedQuantCoder();
    float* pp = param.data<float>();
    uint8_t* pm = m.data<uint8_t>();
    uint8_t* pv = v.data<uint8_t>();
    float* am = m_absmax.data<float>();
    float* av = v_absmax.data<float>();
    const DequantizeFn dequantize = Dequantizer();
    const UpdateBlockFn update_block = BlockUpdater();
    ParallelChunks(param.numel(), kChunk, &pool_, [&](int64_t begin, int64_t end) {
      float buffer[kChunk];
      const float* g = LoadChunk(grad, begin, end - begin, buffer);
      for (int64_t b0 = begin; b0 < end; b0 += kQuantBlock) {
        const int64_t n = std::min(kQuantBlock, end - b0);
        const int64_t block = b0 / kQuantBlock;
        // Dequantise the block, update it as f32 AdamW does, then requantise with its new absmax.
        float block_m[kQuantBlock], block_v[kQuantBlock];
        dequantize(pm + b0, m_map.data(), am[block], block_m, n);
        dequantize(pv + b0, v_map.data(), av[block], block_v, n);
        float max_m, max_v;
        update_block(s, g + (b0 - begin), grad_scale, block_m, block_v, pp + b0, n, max_m, max_v);
        am[block] = max_m;
        av[block] = max_v;
        const float inv_m = max_m > 0.0f ? 1.0f / max_m : 0.0f;
        const float inv_v = max_v > 0.0f ? 1.0f / max_v : 0.0f;
        m_coder.EncodeRow(block_m, inv_m, n, pm + b0);
        v_coder.EncodeRow(block_v, inv_v, n, pv + b0);
      }
    });
  });
}

}  // namespace cpu
}  // namespace baton
