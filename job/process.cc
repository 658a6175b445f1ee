#include "job/process.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "comm/shared_memory.h"
#include "core/error.h"
#include "core/units.h"

extern char** environ;

namespace baton {

ChildProcesses::~ChildProcesses() { StopAll(); }

void ChildProcesses::Spawn(int rank, const std::vector<std::string>& argv,
                           const std::vector<std::string>& env) {
  BATON_CHECK(!argv.empty(), "empty command line");
  // Build everything before fork: the child may only call async-signal-safe functions.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const std::string& entry : env) env_strings.push_back(entry);
  std::vector<char*> c_argv, c_env;
  for (const std::string& a : argv) c_argv.push_back(const_cast<char*>(a.c_str()));
  c_argv.push_back(nullptr);
  for (const std::string& e : env_strings) c_env.push_back(const_cast<char*>(e.c_str()));
  c_env.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  BATON_CHECK(pid >= 0, "fork failed: {}", strerror(errno));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the launcher died before prctl took effect
    execve(c_argv[0], c_argv.data(), c_env.data());
    _exit(127);
  }
  children_[pid] = rank;
}

std::optional<WorkerExit> ChildProcesses::Poll() {
  for (auto it = children_.begin(); it != children_.end(); ++it) {
    int status = 0;
    const pid_t r = waitpid(it->first, &status, WNOHANG);
    if (r == 0) continue;
    WorkerExit exit;
    exit.rank = it->second;
    if (r > 0 && WIFSIGNALED(status)) exit.signal = WTERMSIG(status);
    if (r > 0 && WIFEXITED(status)) exit.exit_code = WEXITSTATUS(status);
    if (r < 0) exit.exit_code = -1;
    // A worker killed while it set up its shared memory leaves the segment's name behind.
    RemoveSharedMemoryOf(it->first);
    children_.erase(it);
    return exit;
  }
  return std::nullopt;
}

pid_t ChildProcesses::pid(int rank) const {
  for (const auto& [pid, r] : children_) {
    if (r == rank) return pid;
  }
  return -1;
}

void ChildProcesses::SignalAll(int signal) {
  for (const auto& [pid, index] : children_) kill(pid, signal);
}

void ChildProcesses::StopAll(std::chrono::milliseconds grace) {
  for (const auto& [pid, index] : children_) kill(pid, SIGTERM);
  const auto deadline = Clock::now() + grace;
  while (!children_.empty() && Clock::now() < deadline) {
    if (!Poll()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (const auto& [pid, index] : children_) kill(pid, SIGKILL);
  for (const auto& [pid, index] : children_) {
    waitpid(pid, nullptr, 0);
    RemoveSharedMemoryOf(pid);
  }
  children_.clear();
}

std::string SelfExecutable() {
  char buffer[4096];
  const ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  BATON_CHECK(n > 0, "readlink(/proc/self/exe) failed: {}", strerror(errno));
  return std::string(buffer, static_cast<size_t>(n));
}

}  // namespace baton
