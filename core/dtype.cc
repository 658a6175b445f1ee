#include "core/dtype.h"

#include <bit>
#include <cstring>

#include "core/error.h"

namespace baton {

size_t SizeOf(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
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
  }
  BATON_FAIL("unknown dtype {}", static_cast<int>(dtype));
}

DType ParseDType(std::string_view name) {
  if (name == "f32" || name == "fp32" || name == "float32") return DType::kF32;
  if (name == "f16" || name == "fp16" || name == "float16") return DType::kF16;
  if (name == "bf16" || name == "bfloat16") return DType::kBF16;
  if (name == "i32" || name == "int32") return DType::kI32;
  BATON_FAIL("unknown dtype '{}' (expected fp32, bf16, fp16 or i32)", name);
}

bool IsFloating(DType dtype) { return dtype != DType::kI32; }

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
float LoadAsFloat(const void* src, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(src)[i];
    case DType::kF16:
      return HalfToFloat(static_cast<const uint16_t*>(src)[i]);
    case DType::kBF16:
      return BFloat16ToFloat(static_cast<const uint16_t*>(src)[i]);
    case DType::kI32:
      break;
  }
  BATON_FAIL("cannot convert {} as a float", Name(dtype));
}

void StoreFloat(float value, void* dst, DType dtype, size_t i) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(dst)[i] = value;
      return;
    case DType::kF16:
      static_cast<uint16_t*>(dst)[i] = FloatToHalf(value);
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(dst)[i] = FloatToBFloat16(value);
      return;
    case DType::kI32:
      break;
  }
  BATON_FAIL("cannot store a float as {}", Name(dtype));
}
}  // namespace

void ConvertFloats(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n) {
  BATON_CHECK(IsFloating(src_dtype) && IsFloating(dst_dtype), "{} -> {}", Name(src_dtype),
              Name(dst_dtype));
  if (src_dtype == dst_dtype) {
    std::memmove(dst, src, n * SizeOf(src_dtype));
    return;
  }
  for (size_t i = 0; i < n; ++i) StoreFloat(LoadAsFloat(src, src_dtype, i), dst, dst_dtype, i);
}

}  // namespace baton
