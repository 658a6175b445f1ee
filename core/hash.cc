#include "core/hash.h"

#include <fmt/format.h>

namespace baton {

void Fnv1a64::Update(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = state_;
  for (size_t i = 0; i < bytes; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  state_ = h;
}

std::string Fnv1a64::hex() const { return HexDigest(state_); }

std::string HexDigest(uint64_t digest) { return fmt::format("{:016x}", digest); }

}  // namespace baton
