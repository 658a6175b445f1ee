// SharedMemoryLinks: point-to-point messages between ranks on one host through shared memory,
// the same-host path of GlooCommunicator (docs/parallel.md, "Ranks on one host").
//
// Each rank creates one POSIX shared-memory segment (/dev/shm/baton.<pid>.<rank>.<nonce>) that
// holds a ring per (same-host sender, channel) for the messages it receives, and maps every
// same-host peer's segment to write its own messages there. A message is a 16-byte header (its
// bytes and its index on the link) and its payload, streamed through the ring: the sender copies
// in as space frees, the receiver copies out as bytes arrive, so a message of any size passes
// through a ring of fixed size. Per (link, channel) messages go in FIFO order, which is the
// Communicator's matching rule (communicator.h). One progress thread per rank does every copy of
// its sends and receives; it sleeps on a futex word in its own segment (the doorbell) that peers
// ring when they leave it bytes to read or space to write.
//
// Lifetime of a segment: created and sized (the space reserved at once, so a full /dev/shm is an
// error at start-up, never a SIGBUS mid-step), opened by every same-host peer, then unlinked: from
// then on no name exists, and the memory goes when the last process unmaps it, however they end.
// A segment whose creator died before the unlink (a kill during start-up) is removed by the next
// rank that starts on the host (its name holds the creator's pid) or by the launcher
// (RemoveSharedMemoryOf); it is never read: a segment is only opened under the name its creator
// published in this job's store, and its header must carry this job's hash.
//
// A peer that ended (its pid is gone) or closed its links fails the operations waiting on it,
// naming it, within a wait slice; an abort fails every pending operation at once.
//
// Thread safety: Post from any thread; Abort from any thread; Stop once, by the owner.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/kv_store.h"
#include "core/memory.h"

namespace baton {

// The channels the links carry (GlooCommunicator's user and subgroup-collective channels).
inline constexpr int kSharedMemoryChannels = 2;

// One ring's bytes (header and data) and one rank's segment's booking: a ring per same-host peer
// and channel, booked as comm for the communicator's life (comm/staging.h).
int64_t SharedMemoryRingBytes();
int64_t SharedMemorySegmentBytes(int same_host_peers);

// False when the environment says BATON_SHARED_MEMORY=0 (or "off", "false"): then ranks on one
// host talk over TCP as hosts apart do. Read by the worker and by the memory planner alike.
bool SharedMemoryEnabled();

// Where a rank's segment names start: "/dev/shm/baton.<pid>.".
std::string SharedMemoryPrefixOf(int pid);
// Unlinks every segment created by process `pid` (a worker that ended); returns how many.
int RemoveSharedMemoryOf(int pid);
// Unlinks every baton segment whose creator no longer runs; returns how many.
int RemoveStaleSharedMemory();

struct SharedMemoryOptions {
  int rank = 0;
  int size = 1;
  // Ranks with equal keys share a host (GlooCommunicator: listen address and boot id).
  std::string host_key;
  // The ranks this one talks to; empty for all. A pair is linked only when each names the other.
  std::vector<int> peers;
  // Names this job's segments' content; a segment with another hash is refused.
  uint64_t job_hash = 0;
  // Store keys are "<store_prefix>/...".
  std::string store_prefix = "shm";
  CommTimeout timeout{std::chrono::seconds(60)};
};

struct ShmOp;  // one queued send or receive (shared_memory.cc)

class SharedMemoryLinks {
 public:
  // Called once when an operation ends: "" when it completed, else why it failed.
  using Done = std::function<void(const std::string& failure)>;

  // Meets every rank of the world through `store` (all must call it) and links the pairs that
  // share a host and could both map each other's segment; other pairs are not served. Books its
  // segment in `ledger` as comm while it lives. Never throws for a failure to create shared
  // memory (that rank is simply served by none); throws on a store timeout.
  SharedMemoryLinks(KvStore& store, MemoryLedger& ledger, const SharedMemoryOptions& options);
  ~SharedMemoryLinks();
  SharedMemoryLinks(const SharedMemoryLinks&) = delete;
  SharedMemoryLinks& operator=(const SharedMemoryLinks&) = delete;

  // True when messages to and from world rank `peer` go through these links.
  bool Serves(int peer) const;

  // Queues a message on (peer, channel): a send of `nbytes` at `data`, or a receive into it.
  // `index` is its number on the link (checked against the sender's on receipt). `data` must
  // stay valid until `done` has been called. `done` runs on the progress thread (or in Stop).
  void Post(bool is_send, int peer, int channel, uint64_t index, void* data, int64_t nbytes,
            Done done);

  // A two-member all-reduce's exchange with `peer`, summed as it streams: `data` (n elements of
  // `dtype`) is sent as message `send_index`, and the peer's message `recv_index` is added into
  // it (AddInto, this rank's value first when `mine_first`) chunk by chunk, each chunk only
  // once it has been sent, so no staging copy is made. The result has SumInOrder's bits.
  void PostExchangeSum(int peer, int channel, uint64_t send_index, uint64_t recv_index, void* data,
                       int64_t nbytes, DType dtype, bool mine_first, Done send_done,
                       Done recv_done);

  // Fails every pending and later-posted operation with `reason`.
  void Abort(const std::string& reason);
  // Tells the peers this rank is gone, ends the progress thread, and fails what is still
  // pending: afterwards no operation touches its memory. Idempotent.
  void Stop();

  struct Impl;

 private:
  void Enqueue(const std::vector<std::shared_ptr<ShmOp>>& ops);

  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
