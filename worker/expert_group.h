// The stage's expert group (model/expert_parallel.h) over its comm/ Group: the worker's side of the
// all-to-alls the experts' sublayer calls (parallel.experts E > 1; docs/parallel.md, "Expert
// parallelism"). Point to point: a receive posted from and a send posted to every other member
// with rows for it, then every one waited for; the members are replicas of one stage, each other's
// peers (Plan::Peers).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/group.h"
#include "core/error.h"
#include "kernels/backend.h"
#include "model/expert_parallel.h"

namespace baton {

class CommExpertGroup final : public ExpertGroup {
 public:
  // `group`: the stage's expert group, in replica order, and `backend`, which copies the member's
  // own rows (both must outlive this); `stage` names failures. Every exchange waits at most
  // `timeout` (Timeouts::wait).
  CommExpertGroup(Group& group, Backend& backend, int stage, std::chrono::milliseconds timeout)
      : group_(group), backend_(backend), stage_(stage), timeout_(timeout) {}

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.size(); }

  void AllToAll(const std::vector<Tensor>& to, const std::vector<Tensor>& from) override {
    BATON_CHECK(static_cast<int>(to.size()) == size() && static_cast<int>(from.size()) == size(),
                "stage {}: an all-to-all over {} experts' members with {} and {} tensors", stage_,
                size(), to.size(), from.size());
    const auto start = std::chrono::steady_clock::now();
    int64_t bytes = 0;
    for (int j = 0; j < size(); ++j) {
      if (j != rank()) bytes += static_cast<int64_t>(to[static_cast<size_t>(j)].nbytes());
    }
    if (begin_) begin_(group_.WorldRank((rank() + 1) % size()), bytes);
    std::vector<std::unique_ptr<Work>> works;
    for (int j = 0; j < size(); ++j) {
      Tensor into = from[static_cast<size_t>(j)];
      if (j == rank() || into.numel() == 0) continue;
      works.push_back(group_.Irecv(into, j));
    }
    for (int j = 0; j < size(); ++j) {
      const Tensor& out = to[static_cast<size_t>(j)];
      if (j == rank() || out.numel() == 0) continue;
      works.push_back(group_.Isend(out, j));
    }
    const Tensor& own = to[static_cast<size_t>(rank())];
    Tensor mine = from[static_cast<size_t>(rank())];
    // The memory planner (meta tensors) moves nothing, and books every member as receiving the
    // worst routing (model/moe_sublayer.cc), more than was sent.
    if (own.numel() > 0 && !own.is_meta() && own.raw() != mine.raw()) backend_.Copy(own, mine);
    try {
      for (auto& work : works) work->Wait(timeout_);
    } catch (const Error& e) {
      BATON_FAIL(
          "{}the experts' all-to-all of stage {} with its expert group failed; a replica of stage "
          "{} is dead or hung: {}",
          where_ ? where_() + ": " : std::string(), stage_, stage_, e.what());
    }
    if (end_) end_();
    traffic_.bytes += bytes;
    traffic_.seconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  // What the all-to-alls moved since the last call: the bytes this member sent and the seconds
  // they took.
  struct Traffic {
    int64_t bytes = 0;
    double seconds = 0;
  };
  Traffic TakeTraffic() { return std::exchange(traffic_, Traffic()); }

  // Told before each all-to-all, as a wait on the group ("EP_ALLTOALL": the next member's world
  // rank and the bytes sent), and after it; for the status and the flight recorder. `where` says
  // what a failure happened in ("step 2, F of micro-batch 1").
  using BeginHook = std::function<void(int peer_rank, int64_t bytes)>;
  void set_status_hooks(BeginHook begin, std::function<void()> end,
                        std::function<std::string()> where) {
    begin_ = std::move(begin);
    end_ = std::move(end);
    where_ = std::move(where);
  }

 private:
  Group& group_;
  Backend& backend_;
  int stage_;
  std::chrono::milliseconds timeout_;
  Traffic traffic_;
  BeginHook begin_;
  std::function<void()> end_;
  std::function<std::string()> where_;
};

}  // namespace baton
