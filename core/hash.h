// A 64-bit FNV-1a digest, for parameter checksums and checkpoint file integrity; and CRC-32C.
//
// Not cryptographic: it detects accidental change (a flipped byte, a truncated file), which is
// what Baton needs it for. Digests print as 16 lowercase hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace baton {

class Fnv1a64 {
 public:
  void Update(const void* data, size_t bytes);
  void UpdateU64(uint64_t value) { Update(&value, sizeof(value)); }
  uint64_t digest() const { return state_; }
  std::string hex() const;

 private:
  uint64_t state_ = 0xcbf29ce484222325ull;
};

std::string HexDigest(uint64_t digest);

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord framing uses it:
// Crc32c("123456789", 9) == 0xE3069283.
uint32_t Crc32c(const void* data, size_t bytes);

}  // namespace baton
