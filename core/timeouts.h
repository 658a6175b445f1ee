// The default of every wait, in one place. A job sets each wait from its plan's Timeouts
// (plan/plan.h), which parallel.timeout_s and parallel.heartbeat_timeout_s decide; these apply
// where a component runs outside a job (unit tests, benchmarks) and are what those keys default
// to.
#pragma once

#include <chrono>

namespace baton {

// Any wait on a peer: parallel.timeout_s.
inline constexpr std::chrono::milliseconds kDefaultWait{60000};
// A transport's rendezvous and communicator setup (NCCL): twice a peer wait.
inline constexpr std::chrono::milliseconds kDefaultSetupWait{2 * kDefaultWait};
// Reaching the coordinator, an RPC's margin, and how long a client goes without contact.
inline constexpr std::chrono::milliseconds kDefaultCoordinatorWait{30000};
// A silent worker is declared dead after this: parallel.heartbeat_timeout_s.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{10000};
// How often a worker reports to the coordinator (Timeouts::heartbeat_interval).
inline constexpr std::chrono::milliseconds kHeartbeatInterval{500};
// The least any start-up wait gets (Timeouts::startup), whatever parallel.timeout_s says.
inline constexpr std::chrono::milliseconds kStartupFloorWait{60000};
// Half a second per process of the job on top of start-up waits (StartupPerProcess).
inline constexpr std::chrono::milliseconds kStartupWaitPerProcess{500};

}  // namespace baton
