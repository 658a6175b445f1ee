// The in-process communicator for unit tests (see fake_communicator.h).
#include "comm/fake_communicator.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>

#include "comm/host_sum.h"
#include "core/error.h"
#include "core/units.h"

namespace baton {
namespace {

struct FakeOp {
  Tensor tensor;  // dropped on completion, so the caller alone decides when memory goes
  std::string tensor_text;
  bool is_send = false;
  int src = 0;
  int dst = 0;
  uint64_t index = 0;  // message number on the link src -> dst
  bool done = false;
  std::string error;

  std::string Describe() const { return DescribeMessage(is_send, tensor_text, src, dst, index); }
};

struct FakeLink {
  std::deque<std::shared_ptr<FakeOp>> sends;  // posted, not yet matched
  std::deque<std::shared_ptr<FakeOp>> recvs;
  uint64_t posted_sends = 0;
  uint64_t posted_recvs = 0;
};

struct FakeCollective {
  std::string what;  // "all-reduce" or "barrier"
  std::vector<Tensor> tensors;
  std::vector<bool> present;  // per member
  int arrived = 0;
  bool done = false;
  std::string error;
};

}  // namespace

struct FakeHub::State {
  explicit State(int n) : size(n), links(n * n), collective_count(n), abort_reason(n) {}

  const int size;
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<FakeLink> links;  // [src * size + dst]
  std::map<std::pair<std::vector<int>, uint64_t>, std::shared_ptr<FakeCollective>> collectives;
  std::vector<std::map<std::vector<int>, uint64_t>> collective_count;  // [rank][group]
  std::vector<std::string> abort_reason;                               // [rank]; empty: running

  FakeLink& Link(int src, int dst) { return links[src * size + dst]; }

  // Pairs the oldest posted send with the oldest posted receive, while both exist.
  void MatchLocked(FakeLink& link) {
    while (!link.sends.empty() && !link.recvs.empty()) {
      std::shared_ptr<FakeOp> send = link.sends.front();
      std::shared_ptr<FakeOp> recv = link.recvs.front();
      link.sends.pop_front();
      link.recvs.pop_front();
      if (send->tensor.dtype() != recv->tensor.dtype() ||
          send->tensor.nbytes() != recv->tensor.nbytes()) {
        std::string error = fmt::format(
            "message #{} on link {} -> {}: rank {} sent {} but rank {} receives {}", send->index,
            send->src, send->dst, send->src, send->tensor_text, recv->dst, recv->tensor_text);
        send->error = error;
        recv->error = error;
      } else {
        std::memcpy(recv->tensor.raw(), send->tensor.raw(), send->tensor.nbytes());
      }
      for (FakeOp* op : {send.get(), recv.get()}) {
        op->done = true;
        op->tensor = Tensor();
      }
      changed.notify_all();
    }
  }

  void CheckNotAbortedLocked(int rank) const {
    if (!abort_reason[rank].empty()) BATON_FAIL("communicator aborted: {}", abort_reason[rank]);
  }
};

namespace {

class FakeWork final : public Work {
 public:
  FakeWork(std::shared_ptr<FakeHub::State> state, std::shared_ptr<FakeOp> op, int rank)
      : state_(std::move(state)), op_(std::move(op)), rank_(rank) {}

  void Wait(CommTimeout timeout) override {
    std::unique_lock lock(state_->mutex);
    state_->changed.wait_for(lock, timeout,
                             [&] { return op_->done || !state_->abort_reason[rank_].empty(); });
    if (op_->done) {
      if (!op_->error.empty()) BATON_FAIL("{}", op_->error);
      return;
    }
    if (!state_->abort_reason[rank_].empty()) {
      BATON_FAIL("{} aborted: {}", op_->Describe(), state_->abort_reason[rank_]);
    }
    const FakeLink& link = state_->Link(op_->src, op_->dst);
    if (op_->is_send) {
      BATON_FAIL(
          "timed out after {:.1f} s waiting for rank {} to take the {}; it has posted {} "
          "receives on this link",
          Seconds(timeout), op_->dst, op_->Describe(), link.posted_recvs);
    }
    BATON_FAIL(
        "timed out after {:.1f} s waiting for the {}; rank {} has posted {} sends on this "
        "link",
        Seconds(timeout), op_->Describe(), op_->src, link.posted_sends);
  }

  bool Test() override {
    std::lock_guard lock(state_->mutex);
    if (op_->done && !op_->error.empty()) BATON_FAIL("{}", op_->error);
    return op_->done;
  }

 private:
  std::shared_ptr<FakeHub::State> state_;
  std::shared_ptr<FakeOp> op_;
  int rank_;
};

class FakeCommunicator final : public Communicator {
 public:
  FakeCommunicator(std::shared_ptr<FakeHub::State> state, int rank)
      : state_(std::move(state)), rank_(rank) {}
  // This rank's unmatched messages go with it: their tensors' memory belongs to its backend, which
  // may go next (an engine that failed mid-step leaves a send posted), while the hub lives on.
  ~FakeCommunicator() override {
    std::lock_guard lock(state_->mutex);
    for (int peer = 0; peer < state_->size; ++peer) {
      for (auto* ops : {&state_->Link(rank_, peer).sends, &state_->Link(peer, rank_).recvs}) {
        for (const std::shared_ptr<FakeOp>& op : *ops) {
          op->done = true;
          op->error = fmt::format("rank {} left with {} unmatched", rank_, op->Describe());
          op->tensor = Tensor();
        }
        ops->clear();
      }
    }
    state_->changed.notify_all();
  }

  int rank() const override { return rank_; }
  int size() const override { return state_->size; }

  std::unique_ptr<Work> Isend(const Tensor& tensor, int peer) override {
    return Post(tensor, peer, /*is_send=*/true);
  }
  std::unique_ptr<Work> Irecv(Tensor& tensor, int peer) override {
    return Post(tensor, peer, /*is_send=*/false);
  }

  void AllReduceSum(Tensor& tensor, CommTimeout timeout) override {
    std::vector<int> all(size());
    for (int r = 0; r < size(); ++r) all[r] = r;
    Collective(&tensor, all, timeout, "all-reduce");
  }
  void AllReduceSum(Tensor& tensor, const std::vector<int>& group, CommTimeout timeout) override {
    Collective(&tensor, CheckedGroup(group, rank_, size()), timeout, "all-reduce");
  }
  void Barrier(CommTimeout timeout) override {
    std::vector<int> all(size());
    for (int r = 0; r < size(); ++r) all[r] = r;
    Collective(nullptr, all, timeout, "barrier");
  }

  void Abort(const std::string& reason) override {
    std::lock_guard lock(state_->mutex);
    if (state_->abort_reason[rank_].empty()) state_->abort_reason[rank_] = reason;
    state_->changed.notify_all();
  }

 private:
  std::unique_ptr<Work> Post(const Tensor& tensor, int peer, bool is_send) {
    CheckPeer(peer, rank_, size());
    CheckTransferable(tensor, is_send ? "Isend" : "Irecv");
    BATON_CHECK(tensor.device().is_cpu(), "FakeCommunicator moves host tensors only, got {}",
                tensor.ToString());
    auto op = std::make_shared<FakeOp>();
    op->tensor = tensor;
    op->tensor_text = tensor.ToString();
    op->is_send = is_send;
    op->src = is_send ? rank_ : peer;
    op->dst = is_send ? peer : rank_;
    std::lock_guard lock(state_->mutex);
    state_->CheckNotAbortedLocked(rank_);
    FakeLink& link = state_->Link(op->src, op->dst);
    op->index = is_send ? link.posted_sends++ : link.posted_recvs++;
    (is_send ? link.sends : link.recvs).push_back(op);
    state_->MatchLocked(link);
    return std::make_unique<FakeWork>(state_, op, rank_);
  }

  // Joins collective number k over `group`; the last member to arrive sums for everybody.
  void Collective(Tensor* tensor, const std::vector<int>& group, CommTimeout timeout,
                  const std::string& what) {
    if (tensor) CheckTransferable(*tensor, "AllReduceSum");
    std::unique_lock lock(state_->mutex);
    state_->CheckNotAbortedLocked(rank_);
    const uint64_t index = state_->collective_count[rank_][group]++;
    std::shared_ptr<FakeCollective>& slot = state_->collectives[{group, index}];
    if (!slot) {
      slot = std::make_shared<FakeCollective>();
      slot->what = what;
      slot->tensors.resize(group.size());
      slot->present.resize(group.size());
    }
    std::shared_ptr<FakeCollective> op = slot;
    const size_t position = std::find(group.begin(), group.end(), rank_) - group.begin();
    if (op->what != what && op->error.empty()) {
      op->error = fmt::format("collective #{} over {}: rank {} called {} but others called {}",
                              index, DescribeGroup(group), rank_, what, op->what);
    }
    if (tensor) op->tensors[position] = *tensor;
    op->present[position] = true;
    if (++op->arrived == static_cast<int>(group.size())) {
      Finish(*op, group, index);
      state_->collectives.erase({group, index});
    }
    bool finished = state_->changed.wait_for(
        lock, timeout, [&] { return op->done || !state_->abort_reason[rank_].empty(); });
    if (op->done && !op->error.empty()) BATON_FAIL("{}", op->error);
    if (op->done) return;
    if (!finished) {
      std::vector<int> missing;
      for (size_t i = 0; i < group.size(); ++i) {
        if (!op->present[i]) missing.push_back(group[i]);
      }
      BATON_FAIL("{} #{} over {} timed out after {:.1f} s ({} of {} arrived{})", what, index,
                 DescribeGroup(group), Seconds(timeout), op->arrived, group.size(),
                 missing.empty() ? "" : "; missing " + DescribeGroup(missing));
    }
    BATON_FAIL("{} over {} aborted: {}", what, DescribeGroup(group), state_->abort_reason[rank_]);
  }

  void Finish(FakeCollective& op, const std::vector<int>& group, uint64_t index) {
    if (op.error.empty() && op.what == "all-reduce") {
      for (const Tensor& t : op.tensors) {
        if (t.dtype() != op.tensors[0].dtype() || t.numel() != op.tensors[0].numel()) {
          op.error = fmt::format("all-reduce #{} over {}: members passed {} and {}", index,
                                 DescribeGroup(group), op.tensors[0].ToString(), t.ToString());
        }
      }
      try {
        if (op.error.empty()) SumInOrder(op.tensors);
      } catch (const Error& e) {
        op.error = e.what();
      }
    }
    op.tensors.assign(op.tensors.size(), Tensor());
    op.done = true;
    state_->changed.notify_all();
  }

  std::shared_ptr<FakeHub::State> state_;
  const int rank_;
};

}  // namespace

FakeHub::FakeHub(int size) {
  BATON_CHECK(size > 0, "a FakeHub needs at least one rank, got {}", size);
  state_ = std::make_shared<State>(size);
}

int FakeHub::size() const { return state_->size; }

std::unique_ptr<Communicator> FakeHub::Make(int rank) {
  BATON_CHECK(rank >= 0 && rank < state_->size, "rank {} is outside the hub's {} ranks", rank,
              state_->size);
  return std::make_unique<FakeCommunicator>(state_, rank);
}

void FakeHub::Abort(const std::string& reason) {
  std::lock_guard lock(state_->mutex);
  for (std::string& r : state_->abort_reason) {
    if (r.empty()) r = reason;
  }
  state_->changed.notify_all();
}

}  // namespace baton
