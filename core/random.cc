#include "core/random.h"

#include <cmath>
#include <numbers>

#include "core/error.h"

namespace baton {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& word : s_) {
    x = Mix64(x);
    word = x;
  }
}

Rng Rng::ForStream(uint64_t seed, std::initializer_list<uint64_t> ids) {
  uint64_t key = Mix64(seed);
  for (uint64_t id : ids) key = Mix64(key ^ Mix64(id + 0x632be59bd9b4e019ull));
  return Rng(key);
}

uint64_t Rng::NextU64() {
  const auto rotl = [](uint64_t v, int k) { return (v << k) | (v >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::NextDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

uint64_t Rng::NextBelow(uint64_t bound) {
  BATON_CHECK(bound > 0, "NextBelow(0)");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;  // reject the uneven tail
  uint64_t x;
  do {
    x = NextU64();
  } while (x >= limit);
  return x % bound;
}

double Rng::NextNormal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  double u1;
  do {
    u1 = NextDouble();
  } while (u1 <= 0.0);
  const double u2 = NextDouble();
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

void Rng::set_state(const State& state) {
  for (int i = 0; i < 4; ++i) s_[i] = state.s[i];
  has_spare_ = state.has_spare;
  spare_ = state.spare;
}

}  // namespace baton
