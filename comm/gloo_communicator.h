// GlooCommunicator: the CPU transport. TCP through gloo::transport::tcp; rendezvous through a
// KvStore (the coordinator's in real runs, MemoryKvStore in tests); docs/protocol.md.
//
//  - Point-to-point uses Gloo unbound buffers. The slot of message k on the link a -> b is a
//    function of (channel, direction, k), so the FIFO rule of communicator.h holds with no tags.
//    A waiter thread per pending operation observes completion, so Work::Wait's timeout and
//    Abort() leave Gloo's connections intact; a timed-out Work is still pending.
//  - AllReduceSum over all ranks uses gloo::allreduce (ring: each chunk is reduced once and
//    copied, so every rank gets the same bits); f16/bf16 go through an f32 staging buffer.
//    AllReduceSum over a subgroup sends to the lowest member, which sums in rank order and sends
//    back (a 2-member group exchanges and both add in rank order). Barrier uses gloo::barrier.
//    A collective that times out makes Gloo close every connection: the communicator is then
//    broken and every later call fails. Gloo cannot interrupt its collectives, so Abort() during
//    a full-group AllReduceSum or Barrier takes effect at that call's timeout (the error names
//    the abort); keep those timeouts modest. Abort() interrupts point-to-point waits (and so
//    subgroup all-reduces) at once.
//  - Staging buffers come from `host_allocator`, booked as MemCategory::kComm while they live.
//
// Ownership: owns the Gloo device, context and waiter threads; `store` is only used during
// construction, `host_allocator` must outlive the communicator. Thread safety: communicator.h.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/kv_store.h"
#include "core/memory.h"
#include "core/timeouts.h"

namespace baton {

struct GlooOptions {
  int rank = 0;
  int size = 1;
  // The address this rank listens on (and peers connect to): loopback for local runs, the
  // node's address for multi-node runs.
  std::string hostname = "127.0.0.1";
  // Rendezvous keys are "<store_prefix>/<gloo's key>"; use a fresh prefix per job attempt.
  std::string store_prefix = "gloo";
  // Rendezvous timeout, and Gloo's own timeout for connections.
  CommTimeout timeout{kDefaultWait};
  // The job's secret (the coordinator's token): before the mesh is used, every pair carries a
  // hello naming both ranks and this secret, so a connection that is not this job's peer is
  // found (docs/protocol.md, "The Gloo mesh").
  std::string secret;
  // Ranks on one host exchange point-to-point messages (and so subgroup all-reduces) through
  // shared memory (comm/shared_memory.h) instead of TCP; environment BATON_SHARED_MEMORY=0
  // turns it off for a worker (job/worker_main.cc).
  bool shared_memory = true;
  // The ranks this one talks to (Plan::LinkedRanks): only these pairs get shared-memory rings;
  // empty for every rank. Others on the host talk over TCP, should they ever talk.
  std::vector<int> shared_memory_peers;
};

inline constexpr int kGlooMeshRounds = 4;

class GlooCommunicator final : public Communicator {
 public:
  // Connects the full mesh and checks every pair's hello; blocks until every rank has done the
  // same. A round in which any rank's mesh failed (a stray connection took a listening port) is
  // repeated on fresh ports by all ranks together; throws after kGlooMeshRounds, or on timeout.
  GlooCommunicator(KvStore& store, Allocator& host_allocator, const GlooOptions& options);
  ~GlooCommunicator() override;
  GlooCommunicator(const GlooCommunicator&) = delete;
  GlooCommunicator& operator=(const GlooCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override;
  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override;
  void AllReduceSum(Tensor& tensor, CommTimeout timeout) override;
  void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) override;
  void Barrier(CommTimeout timeout) override;
  void Abort(const std::string& reason) override;
  // Aborts, then joins the threads that wait on point-to-point operations: each releases its
  // tensor as its wait ends.
  void Close(const std::string& reason) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
