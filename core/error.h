// Baton's one error type and the checks that raise it.
//
// Errors cross module boundaries as `baton::Error` (an exception carrying the call site and the
// worker's context, e.g. "stage 2"); nothing below main() calls exit(). BATON_CHECK is for
// conditions that depend on input or peers; BATON_DCHECK-style internal invariants use it too,
// since a wrong answer is worse than a slow one.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace baton {

// `text` with every byte that is not part of valid UTF-8 written as "\xNN": an error's cause
// (a path, a flipped header byte) then survives protobuf strings and JSON, which refuse invalid
// UTF-8, and still says which bytes it was.
std::string ValidUtf8(std::string_view text);

class Error : public std::runtime_error {
 public:
  // The message is kept as ValidUtf8(message), however the error is thrown (BATON_CHECK, or
  // `throw Error(...)` with a config's text or a file's bytes in it).
  explicit Error(std::string_view message);
};

// A short description of who is running ("rank 1 stage 1"), prefixed to every error raised on
// this thread. Set once per worker thread; empty by default.
void SetErrorContext(std::string context);
const std::string& ErrorContext();

// Builds the message "[context] file:line: message" (valid UTF-8) and throws baton::Error.
[[noreturn]] void ThrowError(const char* file, int line, const std::string& message);

}  // namespace baton

// BATON_CHECK(cond, "format {}", args...): throws baton::Error naming the failed condition.
#define BATON_CHECK(cond, ...)                                                                  \
  do {                                                                                          \
    if (!(cond)) [[unlikely]] {                                                                 \
      ::baton::ThrowError(__FILE__, __LINE__,                                                   \
                          std::string("check failed: " #cond ": ") + fmt::format(__VA_ARGS__)); \
    }                                                                                           \
  } while (0)

// BATON_FAIL("format {}", args...): throws baton::Error unconditionally.
#define BATON_FAIL(...) ::baton::ThrowError(__FILE__, __LINE__, fmt::format(__VA_ARGS__))
