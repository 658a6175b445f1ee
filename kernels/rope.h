// Rotary position embeddings (RoPE, Su et al. 2021) as Llama uses them, in Hugging Face's
// "rotate_half" layout: within a head of size D, element i (i < D/2) pairs with element i + D/2,
// and the pair at position p turns by the angle p * inv_freq[i]:
//   x'[i]       = x[i] cos - x[i + D/2] sin
//   x'[i + D/2] = x[i + D/2] cos + x[i] sin
// (Meta's original checkpoints pair adjacent elements 2i, 2i+1 instead; Hugging Face's
// conversion permutes q_proj and k_proj rows into this layout, so HF weights load as they are.)
// inv_freq[i] = theta^(-2i/D), with Llama 3's frequency scaling when factor > 0 (HF rope_type
// "llama3"): wavelengths 2 pi / inv_freq longer than original_context / low_freq_factor are
// divided by `factor`, shorter than original_context / high_freq_factor kept, and those between
// interpolated smoothly. The angle is computed as HF computes it: float(p) * float(inv_freq) in
// f32, then its cos and sin in f32.
#pragma once

#include <cmath>
#include <cstdint>

namespace baton {

struct RopeConfig {
  double theta = 10000.0;
  double factor = 0.0;  // Llama 3 scaling: 0 = none
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_context = 8192;
  bool operator==(const RopeConfig&) const = default;
};

// inv_freq[i] of a head of size head_dim, 0 <= i < head_dim / 2, rounded to f32 as HF's is.
inline float RopeInverseFrequency(const RopeConfig& rope, int64_t i, int64_t head_dim) {
  // HF: 1 / theta ** (arange(0, D, 2).float() / D), in f32.
  const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
  const float inv = 1.0f / std::pow(static_cast<float>(rope.theta), exponent);
  if (rope.factor <= 0.0) return inv;
  const double wavelen = 2.0 * M_PI / inv;
  const double low_freq_wavelen = rope.original_context / rope.low_freq_factor;
  const double high_freq_wavelen = rope.original_context / rope.high_freq_factor;
  if (wavelen < high_freq_wavelen) return inv;
  if (wavelen > low_freq_wavelen) return static_cast<float>(inv / rope.factor);
  const double smooth = (rope.original_context / wavelen - rope.low_freq_factor) /
                        (rope.high_freq_factor - rope.low_freq_factor);
  return static_cast<float>((1.0 - smooth) * inv / rope.factor + smooth * inv);
}

}  // namespace baton
