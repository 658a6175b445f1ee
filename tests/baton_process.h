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

// Runs `command` (from the source dir) in the background with its output in `log`, followed by
// a line "exit=CODE"; returns the pid of the subshell whose child is the command.
int Background(const std::string& command, const std::string& log);
std::string ReadFile(const std::string& path);
// Waits up to `seconds` for `text` to appear in the file.
bool WaitFor(const std::string& path, const std::string& text, int seconds);
std::vector<int> ChildPids(int parent);
// The worker process of `rank` among the children of the launcher that `shell` (Background's
// pid) runs; -1 if there is none (yet). Only this test's own processes are ever found.
int WorkerPid(int shell, int rank);

}  // namespace baton::testing
