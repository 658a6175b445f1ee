// Group: some ranks of the job's communicator as a world of their own, and the one way the
// worker talks to any process group (a pipeline, a stage's replicas, its tensor ranks, the
// stages holding a tied parameter). The members come from the plan's layout
// (plan/parallel_layout.h); a Group only maps and forwards.
//
// A Group's rank i is world rank members()[i] (WorldRank, ViewRank map both ways), so the
// pipeline code talks to "stage s" and knows nothing of replicas or tensor ranks. Every
// operation is the world communicator's, on the mapped ranks:
//  - Isend/Irecv to member i go to world rank members[i]; FIFO order per link is the world's
//    (a link of the group is a link of the world);
//  - AllReduceSum over the group is the world's subgroup all-reduce over `members`, and over a
//    subset of the group the world's over the mapped ranks: summed in world-rank order, the same
//    bits on every member;
//  - AllGather and AllToAll move slices point to point (no arithmetic: every member ends with
//    the bits that were sent); the members must be each other's peers (Plan::Peers lists the
//    links a transport sets up);
//  - ReduceScatterSum leaves in each member's slice the group's rank-order sum of that slice
//    (the all-reduce's bits);
//  - Barrier is an all-reduce of one i32 over the members (host memory: CPU transports only);
//  - Abort and Close forward to the world communicator, which every group shares.
// Status and failure texts name peers by world rank (WorldRank), whatever group they talk in.
//
// The slice collectives cut a contiguous tensor along one dimension (0 unless named) into
// size() equal slices, slice i belonging to member i. Along a later dimension a slice is one
// contiguous piece per index of the dimensions before it (a (B, S, C) activation cut along the
// sequence: B pieces), each moved as its own message.
//
// Ownership: `world` must outlive the group. Thread safety: the world's (collectives from one
// thread at a time).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace baton {

class Group final : public Communicator {
 public:
  // `members`: distinct world ranks, in the group's rank order; must include world.rank().
  Group(Communicator& world, std::vector<int> members);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  // The world rank of the group's rank `rank`.
  int WorldRank(int rank) const override;
  // The group's rank of world rank `world_rank`, or -1 when it is no member.
  int ViewRank(int world_rank) const;
  const std::vector<int>& members() const { return members_; }

  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override;
  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override;
  void AllReduceSum(Tensor& tensor, CommTimeout timeout) override;
  void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) override;
  void Barrier(CommTimeout timeout) override;
  void Abort(const std::string& reason) override { world_.Abort(reason); }
  void Close(const std::string& reason) override { world_.Close(reason); }

  // `whole` holds this member's slice at its place; on return every slice holds its member's.
  void AllGather(Tensor& whole, CommTimeout timeout, int dim = 0);
  // On return this member's slice of `whole` holds the group's sum of that slice, in rank order;
  // the other slices hold no promised values.
  void ReduceScatterSum(Tensor& whole, CommTimeout timeout, int dim = 0);
  // Slice j of `send` goes to member j, which receives it into its slice rank() of `recv` (its
  // own slice is copied from `send`). Both the same shape and dtype, not overlapping.
  void AllToAll(const Tensor& send, Tensor& recv, CommTimeout timeout);

  // Slice `member` of `t` along dimension `dim` (a view; contiguous only along dimension 0 or
  // where the dimensions before `dim` are all 1).
  Tensor SliceOf(const Tensor& t, int member, int dim = 0) const;

 private:
  // Slice `member` of `t` along `dim` as contiguous pieces, one per index of the dimensions
  // before `dim`, in row-major order.
  std::vector<Tensor> PiecesOf(const Tensor& t, int member, int dim) const;

  Communicator& world_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace baton
