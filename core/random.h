// A small deterministic random generator, identical on every platform and compiler.
//
// std::normal_distribution is implementation-defined, so Baton draws its own: xoshiro256** for
// bits, Box-Muller for normals. Streams are keyed (seed, stream ids...) so that, e.g., layer 7's
// initial weights are the same whichever stage builds them.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace baton {

// SplitMix64 finaliser: a good 64-bit mix, used to derive stream seeds.
uint64_t Mix64(uint64_t x);

class Rng {
 public:
  explicit Rng(uint64_t seed);
  // A generator for the stream named by `ids` under `seed` (independent of creation order).
  static Rng ForStream(uint64_t seed, std::initializer_list<uint64_t> ids);

  uint64_t NextU64();
  double NextDouble();                 // uniform in [0, 1), 53 random bits
  uint64_t NextBelow(uint64_t bound);  // uniform in [0, bound), unbiased; bound > 0
  double NextNormal();                 // standard normal

  struct State {
    uint64_t s[4];
    bool has_spare;
    double spare;
  };
  State state() const { return {{s_[0], s_[1], s_[2], s_[3]}, has_spare_, spare_}; }
  void set_state(const State& state);

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace baton
