// Checks shared by the communicators (see communicator.h).
#include "comm/communicator.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace baton {

void CheckPeer(int peer, int rank, int size) {
  BATON_CHECK(peer >= 0 && peer < size, "peer rank {} is outside the world of {} ranks", peer,
              size);
  BATON_CHECK(peer != rank, "rank {} cannot send to or receive from itself", rank);
}

void CheckTransferable(const Tensor& tensor, const char* what) {
  BATON_CHECK(tensor.defined(), "{} of an undefined tensor", what);
  BATON_CHECK(tensor.is_contiguous(), "{} needs a contiguous tensor, got {}", what,
              tensor.ToString());
}

std::vector<int> CheckedGroup(const std::vector<int>& group, int rank, int size) {
  std::vector<int> sorted = group;
  std::sort(sorted.begin(), sorted.end());
  BATON_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
              "group {} names a rank twice", DescribeGroup(group));
  for (int member : sorted) {
    BATON_CHECK(member >= 0 && member < size, "group member {} is outside the world of {} ranks",
                member, size);
  }
  BATON_CHECK(std::binary_search(sorted.begin(), sorted.end(), rank),
              "rank {} called a collective over {} without being a member", rank,
              DescribeGroup(group));
  return sorted;
}

std::string DescribeMessage(bool is_send, const std::string& tensor_text, int src, int dst,
                            uint64_t index) {
  return is_send ? fmt::format("send of {} to rank {} (message #{} on link {} -> {})", tensor_text,
                               dst, index, src, dst)
                 : fmt::format("receive of {} from rank {} (message #{} on link {} -> {})",
                               tensor_text, src, index, src, dst);
}

std::string DescribeGroup(const std::vector<int>& group) {
  return fmt::format("{} {}", group.size() == 1 ? "rank" : "ranks", fmt::join(group, ", "));
}

}  // namespace baton
