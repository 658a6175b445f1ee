// Child worker processes: spawn, poll, and stop them all. The local launcher holds one child per
// stage; under mpirun / srun each rank's agent holds its one worker (job/agent.h).
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

#include "coordinator/coordinator_types.h"

namespace baton {

class ChildProcesses {
 public:
  ChildProcesses() = default;
  ~ChildProcesses();  // StopAll()
  ChildProcesses(const ChildProcesses&) = delete;
  ChildProcesses& operator=(const ChildProcesses&) = delete;

  // Starts argv[0] with argv and the current environment plus `env` (KEY=VALUE entries), as
  // `rank`'s worker.
  void Spawn(int rank, const std::vector<std::string>& argv, const std::vector<std::string>& env);
  // Reaps one child that has exited, if any, without blocking; its exit names the rank given to
  // Spawn.
  std::optional<WorkerExit> Poll();
  int running() const { return static_cast<int>(children_.size()); }
  // Sends `signal` to every live child.
  void SignalAll(int signal);
  pid_t pid(int rank) const;
  // SIGTERM to every live child, SIGKILL after `grace`, then reaps all.
  void StopAll(std::chrono::milliseconds grace = std::chrono::milliseconds(2000));

 private:
  std::map<pid_t, int> children_;  // pid -> rank
};

// The path of the running executable (/proc/self/exe).
std::string SelfExecutable();

}  // namespace baton
