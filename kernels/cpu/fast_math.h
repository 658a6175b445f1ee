// Small, vectorisable float helpers for the CPU kernels: exp, sums, dot products and max.
//
// Everything here is plain C++ with a fixed order of operations (no -ffast-math), so GCC can
// vectorise the loops that call it while the result stays the same bits on every run and thread
// count. Internal to kernels/cpu (and its tests).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

// BATON_SIMD_CLONES on a hot row function makes GCC compile it three times, for baseline x86-64
// (SSE2), AVX2 and x86-64-v4 (AVX-512 F/BW/DQ/VL: 16 floats a vector, and the bf16 <-> f32
// widening and narrowing of the BF16 overloads in zmm registers), and pick one per CPU at load
// time. All give the same bits: the build turns FMA contraction off (-ffp-contract=off in
// CMakeLists.txt; g++ fuses a * b + c by default, and x86-64-v4 has FMA), vectorisation keeps
// the source's order of operations (the sums below fix theirs explicitly), and each lane of an
// SSE, AVX or AVX-512 instruction rounds exactly as a scalar one.
// Not under TSan: the clones' resolver runs while the dynamic loader relocates, before TSan's
// runtime is up, and its instrumented code crashes there (make sanitize).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define BATON_SIMD_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define BATON_SIMD_CLONES
#endif

namespace baton::cpu {

// A bf16 element in memory: the top half of an f32's bits (core/dtype.h). Kernels templated on
// their storage type read and write bf16 tensors directly, widening and narrowing in registers,
// instead of converting pieces into f32 buffers and back: the same values (Widen is exact, Narrow
// rounds as FloatToBFloat16 does), one pass over memory fewer each way.
struct BF16 {
  uint16_t bits;
};

inline float Widen(float x) { return x; }
inline float Widen(BF16 x) { return std::bit_cast<float>(static_cast<uint32_t>(x.bits) << 16); }

// f32 to the storage type T (float or BF16). For bf16: round to nearest even; NaN stays a quiet
// NaN with its sign (FloatToBFloat16's bits), branch-free so that loops over it vectorise.
template <typename T>
inline T Narrow(float x);
template <>
inline float Narrow<float>(float x) {
  return x;
}
template <>
inline BF16 Narrow<BF16>(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t rounded = (bits + (0x7fffu + ((bits >> 16) & 1u))) >> 16;
  const uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return {static_cast<uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded)};
}

// exp(x) for float, within ~2 ulp on [-87.3, 88.3] (Cephes' expf polynomial). Below -87.3 it
// returns 0 (the true value is subnormal), above 88.3 it saturates at ~2^127; NaN stays NaN.
// Branch-free and call-free so that loops over it vectorise.
inline float ExpF(float x) {
  constexpr float kHi = 88.3762626647949f;
  constexpr float kLo = -87.3365447504f;
  float clamped = x > kHi ? kHi : x;  // comparisons with NaN are false: NaN passes through
  clamped = clamped < kLo ? kLo : clamped;
  // n = round(x / ln 2) by the 1.5 * 2^23 trick: the integer lands in the low mantissa bits.
  constexpr float kRoundMagic = 12582912.0f;
  const float shifted = clamped * 1.44269504088896341f + kRoundMagic;
  const float n = shifted - kRoundMagic;
  // r = x - n ln 2 in two parts (Cody-Waite) so r keeps full precision.
  const float r = (clamped - n * 0.693359375f) - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  // 2^n built from its bits: the low bits of `shifted` hold n in two's complement.
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRoundMagic);
  const float two_n = std::bit_cast<float>((n_bits + 127u) << 23);
  const float result = p * two_n;
  return x < kLo ? 0.0f : result;
}

// GELU, tanh form: 0.5 x (1 + tanh y), y = sqrt(2/pi) (x + 0.044715 x^3), written as
// x * sigmoid(2y) since 0.5 (1 + tanh y) = sigmoid(2y): one exp, no tanh call.
inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

inline float GeluF(float x) {
  const float y = kGeluScale * (x + kGeluCubic * x * x * x);
  return x / (1.0f + ExpF(-2.0f * y));
}

// d/dx [x sigmoid(2y)] = s + 2 x s (1 - s) y', s = sigmoid(2y), y' = sqrt(2/pi)(1 + 3 0.044715 x^2)
inline float GeluGradF(float x) {
  const float y = kGeluScale * (x + kGeluCubic * x * x * x);
  const float s = 1.0f / (1.0f + ExpF(-2.0f * y));
  const float dy = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
  return s + 2.0f * x * s * (1.0f - s) * dy;
}

// Float sums and dot products with 8 independent partial sums combined in a fixed tree: the
// order is part of the definition, so vectorised and scalar code give the same bits.
inline constexpr int kLanes = 8;

inline float CombineLanes(const float (&acc)[kLanes]) {
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

// Sum over i in [0, n) of term(i), in 8 lanes combined by CombineLanes.
template <typename Term>
inline float SumLanes(int64_t n, const Term& term) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] += term(i + j);
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] += term(i);
  return CombineLanes(acc);
}

inline float SumF(const float* x, int64_t n) {
  return SumLanes(n, [x](int64_t i) { return x[i]; });
}

inline float DotF(const float* x, const float* y, int64_t n) {
  return SumLanes(n, [x, y](int64_t i) { return x[i] * y[i]; });
}

// Largest element (NaNs are skipped; n >= 1). Max is exact, so lanes change nothing but speed.
inline float MaxF(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = x[0];
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = x[i + j] > acc[j] ? x[i + j] : acc[j];
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] = x[i] > acc[j] ? x[i] : acc[j];
  float m = acc[0];
  for (int j = 1; j < kLanes; ++j) m = acc[j] > m ? acc[j] : m;
  return m;
}

// Largest |x[i]| (0 when n = 0; NaNs are skipped: std::max(a, NaN) keeps a), in lanes as MaxF.
inline float AbsMaxF(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) acc[j] = std::max(acc[j], std::fabs(x[i + j]));
  }
  for (int j = 0; i < n; ++i, ++j) acc[j] = std::max(acc[j], std::fabs(x[i]));
  float m = 0.0f;
  for (float lane : acc) m = std::max(m, lane);
  return m;
}

}  // namespace baton::cpu
