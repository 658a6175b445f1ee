// The Communicator interface: how pipeline stages move tensors between processes.
//
// Semantics, shared by every implementation (FakeCommunicator, GlooCommunicator, NcclCommunicator;
// see docs/protocol.md):
//  - Point-to-point messages have no tags. Between a pair of ranks, messages are matched in FIFO
//    order per direction: the k-th Isend from a to b fills the k-th Irecv on b from a. The two
//    tensors must have the same dtype and size. Directions are independent of each other and of
//    other pairs.
//  - Isend/Irecv only post the operation; the returned Work completes it. A send may complete
//    only when the receiver has posted its receive (assume rendezvous, as NCCL and Gloo do for
//    large messages), so post receives ahead of need. The tensor's storage is kept alive by the
//    operation until it completes; a sent tensor must not be written, nor a received one read,
//    before its Work completes. Dropping an incomplete Work does not cancel the operation.
//  - Collectives (AllReduceSum, Barrier) must be called by every member in the same order. Their
//    result is bit-identical on every member.
//  - Every wait takes a timeout and throws baton::Error naming the peer (or group) and what timed
//    out; callers add the stage, action and micro-batch (SetErrorContext or a catch + rethrow).
//  - Abort(reason), from any thread, makes pending and later operations throw promptly.
//
// Thread safety: Isend/Irecv/Work may be used from several threads; collectives must be issued by
// one thread at a time.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace baton {

using CommTimeout = std::chrono::milliseconds;

// A posted point-to-point operation.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the operation completes. Throws baton::Error naming the peer and the message on
  // timeout, abort or transport failure. Returns at once if already complete.
  virtual void Wait(CommTimeout timeout) = 0;
  // True once the operation has completed; throws if it failed. Never blocks.
  virtual bool Test() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The job-wide (world) rank of this communicator's rank `rank`: itself, unless the
  // communicator is a view of some ranks of another (Group). Status and failure
  // texts name peers by world rank, whatever communicator they talk through.
  virtual int WorldRank(int rank) const { return rank; }

  // Posts a send of `tensor` (contiguous) to `peer` != rank().
  virtual std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) = 0;
  // Posts a receive into `tensor` (contiguous, already shaped) from `peer` != rank().
  virtual std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) = 0;

  // In-place sum over all ranks. f32 and i32 are summed as they are; f16 and bf16 are summed in
  // f32 and rounded once to their type (NcclCommunicator: summed natively by NCCL).
  virtual void AllReduceSum(Tensor& tensor, CommTimeout timeout) = 0;
  // In-place sum over `group` (ranks, any order, must include rank()); only members call it.
  // Summed in rank order (((x_g0 + x_g1) + x_g2) ...), so the bits are the same on every member.
  virtual void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) = 0;
  // Returns once every rank has entered the barrier.
  virtual void Barrier(CommTimeout timeout) = 0;

  // Makes pending and later operations throw baton::Error carrying `reason`. Thread-safe.
  virtual void Abort(const std::string& reason) = 0;
  // Abort(reason), and returns only once no pending operation holds a tensor any more: after
  // Close, the memory of every tensor ever handed in may go, whoever still holds the
  // communicator. For owners whose allocators die before the communicator does.
  virtual void Close(const std::string& reason) { Abort(reason); }
};

// Checks shared by the implementations (throw baton::Error with a clear message).
void CheckPeer(int peer, int rank, int size);
void CheckTransferable(const Tensor& tensor, const char* what);  // defined, contiguous
// The group sorted, checked to be distinct ranks of the world that include `rank`.
std::vector<int> CheckedGroup(const std::vector<int>& group, int rank, int size);
// "ranks 0, 3"
std::string DescribeGroup(const std::vector<int>& group);
// One point-to-point message, as errors name it: "send of f32(4) to rank 1 (message #3 on link
// 0 -> 1)", or "receive of f32(4) from rank 0 (message #3 on link 0 -> 1)".
std::string DescribeMessage(bool is_send, const std::string& tensor_text, int src, int dst,
                            uint64_t index);

}  // namespace baton
