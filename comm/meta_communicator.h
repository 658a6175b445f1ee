// MetaCommunicator: the memory planner's stand-in for a transport. One rank on its own: no
// peers, nothing moved, no waiting. It books in the ledger what the transport it stands for
// books, through the same rules (gloo_communicator.h's staging functions, the NCCL barrier
// scratch), so that running a rank's real trainer on a meta backend (kernels/backend.h) with it
// reproduces that rank's ledger.
//
// Timing, as the planner assumes it: a receive has completed when it is posted; a send completes
// only when waited for, i.e. at the engine's next compute action under rendezvous-safe
// schedules (worker/engine.h) and at the step's end otherwise. With a rendezvous-safe schedule
// that is exactly when the engine frees it; with any other, the prediction is an upper bound.
//
// Thread safety: one thread per communicator, as the engine drives it.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/memory.h"

namespace baton {

// The transports whose bookings a MetaCommunicator reproduces.
enum class CommTransport {
  kGloo,       // CPU processes: staging copies in host memory (gloo_communicator.h)
  kNccl,       // GPU processes: one f32 of barrier scratch on the device
  kInProcess,  // FakeHub (planner/in_process.h): books nothing
};

// `allocator`: the one the real transport books with (the host allocator for Gloo, the device's
// for NCCL); a MetaAllocator in the planner. `linked_ranks`: how many ranks Gloo's shared-memory
// links would serve (the plan's LinkedRanks, all on this host), -1 for every other rank.
std::unique_ptr<Communicator> MakeMetaCommunicator(int rank, int size, CommTransport transport,
                                                   Allocator& allocator, int linked_ranks = -1);

}  // namespace baton
