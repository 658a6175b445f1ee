#include "core/error.h"

#include <spdlog/spdlog.h>

namespace baton {
namespace {
thread_local std::string g_context;
}  // namespace

void SetErrorContext(std::string context) { g_context = std::move(context); }
const std::string& ErrorContext() { return g_context; }

std::string ValidUtf8(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    // The length of the sequence this byte starts, and the smallest code point it may encode
    // (anything shorter is an overlong form).
    size_t length = 0;
    uint32_t code = 0, least = 0;
    if (byte < 0x80) {
      length = 1;
      code = byte;
    } else if ((byte & 0xE0) == 0xC0) {
      length = 2;
      code = byte & 0x1F;
      least = 0x80;
    } else if ((byte & 0xF0) == 0xE0) {
      length = 3;
      code = byte & 0x0F;
      least = 0x800;
    } else if ((byte & 0xF8) == 0xF0) {
      length = 4;
      code = byte & 0x07;
      least = 0x10000;
    }
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      valid = (next & 0xC0) == 0x80;
      code = (code << 6) | (next & 0x3F);
    }
    valid = valid && code >= least && code <= 0x10FFFF && !(code >= 0xD800 && code <= 0xDFFF);
    if (valid) {
      out.append(text.substr(i, length));
      i += length;
    } else {
      out += fmt::format("\\x{:02x}", byte);
      ++i;
    }
  }
  return out;
}

Error::Error(std::string_view message, std::string origin)
    : std::runtime_error(ValidUtf8(message)), origin_(ValidUtf8(origin)) {}

void ThrowError(const char* file, int line, const char* condition, const std::string& message) {
  std::string text(message);
  if (!g_context.empty()) text = fmt::format("[{}] {}", g_context, text);
  std::string origin = fmt::format("{}:{}", file, line);
  if (condition != nullptr) origin += fmt::format(": check failed: {}", condition);
  throw Error(text, origin);
}

void LogOrigin(const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  if (error != nullptr && !error->origin().empty()) spdlog::debug("raised at {}", error->origin());
}

}  // namespace baton
