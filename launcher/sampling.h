// How `baton generate` draws the next token from a model's logits: temperature, then the top_k
// likeliest, then the nucleus (top_p), then one draw. Deterministic: the same logits, options
// and generator state give the same token on every platform and compiler.
#pragma once

#include <cstdint>
#include <vector>

namespace baton {

// SplitMix64: a small generator whose sequence is the same on every platform and compiler.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }  // [0, 1)

 private:
  uint64_t state_;
};

struct SamplingOptions {
  double temperature = 0.8;  // >= 0; 0 = the argmax (greedy)
  int top_k = 40;            // keep the k likeliest; 0 = every token
  double top_p = 1.0;        // in (0, 1]: keep the fewest likeliest whose probability reaches p
};

// Throws naming the flag (--temperature, --top-k, --top-p) when an option is out of range.
void CheckSamplingOptions(const SamplingOptions& options);

// One token id from `logits`: the tokens ordered likeliest first (ties by id), the first top_k
// kept, their probabilities softmax(logit / temperature) over those, then the shortest prefix
// whose probability is at least top_p of theirs kept (at least one token, as Hugging Face's
// TopPLogitsWarper), and one draw from the kept ones in proportion. Temperature 0: the first.
int SampleToken(const std::vector<float>& logits, const SamplingOptions& options, SplitMix64& rng);

}  // namespace baton
