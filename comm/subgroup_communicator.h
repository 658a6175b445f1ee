// SubgroupCommunicator: a view of some ranks of a communicator as a world of their own.
//
// A job of P stages x R replicas runs one pipeline per replica (docs/parallel.md, "Rank layout"):
// the engine and the tied-parameter sums of replica r talk to "stage s", which is world rank
// r * P + s. This view maps ranks both ways and forwards every operation to the world
// communicator, so the pipeline code needs no notion of replicas:
//  - Isend/Irecv to member index i go to world rank members[i]; FIFO order per link is the
//    world's (a link of the view is a link of the world);
//  - AllReduceSum over the view is the world's subgroup all-reduce over `members`, and over a
//    group of the view the world's over the mapped ranks (the same rank-order bits);
//  - Barrier is an all-reduce of one i32 over the members (host memory: CPU transports only);
//  - Abort and Close forward to the world communicator, which every view shares.
//
// Ownership: `world` must outlive the view. Thread safety: the world's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace baton {

class SubgroupCommunicator final : public Communicator {
 public:
  // `members`: distinct world ranks, in the view's rank order; must include world.rank().
  SubgroupCommunicator(Communicator& world, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override;
  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override;
  void AllReduceSum(Tensor& tensor, CommTimeout timeout) override;
  void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) override;
  void Barrier(CommTimeout timeout) override;
  void Abort(const std::string& reason) override { world_.Abort(reason); }
  void Close(const std::string& reason) override { world_.Close(reason); }

  // The world rank of the view's rank `rank`.
  int WorldRank(int rank) const override;

 private:
  Communicator& world_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace baton
