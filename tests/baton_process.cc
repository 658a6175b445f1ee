#include "tests/baton_process.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/temp_dir.h"

extern char** environ;

namespace baton::testing {

std::string BatonBinary() { return BATON_BINARY; }
std::string BatonFaultsBinary() { return BATON_FAULTS_BINARY; }
std::string SourceDir() { return BATON_SOURCE_DIR; }

CommandResult RunShell(const std::string& command) {
  CommandResult result;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

int RunLogged(const std::vector<std::string>& argv, const std::string& log_path) {
  BATON_CHECK(!argv.empty(), "no program to run");
  std::vector<char*> c_argv;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int spawn_error =
      posix_spawn(&pid, argv[0].c_str(), &actions, nullptr, c_argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  BATON_CHECK(spawn_error == 0, "cannot start {}: {}", argv[0], std::strerror(spawn_error));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    BATON_CHECK(errno == EINTR, "waitpid: {}", std::strerror(errno));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string LastLines(const std::string& path, size_t count) {
  std::ifstream in(path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
    if (lines.size() > count) lines.pop_front();
  }
  std::string out;
  for (const std::string& line : lines) out += "  | " + line + "\n";
  return out;
}

namespace {
std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}
}  // namespace

CommandResult RunBaton(const std::vector<std::string>& args) {
  // The launcher on the workers' (emulated) CPU, so that it predicts what they book.
  const char* prefix = std::getenv("BATON_WORKER_PREFIX");
  std::string command = prefix != nullptr ? std::string(prefix) + " " : std::string();
  command += Quote(BatonBinary());
  for (const std::string& a : args) command += " " + Quote(a);
  return RunShell("cd " + Quote(SourceDir()) + " && " + command);
}

std::string TempDir(const std::string& name) {
  // Removed at exit (ctest runs each test in its own process).
  static std::vector<std::unique_ptr<baton::TempDir>> made;
  made.push_back(std::make_unique<baton::TempDir>("baton-test-" + name));
  return made.back()->path();
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::vector<double> Losses(const nlohmann::json& report) {
  std::vector<double> losses;
  for (const auto& step : report.at("steps")) losses.push_back(step.at("loss").get<double>());
  return losses;
}

int Background(const std::string& command, const std::string& log) {
  const CommandResult started =
      RunShell("cd " + Quote(SourceDir()) + " && ( " + command + " > " + log +
               " 2>&1; echo \"exit=$?\" >> " + log + " ) > /dev/null 2>&1 & echo $!");
  return std::stoi(started.output);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

bool AnyWorkerLogged(const std::string& output) {
  return output.find("] [stage ") != std::string::npos ||
         output.find("] [rank ") != std::string::npos;
}

bool WaitFor(const std::string& path, const std::string& text, int seconds) {
  for (int i = 0; i < seconds * 10; ++i) {
    if (ReadFile(path).find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::string SignalTheChildOf(int shell, int signal, const std::string& log, int seconds) {
  const std::vector<int> children = ChildPids(shell);
  BATON_CHECK(children.size() == 1, "shell {} runs {} processes, not one:\n{}", shell,
              children.size(), ReadFile(log));
  kill(children.front(), signal);
  BATON_CHECK(WaitFor(log, "exit=", seconds), "no exit line in {} after SIGKILL:\n{}", log,
              ReadFile(log));
  return ReadFile(log);
}

std::string ResumedFromLine(const std::string& checkpoint, const std::string& dir) {
  return RunShell("cd '" + SourceDir() + "' && timeout 120 '" + BatonBinary() +
                  "' run configs/gpt-tiny.yaml --set train.steps=100000 --set parallel.stages=1"
                  " --set train.log_every=1 --set output.dir=" +
                  dir + " --resume " + checkpoint + " 2>&1 | grep -m1 'resumed from'")
      .output;
}

std::vector<int> ChildPids(int parent) {
  std::vector<int> pids;
  const CommandResult r = RunShell("pgrep -P " + std::to_string(parent));
  std::istringstream in(r.output);
  for (int pid; in >> pid;) pids.push_back(pid);
  return pids;
}

std::vector<int> DescendantPids(int root) {
  std::vector<int> found = ChildPids(root);
  for (size_t i = 0; i < found.size(); ++i) {
    for (int child : ChildPids(found[i])) found.push_back(child);
  }
  return found;
}

std::vector<std::string> SharedMemoryNamesOf(int pid) {
  const std::string start = "baton." + std::to_string(pid) + ".";
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", error)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(start, 0) == 0) names.push_back(name);
  }
  return names;
}

bool Running(int pid) {
  // /proc/PID/stat: "PID (COMM) STATE ...", and COMM may hold spaces or parentheses.
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  const size_t end = stat.rfind(')');
  if (end == std::string::npos || end + 2 >= stat.size()) return false;
  const char state = stat[end + 2];
  return state != 'Z' && state != 'X';
}

int WorkerPid(int shell, int rank) {
  for (int pid : DescendantPids(shell)) {
    const std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    std::string words;
    for (char c : cmdline) words += c == '\0' ? ' ' : c;
    if (words.find(" worker ") != std::string::npos &&
        words.find("--rank " + std::to_string(rank) + " ") != std::string::npos) {
      return pid;
    }
  }
  return -1;
}

}  // namespace baton::testing
