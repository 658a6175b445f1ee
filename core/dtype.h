// Element types and the 16-bit float conversions.
//
// f16 is IEEE binary16; bf16 is the top half of binary32. Conversions from f32 round to nearest
// even, keep infinities, and keep NaN a (quiet) NaN.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace baton {

// kU8: raw bytes (the codes of 8-bit optimizer state, kernels/quantize.h); not a number type.
// kI8: signed 8-bit integers (INT8 weights: codes times a per-column f32 scale,
// kernels/quantize.h).
enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kU8, kI8 };

size_t SizeOf(DType dtype);
std::string_view Name(DType dtype);       // "f32", "f16", "bf16", "i32", "u8", "i8"
DType ParseDType(std::string_view name);  // accepts the names above and fp32/fp16/float32...
bool IsFloating(DType dtype);

uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t bits);
uint16_t FloatToBFloat16(float value);
float BFloat16ToFloat(uint16_t bits);

// Converts n elements between any two floating types (f32, f16, bf16).
void ConvertFloats(const void* src, DType src_dtype, void* dst, DType dst_dtype, size_t n);

}  // namespace baton
