#include "core/dtype.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "core/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace baton {

size_t SizeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kU8:
    case DType::kI8:
      return 1;
  }
  BATON_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

std::string_view Name(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
    case DType::kI32:
      return "i32";
    case DType::kU8:
      return "u8";
    case DType::kI8:
      return "i8";
  }
  BATON_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

DType ParseDType(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  if (name == "u8" || name == "uint8") return DType::kU8;
  if (name == "i8" || name == "int8") return DType::kI8;
  BATON_FAIL("unknown dtype '{}' (expected fp32, bf16, fp16, i32, u8 or i8)", name);
}

bool IsFloating(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

uint16_t FloatToHalf(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    const uint32_t mantissa = abs > 0x7f800000u ? (0x200u | ((abs >> 13) & 0x3ffu)) : 0u;
    return static_cast<uint16_t>(sign | 0x7c00u | mantissa);
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (abs < 0x38800000u) {  // result is subnormal or zero: value < 2^-14
    // Shift the full significand (with implicit one) into place, rounding to nearest even.
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);  // < 2^-25 rounds to 0
    const uint32_t exponent = abs >> 23;
    const uint32_t significand = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;  // 14..24 places
    uint32_t half = significand >> shift;
    const uint32_t remainder = significand & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped bits to nearest even.
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t remainder = abs & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mantissa <<= 1;
    } while ((mantissa & 0x400u) == 0);
    bits = sign | ((112u - static_cast<uint32_t>(e)) << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t FloatToBFloat16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign, force quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

namespace {

// Hardware conversions (F16C: x86-64-v3) where the CPU has them; the same bits as the portable
// code (IEEE round to nearest even), chosen at run time so the binary still runs anywhere.
#if defined(__x86_64__)
__attribute__((target("avx,f16c"))) void HalfToFloatF16c(const uint16_t* src, float* dst,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

__attribute__((target("avx,f16c"))) void FloatToHalfF16c(const float* src, uint16_t* dst,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), h);
  }
  for (; i < n; ++i) dst[i] = FloatToHalf(src[i]);
}

bool HasF16c() {
  static const bool has = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
  return has;
}

// bf16 <-> f32 eight at a time (AVX2 integer ops), the same bits as BFloat16ToFloat and
// FloatToBFloat16: the staging of every bf16 kernel operand goes through these, and one element
// at a time they took a fifth of a bf16 training step on the CPU.
__attribute__((target("avx2"))) void BFloat16ToFloatAvx2(const uint16_t* src, float* dst,
                                                         size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), bits);
  }
  for (; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
}

__attribute__((target("avx2"))) void FloatToBFloat16Avx2(const float* src, uint16_t* dst,
                                                         size_t n) {
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i half_ulp = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
  const __m256i infinity = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x40);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i high = _mm256_srli_epi32(bits, 16);
    // Round to nearest even: add 0x7fff plus the kept part's lowest bit, keep the top half.
    const __m256i rounding = _mm256_add_epi32(half_ulp, _mm256_and_si256(high, one));
    const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
    // NaN (|bits| > infinity, a signed compare of non-negative values): sign kept, quiet bit set.
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), infinity);
    const __m256i result = _mm256_blendv_epi8(rounded, _mm256_or_si256(high, quiet), nan);
    // Every lane is below 2^16: pack to 16 bits, then undo the pack's per-lane interleave.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(result, result), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}

// The same sixteen at a time (AVX-512 F and BW), the same bits. (g++ 12 warns, wrongly, that
// the intrinsics' own _mm512_undefined placeholders may be used uninitialised.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__attribute__((target("avx512f,avx512bw"))) void BFloat16ToFloatAvx512(const uint16_t* src,
                                                                       float* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    _mm512_storeu_si512(dst + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  for (; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
}

__attribute__((target("avx512f,avx512bw"))) void FloatToBFloat16Avx512(const float* src,
                                                                       uint16_t* dst, size_t n) {
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i half_ulp = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_loadu_si512(src + i);
    const __m512i high = _mm512_srli_epi32(bits, 16);
    const __m512i rounding = _mm512_add_epi32(half_ulp, _mm512_and_si512(high, one));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, rounding), 16);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, abs_mask), infinity);
    const __m512i result = _mm512_mask_or_epi32(rounded, nan, high, quiet);
    // Every lane is below 2^16: truncate each to 16 bits.
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(result));
  }
  for (; i < n; ++i) dst[i] = FloatToBFloat16(src[i]);
}
#pragma GCC diagnostic pop

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

bool HasAvx512() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return has;
}
#endif

void ToF32(const void* src, DType dtype, float* dst, size_t n) {
  const auto* in = static_cast<const uint16_t*>(src);
  switch (dtype) {
    case DType::kF32:
      std::memmove(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
#if defined(__x86_64__)
      if (HasAvx512()) return BFloat16ToFloatAvx512(in, dst, n);
      if (HasAvx2()) return BFloat16ToFloatAvx2(in, dst, n);
#endif
      for (size_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(in[i]);
      return;
    case DType::kF16:
#if defined(__x86_64__)
      if (HasF16c()) return HalfToFloatF16c(in, dst, n);
#endif
      for (size_t i = 0; i < n; ++i) dst[i] = HalfToFloat(in[i]);
      return;
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("cannot convert {} to f32", Name(dtype));
}

void FromF32(const float* src, void* dst, DType dtype, size_t n) {
  auto* out = static_cast<uint16_t*>(dst);
  switch (dtype) {
    case DType::kF32:
      std::memmove(dst, src, n * sizeof(float));
      return;
    case DType::kBF16:
#if defined(__x86_64__)
      if (HasAvx512()) return FloatToBFloat16Avx512(src, out, n);
      if (HasAvx2()) return FloatToBFloat16Avx2(src, out, n);
#endif
      for (size_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(src[i]);
      return;
    case DType::kF16:
#if defined(__x86_64__)
      if (HasF16c()) return FloatToHalfF16c(src, out, n);
#endif
      for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(src[i]);
      return;
    case DType::kI32:
    case DType::kU8:
    case DType::kI8:
      break;
  }
  BATON_FAIL("cannot convert f32 to {}", Name(dtype));
}

}  // namespace

void ConvertFloats(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  BATON_CHECK(IsFloating(src_dtype) && IsFloating(dst_dtype), "{} -> {}", Name(src_dtype),
              Name(dst_dtype));
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * SizeOf(src_dtype));
  } else if (src_dtype == DType::kF32) {
    FromF32(static_cast<const float*>(src), dst, dst_dtype, n);
  } else if (dst_dtype == DType::kF32) {
    ToF32(src, src_dtype, static_cast<float*>(dst), n);
  } else {  // f16 <-> bf16 through f32, a block at a time
    float block[256];
    for (size_t i = 0; i < n; i += 256) {
      const size_t m = std::min<size_t>(256, n - i);
      ToF32(static_cast<const uint16_t*>(src) + i, src_dtype, block, m);
      FromF32(block, static_cast<uint16_t*>(dst) + i, dst_dtype, m);
    }
  }
}

}  // namespace baton
