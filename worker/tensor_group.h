// The stage's tensor-parallel group (model/tensor_parallel.h) over its comm/ Group: the worker's
// side of what the layers call.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/group.h"
#include "model/tensor_parallel.h"

namespace baton {

class CommTensorGroup final : public TensorGroup {
 public:
  // `group`: the stage's tensor ranks, tensor order (it must outlive this). Every sum waits at
  // most `timeout` (Timeouts::wait).
  CommTensorGroup(Group& group, bool sequence_parallel, std::chrono::milliseconds timeout)
      : group_(group), sequence_parallel_(sequence_parallel), timeout_(timeout) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }
  bool sequence_parallel() const override { return sequence_parallel_; }
  // The group's sum: in rank order, the same bits on every member.
  void AllReduceSum(Tensor& t) override {
    const auto start = std::chrono::steady_clock::now();
    group_.AllReduceSum(t, timeout_);
    ++traffic_.sums;
    traffic_.bytes += static_cast<int64_t>(t.nbytes());
    traffic_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // What the sums moved since the last call: how many, the bytes of the tensors summed (each
  // sum's input; a transport moves about that much per member) and the seconds they took.
  struct Traffic {
    int64_t sums = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  Traffic TakeTraffic() { return std::exchange(traffic_, Traffic()); }

 private:
  Group& group_;
  bool sequence_parallel_;
  std::chrono::milliseconds timeout_;
  Traffic traffic_;
};

}  // namespace baton
