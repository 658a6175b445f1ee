#include "core/stop_signals.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace baton {
namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_first_signal{0};
std::atomic<long> g_signal_count{0};

constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1};

// The stop signals this process takes. A signal ignored at exec is discarded, never pending, so
// each is set to its default action (harmless while blocked: sigwait takes it first), except
// SIGHUP when it came in ignored: `nohup baton run ...` asks to outlive the terminal. SIGINT
// ignored at entry (as `baton run ... &` from a script starts it) is taken all the same: Ctrl-C
// and `kill -INT` must stop a run wherever it was started.
// Async-signal-safe (sigaction only): it runs from BlockStopSignals too.
sigset_t TakeStopSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : kStopSignals) {
    struct sigaction current = {};
    sigaction(s, nullptr, &current);
    if (s == SIGHUP && current.sa_handler == SIG_IGN) continue;
    struct sigaction fallback = {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(s, &fallback, nullptr);
    sigaddset(&set, s);
  }
  return set;
}

// Blocks every stop signal in the calling thread (SIGHUP too, also when it is left ignored);
// returns pthread_sigmask's error number (0: done).
int BlockInThisThread() {
  sigset_t all;
  sigemptyset(&all);
  for (int s : kStopSignals) sigaddset(&all, s);
  return pthread_sigmask(SIG_BLOCK, &all, nullptr);
}

void ReceiveForever(sigset_t set) {
  while (true) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;  // EINTR cannot happen; nothing else is expected
    int none = 0;
    g_first_signal.compare_exchange_strong(none, signal);
    g_signal_count.fetch_add(1);
    g_stop.store(true);
  }
}

}  // namespace

void BlockStopSignals() {
  // Blocked first: a signal that comes while the dispositions change stays pending.
  if (BlockInThisThread() == 0) TakeStopSignals();
}

void InstallStopSignals() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int rc = BlockInThisThread();
    BATON_CHECK(rc == 0, "pthread_sigmask: {}", strerror(rc));
    const sigset_t set = TakeStopSignals();
    struct sigaction ignore = {};
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    BATON_CHECK(sigaction(SIGPIPE, &ignore, nullptr) == 0, "sigaction(SIGPIPE): {}",
                strerror(errno));
    // Detached: it lives as long as the process and touches only the atomics above. It takes
    // what came while the signals were blocked (from BlockStopSignals on) as soon as it starts.
    std::thread(ReceiveForever, set).detach();
  });
}

bool StopRequested() { return g_stop.load(); }
const std::atomic<bool>& StopFlag() { return g_stop; }
int StopSignal() { return g_first_signal.load(); }
long StopSignalCount() { return g_signal_count.load(); }
void RequestStop() { g_stop.store(true); }

bool OutputClosed() {
  // A pipe's writing end polls POLLERR once no reader is left (whatever events are asked for);
  // a terminal or file never does.
  pollfd fds[2] = {{STDOUT_FILENO, 0, 0}, {STDERR_FILENO, 0, 0}};
  if (poll(fds, 2, 0) <= 0) return false;
  for (const pollfd& fd : fds) {
    if ((fd.revents & (POLLERR | POLLHUP)) != 0 && (fd.revents & POLLNVAL) == 0) return true;
  }
  return false;
}

}  // namespace baton
