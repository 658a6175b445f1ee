#include "comm/subgroup_communicator.h"

#include <algorithm>

#include "core/error.h"

namespace baton {

SubgroupCommunicator::SubgroupCommunicator(Communicator& world, std::vector<int> members)
    : world_(world), members_(std::move(members)) {
  CheckedGroup(members_, world_.rank(), world_.size());  // distinct, in range, holds this rank
  rank_ = static_cast<int>(std::find(members_.begin(), members_.end(), world_.rank()) -
                           members_.begin());
}

int SubgroupCommunicator::WorldRank(int rank) const {
  BATON_CHECK(0 <= rank && rank < size(), "rank {} is outside a group of {} ranks ({})", rank,
              size(), DescribeGroup(members_));
  return members_[static_cast<size_t>(rank)];
}

std::unique_ptr<Work> SubgroupCommunicator::Isend(const Tensor& tensor, int peer) {
  CheckPeer(peer, rank_, size());
  return world_.Isend(tensor, WorldRank(peer));
}

std::unique_ptr<Work> SubgroupCommunicator::Irecv(Tensor& tensor, int peer) {
  CheckPeer(peer, rank_, size());
  return world_.Irecv(tensor, WorldRank(peer));
}

void SubgroupCommunicator::AllReduceSum(Tensor& tensor, CommTimeout timeout) {
  world_.AllReduceSum(tensor, members_, timeout);
}

void SubgroupCommunicator::AllReduceSum(Tensor& tensor, const std::vector<int>& group,
                                        CommTimeout timeout) {
  std::vector<int> mapped;
  for (int member : CheckedGroup(group, rank_, size())) mapped.push_back(WorldRank(member));
  world_.AllReduceSum(tensor, mapped, timeout);
}

void SubgroupCommunicator::Barrier(CommTimeout timeout) {
  int32_t one = 1;
  Tensor token = Tensor::Wrap(&one, {1}, DType::kI32);
  world_.AllReduceSum(token, members_, timeout);
}

}  // namespace baton
