// Child worker processes: spawn, poll, and stop them all.
//
// Children run in the launcher's process group's care: each gets PR_SET_PDEATHSIG(SIGKILL), so a
// launcher that dies (even by SIGKILL) takes its workers with it, and StopAll() sends SIGTERM, then
// SIGKILL after a grace period, and reaps every child: no orphans, no zombies.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace baton {

struct ChildExit {
  int index = -1;     // as given to Spawn
  int exit_code = 0;  // when exited normally
  int signal = 0;     // when killed by a signal
  bool ok() const { return signal == 0 && exit_code == 0; }
  std::string Describe() const;  // "exited with code 3", "killed by signal 9 (Killed)"
};

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup();  // StopAll()
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts argv[0] with argv and the current environment plus `env` (KEY=VALUE entries).
  void Spawn(int index, const std::vector<std::string>& argv, const std::vector<std::string>& env);
  // Reaps one child that has exited, if any, without blocking.
  std::optional<ChildExit> Poll();
  int running() const { return static_cast<int>(children_.size()); }
  // Sends `signal` to every live child.
  void SignalAll(int signal);
  pid_t pid(int index) const;
  // SIGTERM to every live child, SIGKILL after `grace`, then reaps all.
  void StopAll(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

 private:
  std::map<pid_t, int> children_;  // pid -> index
};

// The path of the running executable (/proc/self/exe).
std::string SelfExecutable();

}  // namespace baton
