#include "job/agent.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/coordinator_client.h"
#include "core/error.h"
#include "core/stop_signals.h"
#include "core/units.h"

namespace baton {
namespace {

using std::chrono::milliseconds;

// How often the agent looks at its worker process and the stop flag.
constexpr milliseconds kPollInterval{20};
// How long one call to the coordinator waits before the agent asks again: not a bound on
// anything (rank 0's launcher bounds its own waits and then decides).
constexpr milliseconds kCoordinatorWait{10000};
// A worker still running this long after its attempt aborted is killed (as
// ChildProcesses::StopAll).
constexpr milliseconds kStopGrace{2000};

std::string FirstLine(const std::string& text) { return text.substr(0, text.find('\n')); }

// Watches, from its own thread, for the abort of one attempt while that attempt's worker runs.
// Ends once the attempt aborts, the coordinator cannot be reached (both count as aborted), or
// Finish() was called and the worker's exit reported.
class AbortWatch {
 public:
  AbortWatch(CoordinatorClient& client, int rank, int attempt)
      : thread_([this, &client, rank, attempt] { Run(client, rank, attempt); }) {}
  ~AbortWatch() {
    finished_ = true;
    thread_.join();
  }
  AbortWatch(const AbortWatch&) = delete;
  AbortWatch& operator=(const AbortWatch&) = delete;

  // The worker exited: the watch ends once the exit's report wakes its current wait.
  void Finish() { finished_ = true; }
  bool aborted() const { return aborted_; }
  std::string reason() const {
    std::lock_guard lock(mutex_);
    return reason_;
  }

 private:
  void Run(CoordinatorClient& client, int rank, int attempt) {
    std::optional<std::string> reason;
    try {
      while (!finished_ && !reason) reason = client.AwaitAbort(rank, attempt, kCoordinatorWait);
    } catch (const std::exception& e) {
      reason = e.what();
    }
    if (!reason) return;
    std::lock_guard lock(mutex_);
    reason_ = *reason;
    aborted_ = true;
  }

  std::atomic<bool> finished_{false};
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::string reason_;
  std::thread thread_;  // last: starts once the members above exist
};

// Waits for the worker's exit: passes a stop request on to it, and stops it once the attempt
// aborts.
WorkerExit WaitForExit(ChildProcesses& child, const AbortWatch& watch, const WorkerArgs& worker) {
  bool stop_forwarded = false;
  std::optional<Clock::time_point> kill_at;
  while (true) {
    if (std::optional<WorkerExit> exit = child.Poll()) return *exit;
    if (!StopRequested() && OutputClosed()) RequestStop();  // as the launcher: core/stop_signals.h
    if (!stop_forwarded && StopRequested()) {
      spdlog::warn("stop requested: stage {} finishes its step and writes a checkpoint",
                   worker.rank);
      child.SignalAll(SIGTERM);
      stop_forwarded = true;
    }
    if (!kill_at && watch.aborted()) {
      spdlog::debug("attempt {} aborted ({}): stopping stage {}'s worker", worker.attempt,
                    FirstLine(watch.reason()), worker.rank);
      child.SignalAll(SIGTERM);
      kill_at = Clock::now() + kStopGrace;
    }
    if (kill_at && Clock::now() >= *kill_at) {
      child.SignalAll(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

// BATON_WORKER_PREFIX's words (split at spaces; the first an executable's path), which go before
// the worker's command line: e.g. "/usr/bin/qemu-x86_64 -cpu Haswell", so that the avx2_emulation
// test's workers run on the emulated CPU too (qemu's user mode does not follow an exec). Empty
// when unset.
std::vector<std::string> WorkerPrefix() {
  const char* prefix = std::getenv("BATON_WORKER_PREFIX");
  std::vector<std::string> words;
  std::istringstream in(prefix != nullptr ? prefix : "");
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// Runs `worker`'s attempt: starts the worker, waits for its exit, reports it, and returns what
// the job does next (never kPending).
JobNext RunAttempt(CoordinatorClient& client, const WorkerArgs& worker) {
  ChildProcesses child;
  SpawnWorker(child, worker);
  WorkerExit exit;
  JobNext next;
  {
    AbortWatch watch(client, worker.rank, worker.attempt);
    exit = WaitForExit(child, watch, worker);
    // The report wakes the watch's wait; it must be made while the watch lives.
    watch.Finish();
    next = client.ReportWorkerExit(worker.attempt, exit, kCoordinatorWait);
  }
  while (next.kind == JobNext::Kind::kPending) {
    next = client.ReportWorkerExit(worker.attempt, exit, kCoordinatorWait);
  }
  return next;
}

}  // namespace

void SpawnWorker(ChildProcesses& group, const WorkerArgs& worker) {
  const std::vector<std::string> command = {SelfExecutable(), "--log-level",
                                            worker.log_level, "worker",
                                            "--coordinator",  worker.coordinator,
                                            "--rank",         std::to_string(worker.rank),
                                            "--world-size",   std::to_string(worker.world_size),
                                            "--local-rank",   std::to_string(worker.local_rank),
                                            "--attempt",      std::to_string(worker.attempt),
                                            "--listen-host",  worker.listen_host};
  std::vector<std::string> argv = WorkerPrefix();
  argv.insert(argv.end(), command.begin(), command.end());
  group.Spawn(worker.rank, argv, {"BATON_TOKEN=" + worker.token, "BATON_JOB_ID=" + worker.job_id});
}

int RunAgent(const WorkerArgs& first) {
  WorkerArgs worker = first;
  worker.attempt = 0;
  try {
    CoordinatorClient client(worker.coordinator, worker.token);
    while (true) {
      const JobNext next = RunAttempt(client, worker);
      if (next.kind == JobNext::Kind::kEnd) {
        if (!next.succeeded) spdlog::error("the job failed: {}", FirstLine(next.reason));
        return next.succeeded ? 0 : 1;
      }
      BATON_CHECK(next.attempt > worker.attempt, "the coordinator restarts attempt {} after {}",
                  next.attempt, worker.attempt);
      worker.attempt = next.attempt;
      spdlog::info("starting stage {}'s worker again for attempt {}", worker.rank, worker.attempt);
    }
  } catch (const std::exception& e) {
    spdlog::error("stage {}'s agent: {}", worker.rank, e.what());
    LogOrigin(e);
    return 1;
  }
}

}  // namespace baton
