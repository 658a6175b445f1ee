// The stage's tensor-parallel group (model/tensor_parallel.h) over its comm/ Group: the worker's
// side of what the layers call.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
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
    Count(t, "TP_ALLREDUCE", [&] { group_.AllReduceSum(t, timeout_); });
  }
  // Slices moved point to point (Group::AllGather): the members are each other's peers
  // (Plan::Peers).
  void AllGather(Tensor& whole, int dim) override {
    Count(whole, "TP_ALLGATHER", [&] { group_.AllGather(whole, timeout_, dim); });
    ++traffic_.gathers;
  }
  void ReduceScatterSum(Tensor& whole, int dim) override {
    Count(whole, "TP_REDUCESCATTER", [&] { group_.ReduceScatterSum(whole, timeout_, dim); });
  }

  // What the collectives moved since the last call: how many (of them all-gathers), the bytes
  // of their whole tensors (a sum's input, a gather's output) and the seconds they took.
  struct Traffic {
    int64_t collectives = 0;
    int64_t gathers = 0;
    int64_t bytes = 0;
    double seconds = 0;
  };
  Traffic TakeTraffic() { return std::exchange(traffic_, Traffic()); }

  // Told before each collective, as a wait on the group: its name ("TP_ALLREDUCE",
  // "TP_ALLGATHER", "TP_REDUCESCATTER"), the world rank of the next member (the one waited on,
  // with two members) and the whole tensor's bytes; `end` after it. For the status and the flight
  // recorder (Trainer::set_status_callback); either may be empty.
  using BeginHook = std::function<void(const char* what, int peer_rank, int64_t bytes)>;
  void set_status_hooks(BeginHook begin, std::function<void()> end) {
    begin_ = std::move(begin);
    end_ = std::move(end);
  }

 private:
  template <typename Run>
  void Count(const Tensor& whole, const char* what, Run run) {
    const auto start = std::chrono::steady_clock::now();
    if (begin_) {
      begin_(what, group_.WorldRank((group_.rank() + 1) % group_.size()),
             static_cast<int64_t>(whole.nbytes()));
    }
    run();
    if (end_) end_();
    ++traffic_.collectives;
    traffic_.bytes += static_cast<int64_t>(whole.nbytes());
    traffic_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  Group& group_;
  bool sequence_parallel_;
  std::chrono::milliseconds timeout_;
  Traffic traffic_;
  BeginHook begin_;
  std::function<void()> end_;
};

}  // namespace baton
