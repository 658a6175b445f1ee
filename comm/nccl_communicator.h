// NcclCommunicator: the GPU transport (built only when BATON_HAVE_CUDA). Protocol and rendezvous
// keys: docs/protocol.md.
//
// Communicators (all created at construction, so nothing is created lazily mid-run):
//  - one over the whole world, for AllReduceSum and Barrier; its unique id is set in the KvStore
//    by rank 0;
//  - one per link direction with each listed peer (a 2-rank communicator a -> b, id set by the
//    sender a), each with its own stream. Messages a -> b therefore run in FIFO order on one
//    stream, and the two directions of a pair never queue behind each other (one stream per pair
//    would deadlock 1F1B's crossing sends of large tensors);
//  - one per listed subgroup (id set by its lowest member), for AllReduceSum over that group.
// All inits run as one non-blocking NCCL group and are polled against `timeout`.
//
// Ordering with compute: each operation first makes its stream wait for an event recorded on
// `compute_stream` (nullptr = the legacy default stream), so it sees every kernel queued before
// it; Work::Wait (and the collectives) block the host until the operation finished, then make
// the compute stream wait for it too. Tensors are sent as raw bytes (sizes must match);
// AllReduceSum reduces f32, f16, bf16 and i32 natively in NCCL (f16/bf16 are not widened), and
// every member gets the same bits (NCCL reduces each element once and copies the result).
//
// Memory: NCCL's own buffers are outside the ledger; the Barrier's 4-byte scratch comes from
// `device_allocator`, booked as MemCategory::kComm.
//
// Ownership: owns its NCCL communicators, streams and events; `device_allocator` must outlive it,
// and Works must not outlive it. Thread safety: communicator.h.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/kv_store.h"
#include "core/memory.h"
#include "core/timeouts.h"

namespace baton {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  int device = 0;                         // CUDA ordinal this rank uses
  cudaStream_t compute_stream = nullptr;  // the stream the caller computes on
  // Ranks this rank exchanges messages with (both directions are set up). Both ends of a link
  // must list each other.
  std::vector<int> peers;
  // Subgroups that AllReduceSum will be called on (e.g. {first stage, last stage} for the tied
  // embedding). Every member must list the group.
  std::vector<std::vector<int>> groups;
  // Rendezvous keys are "<store_prefix>/..."; use a fresh prefix per job attempt.
  std::string store_prefix = "nccl";
  CommTimeout timeout{kDefaultSetupWait};  // rendezvous and communicator setup
};

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(KvStore& store, Allocator& device_allocator, const NcclOptions& options);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override;
  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override;
  void AllReduceSum(Tensor& tensor, CommTimeout timeout) override;
  void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) override;
  void Barrier(CommTimeout timeout) override;
  void Abort(const std::string& reason) override;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace baton
