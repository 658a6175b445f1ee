// The stage's tensor-parallel group (model/tensor_parallel.h) over the job's communicator: the
// worker's side of what the layers call.
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "model/tensor_parallel.h"

namespace baton {

class CommTensorGroup final : public TensorGroup {
 public:
  // `group`: the world ranks of the stage's tensor ranks, tensor order (Plan::TensorParallelGroup);
  // `rank`: this rank's place in it. Every sum waits at most `timeout` (Timeouts::wait).
  CommTensorGroup(Communicator& comm, std::vector<int> group, int rank, bool sequence_parallel,
                  std::chrono::milliseconds timeout)
      : comm_(comm),
        group_(std::move(group)),
        rank_(rank),
        sequence_parallel_(sequence_parallel),
        timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(group_.size()); }
  bool sequence_parallel() const override { return sequence_parallel_; }
  // The communicator's group sum: in rank order, the same bits on every member.
  void AllReduceSum(Tensor& t) override {
    const auto start = std::chrono::steady_clock::now();
    comm_.AllReduceSum(t, group_, timeout_);
    traffic_.bytes += static_cast<int64_t>(t.nbytes());
    traffic_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // What the sums moved since the last call: the bytes of the tensors summed (each sum's
  // input; a transport moves about that much per member) and the seconds they took.
  struct Traffic {
    int64_t bytes = 0;
    double seconds = 0;
  };
  Traffic TakeTraffic() { return std::exchange(traffic_, Traffic()); }

 private:
  Communicator& comm_;
  std::vector<int> group_;
  int rank_;
  bool sequence_parallel_;
  std::chrono::milliseconds timeout_;
  Traffic traffic_;
};

}  // namespace baton
