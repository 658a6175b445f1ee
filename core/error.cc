#include "core/error.h"

namespace baton {
namespace {
thread_local std::string g_context;
}  // namespace

void SetErrorContext(std::string context) { g_context = std::move(context); }
const std::string& ErrorContext() { return g_context; }

void ThrowError(const char* file, int line, const std::string& message) {
  std::string where = fmt::format("{}:{}: {}", file, line, message);
  if (!g_context.empty()) where = fmt::format("[{}] {}", g_context, where);
  throw Error(where);
}

}  // namespace baton
