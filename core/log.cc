#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

namespace baton {

void SetupLogging(const std::string& role, const std::string& level) {
  const std::string name = "baton-" + role;
  spdlog::drop(name);
  auto logger = spdlog::stderr_color_mt(name);
  logger->set_pattern(fmt::format("[%H:%M:%S.%e] [{}] [%^%l%$] %v", role));
  logger->set_level(spdlog::level::from_str(level));
  spdlog::set_default_logger(logger);
}

}  // namespace baton
