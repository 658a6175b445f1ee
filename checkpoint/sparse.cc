// Sparse storage of pruned weights (see sparse.h).
#include "checkpoint/sparse.h"

#include <charconv>
#include <cstring>

#include "core/error.h"
#include "kernels/quantize.h"

namespace baton {
namespace {

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// "rows,cols" (any positive dimensions) as a Shape.
Shape ParseDenseShape(const std::string& path, const std::string& key, const std::string& text) {
  Shape shape;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    int64_t d = 0;
    const auto [ptr, ec] = std::from_chars(text.data() + begin, text.data() + end, d);
    BATON_CHECK(ec == std::errc() && ptr == text.data() + end && d > 0 && shape.size() < 8,
                "{}: metadata {} is \"{}\", not a shape like \"768,3072\"", path, key, text);
    shape.push_back(d);
    begin = end + 1;
  }
  return shape;
}

}  // namespace

std::vector<std::byte> PackMaskBits(const std::vector<uint8_t>& keep) {
  std::vector<std::byte> bits((keep.size() + 7) / 8, std::byte{0});
  for (size_t i = 0; i < keep.size(); ++i) {
    if (keep[i] != 0) bits[i / 8] |= std::byte{static_cast<uint8_t>(1u << (i % 8))};
  }
  return bits;
}

std::vector<uint8_t> UnpackMaskBits(std::span<const std::byte> bits, int64_t n) {
  std::vector<uint8_t> keep(static_cast<size_t>(n));
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i] = (std::to_integer<uint8_t>(bits[i / 8]) >> (i % 8)) & 1u;
  }
  return keep;
}

std::vector<std::string> PackedTensorNames(const std::string& param) {
  return {param, param + ".master", param + ".adam_m", param + ".adam_v"};
}

void UnpackSparseTensors(SafetensorsFile& file) {
  std::vector<std::string> masked;
  for (const SafetensorsEntry& entry : file.entries()) {
    if (EndsWith(entry.name, kSparseMaskSuffix)) {
      masked.push_back(entry.name.substr(0, entry.name.size() - std::strlen(kSparseMaskSuffix)));
    }
  }
  const uint8_t zero_m_code = Quantize(0.0f, SignedQuantMap());
  for (const std::string& param : masked) {
    const std::string shape_key = param + kDenseShapeSuffix;
    const auto shape_text = file.metadata().find(shape_key);
    BATON_CHECK(shape_text != file.metadata().end(),
                "{}: {}{} comes without its dense shape (metadata {})", file.path(), param,
                kSparseMaskSuffix, shape_key);
    const Shape shape = ParseDenseShape(file.path(), shape_key, shape_text->second);
    int64_t n = 1;
    for (int64_t d : shape) {
      BATON_CHECK(d >= 0 && !__builtin_mul_overflow(n, d, &n), "{}: {} {} overflows", file.path(),
                  shape_key, shape_text->second);
    }
    const SafetensorsEntry& mask = file.Get(param + kSparseMaskSuffix);
    BATON_CHECK(mask.dtype == "U8" && mask.shape == Shape{(n + 7) / 8},
                "{}: {} is {} {}, but a mask of {} elements is U8 [{}]", file.path(), mask.name,
                mask.dtype, ToString(mask.shape), n, (n + 7) / 8);
    const std::vector<uint8_t> keep = UnpackMaskBits(file.Bytes(mask), n);
    int64_t kept = 0;
    for (uint8_t k : keep) kept += k;
    for (const std::string& name : PackedTensorNames(param)) {
      const SafetensorsEntry* entry = file.Find(name);
      if (entry == nullptr) continue;
      BATON_CHECK(entry->shape == Shape{kept},
                  "{}: packed tensor {} has shape {}, but its mask keeps {} elements", file.path(),
                  name, ToString(entry->shape), kept);
      const size_t element = SafetensorsDTypeSize(entry->dtype);
      const std::string dtype = entry->dtype;
      const std::span<const std::byte> packed = file.Bytes(*entry);
      const std::byte fill{name == param + ".adam_m" && dtype == "U8" ? zero_m_code : uint8_t{0}};
      std::vector<std::byte> dense(static_cast<size_t>(n) * element, fill);
      size_t j = 0;
      for (size_t i = 0; i < keep.size(); ++i) {
        if (keep[i] == 0) continue;
        std::memcpy(dense.data() + i * element, packed.data() + j * element, element);
        ++j;
      }
      file.Replace(name, dtype, shape, std::move(dense));
    }
  }
}

}  // namespace baton
