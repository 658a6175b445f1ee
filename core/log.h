// Logging setup: spdlog with the process's role in every line ("launcher", "stage 2").
#pragma once

#include <string>

namespace baton {

// Configures the default spdlog logger to stderr with `role` in the pattern. Level names:
// trace, debug, info, warn, error. Safe to call again (replaces the pattern and level).
void SetupLogging(const std::string& role, const std::string& level = "info");

}  // namespace baton
