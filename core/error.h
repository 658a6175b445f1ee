// Baton's one error type and the checks that raise it.
//
// Errors cross module boundaries as `baton::Error` (an exception carrying the worker's context,
// e.g. "stage 2", in its message, and the call site apart: users read the reason, developers
// find the source at --log-level debug); nothing below main() calls exit(). BATON_CHECK is for
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
  explicit Error(std::string_view message, std::string origin = {});
  // Where it was raised, and the check that failed: "core/files.cc:46: check failed: n > 0".
  // Empty for an Error built by hand. Not part of what(): callers log it at debug level.
  const std::string& origin() const { return origin_; }

 private:
  std::string origin_;
};

// A short description of who is running ("rank 1 stage 1"), prefixed to every error raised on
// this thread. Set once per worker thread; empty by default.
void SetErrorContext(std::string context);
const std::string& ErrorContext();

// Throws baton::Error with the message "[context] message" (valid UTF-8) and the origin
// "file:line" (+ ": check failed: condition" when `condition` is not null).
[[noreturn]] void ThrowError(const char* file, int line, const char* condition,
                             const std::string& message);

// Logs at debug level (spdlog) where a baton::Error was raised; nothing for other exceptions.
// The catch-alls at the top of a program call it beside printing what().
void LogOrigin(const std::exception& e);

}  // namespace baton

// BATON_CHECK(cond, "format {}", args...): throws baton::Error naming the failed condition.
#define BATON_CHECK(cond, ...)                                                  \
  do {                                                                          \
    if (!(cond)) [[unlikely]] {                                                 \
      ::baton::ThrowError(__FILE__, __LINE__, #cond, fmt::format(__VA_ARGS__)); \
    }                                                                           \
  } while (0)

// BATON_FAIL("format {}", args...): throws baton::Error unconditionally.
#define BATON_FAIL(...) ::baton::ThrowError(__FILE__, __LINE__, nullptr, fmt::format(__VA_ARGS__))
