// Expert parallelism (model/expert_parallel.h, model/moe_sublayer.cc) over threads: each member
// of an expert group computes, bit for bit, what replicas holding every expert compute (outputs,
// input gradients, every parameter gradient, the experts' summed in replica order), with
// selective recompute and the zero-bubble split; each member holds its share of the draws; the
// fold of the sources; uneven splits refused.
#include "model/expert_parallel.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "model/graph.h"
#include "model/moe_test_util.h"
#include "model/test_util.h"

namespace baton {
namespace {

using model_test::Bits;
using model_test::CpuFixture;
using namespace moe_test;  // NOLINT(build/namespaces): the MoE fixtures

// Messages between threads, one FIFO per (from, to); a member that fails wakes the others, whose
// waits then fail too (no test hangs on a dead member).
class Mailbox {
 public:
  void Post(int from, int to, std::string bytes) {
    std::lock_guard lock(mutex_);
    queues_[{from, to}].push_back(std::move(bytes));
    ready_.notify_all();
  }
  std::string Take(int from, int to) {
    std::unique_lock lock(mutex_);
    std::deque<std::string>& q = queues_[{from, to}];
    ready_.wait(lock, [&] { return failed_ || !q.empty(); });
    BATON_CHECK(!failed_, "another member failed");
    std::string bytes = std::move(q.front());
    q.pop_front();
    return bytes;
  }
  void Fail() {
    std::lock_guard lock(mutex_);
    failed_ = true;
    ready_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::map<std::pair<int, int>, std::deque<std::string>> queues_;
  bool failed_ = false;
};

// An expert group of threads (host tensors); counts how many all-to-alls it ran.
class ThreadExpertGroup final : public ExpertGroup {
 public:
  ThreadExpertGroup(Mailbox& mailbox, int rank, int size)
      : mailbox_(mailbox), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void AllToAll(const std::vector<Tensor>& to, const std::vector<Tensor>& from) override {
    ++calls;
    for (int j = 0; j < size_; ++j) {
      if (j != rank_) mailbox_.Post(rank_, j, Bits(to[static_cast<size_t>(j)]));
    }
    for (int j = 0; j < size_; ++j) {
      const std::string bytes =
          j == rank_ ? Bits(to[static_cast<size_t>(j)]) : mailbox_.Take(j, rank_);
      const Tensor& into = from[static_cast<size_t>(j)];
      BATON_CHECK(bytes.size() == into.nbytes(), "member {} sent {} bytes for {}", j, bytes.size(),
                  into.ToString());
      if (!bytes.empty()) std::memcpy(into.raw(), bytes.data(), bytes.size());
    }
  }
  int calls = 0;

 private:
  Mailbox& mailbox_;
  int rank_, size_;
};

// One replica's micro-batches: inputs x and output gradients dy, (B, S, C) f32 each.
struct ReplicaData {
  std::vector<std::vector<float>> x, dy;
};

constexpr int kMicroBatches = 2;

std::vector<ReplicaData> MakeReplicaData(const ModelDims& dims, int replicas) {
  Rng rng(23);
  const size_t n = static_cast<size_t>(kBatch * kSeq * dims.width);
  std::vector<ReplicaData> out(static_cast<size_t>(replicas));
  for (ReplicaData& r : out) {
    for (int m = 0; m < kMicroBatches; ++m) {
      for (auto* v : {&r.x, &r.dy}) {
        std::vector<float>& values = v->emplace_back(n);
        for (float& f : values) f = static_cast<float>(rng.NextNormal());
      }
    }
  }
  return out;
}

// How a member runs its micro-batches' backward: whole, or split as zero-bubble schedules do.
enum class BackwardKind { kPlain, kSplit };

// What a member (or a replica holding every expert) computed: each micro-batch's y and dx, then
// every parameter's gradient, as bytes.
struct MemberResult {
  std::vector<std::string> outputs;
  std::map<std::string, std::string> grads;
};

// Runs `data`'s micro-batches through `layer` (every forward, then every backward: GPipe's
// order) and returns what it computed; with `group`, folds the experts' sources first.
MemberResult RunMember(Backend& backend, Layer& layer, const ModelDims& dims,
                       const ReplicaData& data, BackwardKind kind) {
  model_test::ZeroGrads(backend, layer);
  MemberResult result;
  std::vector<Stash> stashes(kMicroBatches);
  std::vector<std::vector<float>> x = data.x, dy = data.dy;
  const Shape shape{kBatch, kSeq, dims.width};
  const MicroBatch batch;
  for (int m = 0; m < kMicroBatches; ++m) {
    const Tensor in = Tensor::Wrap(x[static_cast<size_t>(m)].data(), shape, DType::kF32);
    result.outputs.push_back(Bits(layer.Forward(in, batch, stashes[static_cast<size_t>(m)])));
  }
  const BackwardArgs args{0.5f};
  for (int m = 0; m < kMicroBatches; ++m) {
    const Tensor d = Tensor::Wrap(dy[static_cast<size_t>(m)].data(), shape, DType::kF32);
    Stash& stash = stashes[static_cast<size_t>(m)];
    if (kind == BackwardKind::kSplit) {
      result.outputs.push_back(Bits(layer.BackwardInput(d, batch, stash, args)));
      layer.BackwardWeight(stash);
    } else {
      result.outputs.push_back(Bits(layer.Backward(d, batch, stash, args)));
    }
  }
  FoldExpertGradSources(backend, layer.expert_grad_sources());
  for (Param* p : layer.params()) result.grads[p->name] = Bits(p->grad);
  return result;
}

bool IsExpertParam(const std::string& name) { return name.find(".experts.") != std::string::npos; }

// Rows [first, first + count) along dimension 0 of a stacked (E, a, b) tensor's bytes.
std::string ExpertRows(const std::string& bytes, int64_t experts, int64_t first, int64_t count) {
  const size_t row = bytes.size() / static_cast<size_t>(experts);
  return bytes.substr(static_cast<size_t>(first) * row, static_cast<size_t>(count) * row);
}

// f32 sums of equal-sized byte strings of floats, left to right: the replicas' all-reduce.
std::string SumInReplicaOrder(const std::vector<std::string>& parts) {
  std::vector<float> sum(parts.front().size() / sizeof(float));
  std::memcpy(sum.data(), parts.front().data(), parts.front().size());
  for (size_t r = 1; r < parts.size(); ++r) {
    const auto* add = reinterpret_cast<const float*>(parts[r].data());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += add[i];
  }
  return std::string(reinterpret_cast<const char*>(sum.data()), parts.front().size());
}

// E members, each a replica with its own micro-batches, against E replicas holding every expert:
// each member's outputs and dx, its non-expert gradients (its own replica's), and its experts'
// gradients (the replicas' sum in replica order) bit for bit, and the parameters each holds.
void CheckExpertParallel(const ModelDims& dims, LayerKind kind, int members, bool selective,
                         BackwardKind backward) {
  const std::string what = fmt::format("{} E={} selective={} split={}", ToString(dims), members,
                                       selective, backward == BackwardKind::kSplit);
  const std::vector<ReplicaData> data = MakeReplicaData(dims, members);
  // The replicas, one after another on one layer holding every expert.
  MoeCase whole(kind, dims);
  whole.layer->set_selective_recompute(selective);
  std::vector<MemberResult> replicas;
  for (const ReplicaData& d : data) {
    replicas.push_back(RunMember(*whole.fx.backend, *whole.layer, dims, d, backward));
  }
  std::map<std::string, std::vector<float>> values;
  for (Param* p : whole.layer->params()) {
    values[p->name].assign(p->value.data<float>(), p->value.data<float>() + p->value.numel());
  }
  const std::vector<float> bias = whole.Bias();
  // The members, a thread each.
  const int64_t n = dims.moe.num_experts, local = n / members;
  Mailbox mailbox;
  std::vector<MemberResult> results(static_cast<size_t>(members));
  std::vector<int> calls(static_cast<size_t>(members));
  std::vector<std::string> errors(static_cast<size_t>(members));
  std::vector<std::thread> threads;
  for (int j = 0; j < members; ++j) {
    threads.emplace_back([&, j] {
      try {
        CpuFixture fx;
        ThreadExpertGroup group(mailbox, j, members);
        std::unique_ptr<Layer> layer =
            BuildLayer(SpecOf(kind, dims), dims, *fx.backend, DType::kF32, DType::kF32, 4321,
                       nullptr, nullptr, &group);
        layer->set_selective_recompute(selective);
        for (Param* p : layer->params()) {
          const std::vector<float>& v = values.at(p->name);
          const int64_t first = IsExpertParam(p->name) ? j * p->value.numel() : 0;
          ASSERT_EQ(p->value.numel(), IsExpertParam(p->name)
                                          ? static_cast<int64_t>(v.size()) / members
                                          : static_cast<int64_t>(v.size()))
              << p->name;
          std::memcpy(p->value.data<float>(), v.data() + first, p->value.nbytes());
        }
        if (!bias.empty()) {
          Tensor b = layer->routing_bias().values;
          std::memcpy(b.data<float>(), bias.data(), b.nbytes());
        }
        results[static_cast<size_t>(j)] =
            RunMember(*fx.backend, *layer, dims, data[static_cast<size_t>(j)], backward);
        calls[static_cast<size_t>(j)] = group.calls;
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(j)] = e.what();
        mailbox.Fail();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int j = 0; j < members; ++j) {
    ASSERT_EQ(errors[static_cast<size_t>(j)], "") << what << " member " << j;
    const MemberResult& got = results[static_cast<size_t>(j)];
    const MemberResult& want = replicas[static_cast<size_t>(j)];
    EXPECT_TRUE(got.outputs == want.outputs) << what << " member " << j << ": y and dx differ";
    // Forward and backward each: the counts, then the rows there and their results (gradients)
    // back. Selective recompute moves the rows and results again in the backward.
    EXPECT_EQ(calls[static_cast<size_t>(j)], kMicroBatches * (6 + (selective ? 2 : 0))) << what;
    for (const auto& [name, bytes] : got.grads) {
      if (!IsExpertParam(name)) {
        EXPECT_TRUE(bytes == want.grads.at(name)) << what << " member " << j << " " << name;
        continue;
      }
      std::vector<std::string> per_replica;
      for (const MemberResult& r : replicas) {
        per_replica.push_back(ExpertRows(r.grads.at(name), n, j * local, local));
      }
      EXPECT_TRUE(bytes == SumInReplicaOrder(per_replica))
          << what << " member " << j << " " << name << " is not the replicas' sum";
    }
  }
}

TEST(MoeExpertParallelTest, MembersComputeTheBitsOfReplicasHoldingEveryExpert) {
  for (const ModelDims& dims : Variants()) {
    for (const int members : {2, 4}) {
      CheckExpertParallel(dims, LayerKind::kMlpBlock, members, false, BackwardKind::kPlain);
    }
  }
}

TEST(MoeExpertParallelTest, SelectiveRecomputeAndTheZeroBubbleSplitMoveTheSameRows) {
  ModelDims dims = MoeModel();
  dims.moe.aux_loss_coef = 0.01;
  CheckExpertParallel(dims, LayerKind::kBlock, 2, true, BackwardKind::kPlain);
  CheckExpertParallel(dims, LayerKind::kBlock, 2, false, BackwardKind::kSplit);
  CheckExpertParallel(dims, LayerKind::kBlock, 4, true, BackwardKind::kSplit);
}

TEST(MoeExpertParallelTest, EachMemberHoldsItsExpertsAndFoldsTheSourcesInOrder) {
  const ModelDims dims = MoeModel(false);
  Mailbox mailbox;
  CpuFixture fx;
  ThreadExpertGroup group(mailbox, 1, 2);
  std::unique_ptr<Layer> layer =
      BuildLayer(SpecOf(LayerKind::kMlpBlock, dims), dims, *fx.backend, DType::kF32, DType::kF32,
                 4321, nullptr, nullptr, &group);
  const std::vector<ExpertGradSources> sources = layer->expert_grad_sources();
  ASSERT_EQ(sources.size(), 2u);
  for (const ExpertGradSources& s : sources) {
    EXPECT_TRUE(IsExpertParam(s.param->name)) << s.param->name;
    EXPECT_EQ(s.param->value.size(0), 2) << s.param->name;  // experts 2 and 3 of 4
    EXPECT_EQ(s.param->split.over, SplitOver::kExperts);
    EXPECT_EQ(s.param->split.part, 1);
    EXPECT_EQ(s.others.size(0), 1);  // source 1's accumulator
  }
  // The second half of the whole layer's draws.
  CpuFixture fresh;
  std::unique_ptr<Layer> all = BuildLayer(SpecOf(LayerKind::kMlpBlock, dims), dims, *fresh.backend,
                                          DType::kF32, DType::kF32, 4321);
  for (size_t i = 0; i < all->params().size(); ++i) {
    const Param& mine = *layer->params()[i];
    const std::string bytes = Bits(all->params()[i]->value);
    EXPECT_EQ(Bits(mine.value), IsExpertParam(mine.name) ? ExpertRows(bytes, 4, 2, 2) : bytes)
        << mine.name;
  }
  // The fold: grad + source 1's, left to right in f32; the accumulator zeroed.
  Tensor& grad = sources[0].param->grad;
  Tensor others = sources[0].others;
  for (int64_t i = 0; i < grad.numel(); ++i) {
    grad.data<float>()[i] = 1.0f + static_cast<float>(i) * 1e-8f;
    others.data<float>()[i] = 1e-8f;
  }
  FoldExpertGradSources(*fx.backend, {sources[0]});
  for (int64_t i = 0; i < grad.numel(); ++i) {
    const float want = (1.0f + static_cast<float>(i) * 1e-8f) + 1e-8f;
    ASSERT_EQ(grad.data<float>()[i], want) << i;
    ASSERT_EQ(others.data<float>()[i], 0.0f) << i;
  }
  // Experts that do not split evenly are refused, naming the numbers.
  ThreadExpertGroup three(mailbox, 0, 3);
  try {
    BuildLayer(SpecOf(LayerKind::kMlpBlock, dims), dims, *fx.backend, DType::kF32, DType::kF32,
               4321, nullptr, nullptr, &three);
    FAIL() << "4 experts over 3 members were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 experts do not split evenly over an expert group of 3"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace baton
