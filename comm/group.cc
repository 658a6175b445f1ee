#include "comm/group.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace baton {
namespace {

void WaitAll(std::vector<std::unique_ptr<Work>>& works, CommTimeout timeout) {
  for (std::unique_ptr<Work>& work : works) work->Wait(timeout);
}

}  // namespace

Group::Group(Communicator& world, std::vector<int> members)
    : world_(world), members_(std::move(members)) {
  CheckedGroup(members_, world_.rank(), world_.size());  // distinct, in range, holds this rank
  rank_ = ViewRank(world_.rank());
}

int Group::WorldRank(int rank) const {
  BATON_CHECK(0 <= rank && rank < size(), "rank {} is outside a group of {} ranks ({})", rank,
              size(), DescribeGroup(members_));
  return members_[static_cast<size_t>(rank)];
}

int Group::ViewRank(int world_rank) const {
  const auto it = std::find(members_.begin(), members_.end(), world_rank);
  return it == members_.end() ? -1 : static_cast<int>(it - members_.begin());
}

std::unique_ptr<Work> Group::Isend(const Tensor& tensor, int peer) {
  CheckPeer(peer, rank_, size());
  return world_.Isend(tensor, WorldRank(peer));
}

std::unique_ptr<Work> Group::Irecv(Tensor& tensor, int peer) {
  CheckPeer(peer, rank_, size());
  return world_.Irecv(tensor, WorldRank(peer));
}

void Group::AllReduceSum(Tensor& tensor, CommTimeout timeout) {
  world_.AllReduceSum(tensor, members_, timeout);
}

void Group::AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) {
  std::vector<int> mapped;
  for (int member : CheckedGroup(group, rank_, size())) mapped.push_back(WorldRank(member));
  world_.AllReduceSum(tensor, mapped, timeout);
}

void Group::Barrier(CommTimeout timeout) {
  int32_t one = 1;
  Tensor token = Tensor::Wrap(&one, {1}, DType::kI32);
  world_.AllReduceSum(token, members_, timeout);
}

Tensor Group::SliceOf(const Tensor& t, int member, int dim) const {
  BATON_CHECK(
      t.defined() && t.is_contiguous() && 0 <= dim && dim < t.dim() && t.size(dim) % size() == 0,
      "a group of {} cuts a contiguous tensor along dimension {} into equal parts: {}", size(), dim,
      t.defined() ? t.ToString() : "an undefined tensor");
  BATON_CHECK(0 <= member && member < size(), "member {} of a group of {}", member, size());
  const int64_t rows = t.size(dim) / size();
  return t.Slice(dim, rows * member, rows * (member + 1));
}

std::vector<Tensor> Group::PiecesOf(const Tensor& t, int member, int dim) const {
  SliceOf(t, member, dim);  // checks the shape
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < dim; ++d) outer *= t.size(d);
  for (int d = dim + 1; d < t.dim(); ++d) inner *= t.size(d);
  const int64_t rows = t.size(dim) / size();
  const Tensor blocks = t.View({outer, t.size(dim), inner});
  std::vector<Tensor> pieces;
  for (int64_t o = 0; o < outer; ++o) {
    pieces.push_back(blocks.Slice(0, o, o + 1)
                         .View({t.size(dim), inner})
                         .Slice(0, rows * member, rows * (member + 1)));
  }
  return pieces;
}

void Group::AllGather(Tensor& whole, CommTimeout timeout, int dim) {
  const std::vector<Tensor> mine = PiecesOf(whole, rank_, dim);
  // Receives first (a send may complete only once its receive is posted), then sends.
  std::vector<std::unique_ptr<Work>> works;
  for (int j = 0; j < size(); ++j) {
    if (j == rank_) continue;
    for (Tensor& theirs : PiecesOf(whole, j, dim)) works.push_back(Irecv(theirs, j));
  }
  for (int j = 0; j < size(); ++j) {
    if (j == rank_) continue;
    for (const Tensor& piece : mine) works.push_back(Isend(piece, j));
  }
  WaitAll(works, timeout);
}

void Group::ReduceScatterSum(Tensor& whole, CommTimeout timeout, int dim) {
  SliceOf(whole, rank_, dim);  // checks the shape
  // The all-reduce's rank-order sum gives every slice its bits; a transport's own reduce-scatter
  // may replace this where it sums in the same order.
  AllReduceSum(whole, timeout);
}

void Group::AllToAll(const Tensor& send, Tensor& recv, CommTimeout timeout) {
  BATON_CHECK(send.shape() == recv.shape() && send.dtype() == recv.dtype(),
              "all-to-all needs send and receive tensors alike, got {} and {}", send.ToString(),
              recv.ToString());
  BATON_CHECK(send.device().is_cpu() && recv.device().is_cpu(),
              "all-to-all copies its own slice in host memory: {} and {}", send.ToString(),
              recv.ToString());
  std::vector<std::unique_ptr<Work>> works;
  for (int j = 0; j < size(); ++j) {
    if (j == rank_) continue;
    Tensor from_j = SliceOf(recv, j);
    works.push_back(Irecv(from_j, j));
  }
  for (int j = 0; j < size(); ++j) {
    if (j != rank_) works.push_back(Isend(SliceOf(send, j), j));
  }
  const Tensor own_in = SliceOf(send, rank_);
  const Tensor own_out = SliceOf(recv, rank_);
  std::memcpy(own_out.raw(), own_in.raw(), own_in.nbytes());
  WaitAll(works, timeout);
}

}  // namespace baton
