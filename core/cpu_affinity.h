// Pinning a worker's compute to CPUs of its own (device.pin_threads, docs/config.md).
//
// On a host whose CPUs are shared by several worker processes, the kernel moves a worker's
// compute thread between CPUs and lets two of them meet on one. Pinning gives local rank k the
// k-th block of `threads` CPUs among those the process may run on (sched_getaffinity): the
// thread that trains and the CPU backend's pool workers it starts. The transport's threads must
// stay free: a peer's message is read by them while this rank computes, and on the compute's own
// CPU they would wait for it, holding up the sender (bench/README.md, "Where the bubble went").
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

// Sets the calling thread's affinity to `cpus`; threads it starts later inherit it. Throws
// baton::Error with the errno when the kernel refuses.
void PinThisThread(const std::vector<int>& cpus);

}  // namespace baton
