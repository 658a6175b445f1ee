#include "worker/expert_zero_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "core/error.h"
#include "kernels/quantize.h"

namespace baton {
namespace {

constexpr const char* kHolders = "the replicas holding the same experts";

}  // namespace

ExpertZeroSync::ExpertZeroSync(std::unique_ptr<ZeroSync> rest, std::vector<Param*> experts,
                               ReplicaContext expert_data, bool quantized_state)
    : rest_(std::move(rest)),
      experts_(std::move(experts)),
      apart_(experts_.begin(), experts_.end()),
      expert_data_(std::move(expert_data)),
      quantized_state_(quantized_state) {
  for (const Param* p : experts_) {
    BATON_CHECK(p->stacked_experts && p->split.cut() && p->grad.dtype() == DType::kF32,
                "{}: ZeRO shards apart only experts split over an expert group, with f32 "
                "gradients",
                p->name);
  }
}

int ExpertZeroSync::members() const {
  return expert_data_.replicas == nullptr ? 1 : expert_data_.num_replicas();
}

int ExpertZeroSync::member() const {
  return expert_data_.replicas == nullptr ? 0 : expert_data_.replica();
}

std::pair<int64_t, int64_t> ExpertZeroSync::RunOf(const Param& p, int member) const {
  const int64_t n = p.value.numel(), d = members();
  int64_t s = (n + d - 1) / d;
  if (quantized_state_ && QuantizedState(p)) s = (s + kQuantBlock - 1) / kQuantBlock * kQuantBlock;
  return {std::min(n, member * s), std::min(n, (member + 1) * s)};
}

std::optional<OptimizerShard> ExpertZeroSync::optimizer_shard() const {
  std::optional<OptimizerShard> shard = rest_->optimizer_shard();
  for (const Param* p : experts_) shard->apart[p] = RunOf(*p, member());
  return shard;
}

std::vector<Tensor> ExpertZeroSync::ReducedGradient(Param& p) const {
  if (apart_.count(&p) == 1) return {p.grad};
  return rest_->ReducedGradient(p);
}

void ExpertZeroSync::AfterUpdate(int64_t step) {
  rest_->AfterUpdate(step);
  if (members() == 1) return;
  Backend& backend = *expert_data_.backend;
  const int d = members(), me = member();
  for (Param* p : experts_) {
    // Each member's run in its row of a D x S buffer (the last row's tail unused).
    const int64_t s = RunOf(*p, 0).second;
    Tensor rows = Tensor::Empty(backend.allocator(), {d, s}, p->value.dtype(), MemCategory::kComm);
    const auto [lo, hi] = RunOf(*p, me);
    if (lo < hi) {
      Tensor mine = rows.Slice(0, me, me + 1).View({-1}).Slice(0, 0, hi - lo);
      backend.Copy(FlatSlice(p->value, lo, hi), mine);
    }
    expert_data_.Report("ALLGATHER", expert_data_.another_replica(), rows.nbytes());
    try {
      expert_data_.replicas->AllGather(rows, expert_data_.timeout);
    } catch (const Error& e) {
      BATON_FAIL(
          "step {}: {}'s all-gather of stage {} with {} failed; a replica of stage {} is "
          "dead or hung: {}",
          step, p->name, expert_data_.stage, kHolders, expert_data_.stage, e.what());
    }
    for (int j = 0; j < d; ++j) {
      const auto [first, end] = RunOf(*p, j);
      if (j == me || first >= end) continue;
      Tensor value = FlatSlice(p->value, first, end);
      backend.Copy(rows.Slice(0, j, j + 1).View({-1}).Slice(0, 0, end - first), value);
    }
  }
  expert_data_.Report("idle", -1);
}

std::optional<LayerTensors> ExpertZeroSync::GatherLayerState(LayerTensors layer,
                                                             const Optimizer& optimizer) {
  const auto expert_of = [&](const ParamTensors& t) -> const Param* {
    for (const Param* p : experts_) {
      if (p->value.storage() == t.value.storage()) return p;
    }
    return nullptr;
  };
  LayerTensors rest = layer;
  rest.params.clear();
  for (const ParamTensors& t : layer.params) {
    if (expert_of(t) == nullptr) rest.params.push_back(t);
  }
  std::optional<LayerTensors> gathered = rest_->GatherLayerState(rest, optimizer);
  Backend& backend = *expert_data_.backend;
  const int me = member();
  const bool holder = me == 0;
  std::vector<std::unique_ptr<Work>> works;
  std::vector<Tensor> keep;  // views in flight
  for (ParamTensors& t : layer.params) {
    const Param* p = expert_of(t);
    if (p == nullptr) continue;
    const Optimizer::Slot* own = nullptr;
    for (const Optimizer::Slot& slot : optimizer.slots()) {
      if (slot.param == p) own = &slot;
    }
    if (members() == 1) {  // this member's slot holds its experts' whole state: as it is
      BATON_CHECK(own != nullptr && own->whole(), "{}: no whole slot of its state", p->name);
      t.master = own->master;
      t.adam_m = own->m;
      t.adam_v = own->v;
      t.adam_m_absmax = own->m_absmax;
      t.adam_v_absmax = own->v_absmax;
      continue;
    }
    // 8-bit moments: codes, and a maximum per block (a run holds whole blocks).
    const bool quantized = quantized_state_ && QuantizedState(*p);
    if (holder) AllocateWholeState(t, backend.allocator(), quantized);
    for (int j = 0; j < members(); ++j) {
      const auto [lo, hi] = RunOf(*p, j);
      if (lo >= hi) continue;
      MoveStateRun(backend, expert_data_.replicas, t, own, {lo, hi, j, 0, quantized}, keep, works);
    }
  }
  expert_data_.Wait(
      works,
      fmt::format("gathering layer {}'s experts' optimizer state for a checkpoint", layer.index),
      kHolders);
  if (!holder) return std::nullopt;
  if (!gathered) return layer;  // a member of expert group 0 other than replica 0
  // Replica 0: the rest's gathered state and the experts', in the layer's order.
  for (ParamTensors& t : layer.params) {
    if (expert_of(t) != nullptr) continue;
    for (const ParamTensors& g : gathered->params) {
      if (g.value.storage() == t.value.storage() && g.name == t.name) t = g;
    }
  }
  return layer;
}

}  // namespace baton
