// Pinning a worker process to CPUs of its own (device.pin_threads, docs/config.md).
//
// On a host whose CPUs are shared by several worker processes, the kernel may run one worker's
// threads (its compute thread, or the transport thread that a peer's message wakes) on the CPU
// where another worker computes, so a message costs the receiver milliseconds of its core rather
// than microseconds. Pinning gives local rank k the k-th block of `threads` CPUs among those the
// process may run on (sched_getaffinity), every thread of the process included.
#pragma once

#include <optional>
#include <vector>

namespace baton {

// The CPUs local rank `local_rank` takes: allowed[local_rank * threads ... + threads - 1], or
// nullopt when that block is not there (more local processes x threads than allowed CPUs).
std::optional<std::vector<int>> PinnedCpus(const std::vector<int>& allowed, int local_rank,
                                           int threads);

// The CPUs this process may run on, ascending.
std::vector<int> AllowedCpus();

// Sets the affinity of every thread of this process (and so of the threads they start later) to
// `cpus`. Throws baton::Error naming the thread and the errno when the kernel refuses.
void PinProcessToCpus(const std::vector<int>& cpus);

}  // namespace baton
