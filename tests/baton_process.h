// Helpers for integration tests that run the real `baton` binary.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace baton::testing {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// The baton binary under test (BATON_BINARY, set by CMake).
std::string BatonBinary();
std::string SourceDir();
// Runs `command` (a shell command line) to completion and captures its output.
CommandResult RunShell(const std::string& command);
// Runs `baton ARGS...`; args are shell-quoted.
CommandResult RunBaton(const std::vector<std::string>& args);
// A fresh temporary directory for one test.
std::string TempDir(const std::string& name);
nlohmann::json ReadJson(const std::string& path);
// Losses of every step of a report, in order.
std::vector<double> Losses(const nlohmann::json& report);

}  // namespace baton::testing
