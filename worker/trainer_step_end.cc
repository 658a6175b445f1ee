// Trainer's step end (worker/trainer.h, steps 0-3): the passes Trainer::Step runs after the
// engine's program, in order, each a member of Trainer; Step itself and the rest of the loop are
// in trainer.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/init.h"
#include "model/prune.h"
#include "worker/pruning.h"
#include "worker/trainer.h"

namespace baton {

std::vector<Trainer::StepPass> Trainer::StepEndPasses() const {
  const bool prune = setup_.config.prune.enabled();
  std::vector<StepPass> passes;
  const auto add = [&](const char* name, bool exchange, bool replicas,
                       void (Trainer::*run)(StepState&)) {
    passes.push_back({name, exchange, replicas, run});
  };
  // Gradients each tensor rank holds a part of until summed: sequence parallelism's norms (each
  // rank's positions), Qwen3's q/k norms (each rank's heads).
  const std::vector<Param*>& params = model_->params();
  if (TensorSize(tensor_group_.get()) > 1 &&
      std::any_of(params.begin(), params.end(), [](Param* p) { return p->tensor_partial_grad; })) {
    add("tensor-partial sums", true, false, &Trainer::TensorPartialSumsPass);
  }
  if (expert_group_ != nullptr && optimizer_ != nullptr) {
    add("expert sums", expert_data_ranks_ != nullptr, true, &Trainer::ExpertSumsPass);
  }
  const char* reduce = sync_->reduce_pass();
  if (sync_->after_tied_sums()) {  // ZeRO: after it a replica holds only its shard's sums
    add("tied sums", true, false, &Trainer::TiedSumsPass);
    if (reduce != nullptr) add(reduce, true, true, &Trainer::ReducePass);
    // Masking commutes with the sums: the shard's sums masked are the masked gradients' sums.
    if (prune) add("mask gradients", false, false, &Trainer::MaskGradientsPass);
  } else {
    if (reduce != nullptr) add(reduce, true, true, &Trainer::ReducePass);
    if (prune) add("mask gradients", false, false, &Trainer::MaskGradientsPass);
    add("tied sums", true, false, &Trainer::TiedSumsPass);
  }
  add("step-end flags", true, false, &Trainer::StepEndFlagsPass);
  add("update", false, false, &Trainer::UpdatePass);
  // Before ZeRO's all-gather, which hands the other replicas the masked shard.
  if (prune) add("prune", false, false, &Trainer::PrunePass);
  if (const char* after = sync_->after_update_pass()) {
    add(after, true, true, &Trainer::AfterUpdatePass);
  }
  return passes;
}

void Trainer::ReducePass(StepState& state) { sync_->Reduce(state.step); }

void Trainer::ExpertSumsPass(StepState& state) {
  for (auto& [index, layer] : model_->layers()) {
    const std::vector<ExpertGradSources> sources = layer->expert_grad_sources();
    if (expert_data_ranks_ == nullptr) {  // every source is in this expert group
      FoldExpertGradSources(backend_, sources);
      continue;
    }
    // Slot g E + s: source s of expert group g (global replica order), gathered over the
    // expert-data-parallel replicas, then summed in slot order into the gradient.
    for (const ExpertGradSources& s : sources) {
      Tensor& grad = s.param->grad;
      const int64_t members = s.others.size(0) + 1, groups = expert_data_ranks_->size();
      Tensor slots = Tensor::Empty(backend_.allocator(), {groups * members, grad.numel()},
                                   DType::kF32, MemCategory::kComm);
      const int64_t mine = expert_data_ranks_->rank() * members;
      Tensor first = slots.Slice(0, mine, mine + 1).View(grad.shape());
      backend_.Copy(grad, first);
      Tensor rest = slots.Slice(0, mine + 1, mine + members).View(s.others.shape());
      backend_.Copy(s.others, rest);
      const std::string what =
          fmt::format("step {}: {}'s expert-data-parallel all-gather", state.step, s.param->name);
      try {
        expert_data_ranks_->AllGather(slots, timeout_);
      } catch (const Error& e) {
        BATON_FAIL("{} of stage {} failed; a replica of stage {} is dead or hung: {}", what,
                   setup_.stage, setup_.stage, e.what());
      }
      backend_.Copy(slots.Slice(0, 0, 1).View(grad.shape()), grad);
      for (int64_t k = 1; k < groups * members; ++k) {
        backend_.Accumulate(slots.Slice(0, k, k + 1).View(grad.shape()), grad);
      }
      Tensor others = s.others;
      backend_.Zero(others);
    }
  }
}

void Trainer::TensorPartialSumsPass(StepState&) {
  std::vector<const void*> summed;  // a shared block's copies hold one gradient: summed once
  for (Param* p : model_->params()) {
    if (!p->tensor_partial_grad || !p->grad.defined() ||
        std::find(summed.begin(), summed.end(), p->grad.raw()) != summed.end()) {
      continue;
    }
    summed.push_back(p->grad.raw());
    tensor_group_->AllReduceSum(p->grad);
  }
}

void Trainer::MaskGradientsPass(StepState&) { MaskGradients(backend_, model_->params()); }

void Trainer::TiedSumsPass(StepState&) { CombineTiedGradients(); }

void Trainer::StepEndFlagsPass(StepState& state) {
  const bool loss_finite = std::all_of(state.losses.begin(), state.losses.end(),
                                       [](float l) { return std::isfinite(l); });
  state.flags = ReduceStepEnd(loss_finite, state.losses, state.record.experts);
  const StepEnd& flags = state.flags;
  // fp32 and bf16 have no loss scale to back off: a non-finite loss or gradient cannot recover,
  // so every rank stops at this step (they all see the same reduced flags) rather than train on
  // NaNs. fp16 skips the step and lowers the scale instead (UpdatePass).
  if (!scaler_.enabled() && (!flags.loss_finite || !std::isfinite(flags.norm))) {
    const Config& config = setup_.config;
    const std::string what = flags.loss_finite
                                 ? fmt::format("the gradient norm is not finite ({})", flags.norm)
                                 : std::string("the loss is not finite (NaN or Inf)");
    BATON_FAIL(
        "step {}: {}; training stops here. Likely causes: a learning rate too high for this model "
        "(train.lr {}, warmup {} steps), no gradient clipping (train.grad_clip {}), or bad input "
        "data",
        state.step, what, config.train.lr, config.train.warmup_steps, config.train.grad_clip);
  }
}

void Trainer::UpdatePass(StepState& state) {
  StepRecord& record = state.record;
  record.step = state.step;
  record.loss_scale = scaler_.scale();
  record.lr = lr_.At(state.step);
  record.grad_norm = state.flags.norm;
  record.stop = state.flags.stop;
  record.skipped = scaler_.Update(state.flags.overflow);
  if (record.skipped) {
    spdlog::warn("step {}: gradient overflow at loss scale {}; step skipped, scale now {}",
                 state.step, record.loss_scale, scaler_.scale());
    return;
  }
  const double clip = setup_.config.train.grad_clip;
  const double coef = clip > 0 ? std::min(1.0, clip / (state.flags.norm + 1e-6)) : 1.0;
  optimizer_->Step(record.lr, state.step - scaler_.skipped_steps(),
                   static_cast<float>(coef / record.loss_scale));
  // sigmoid_bias: the routing bias moves with the update (a skipped step moves nothing).
  for (const auto& [index, layer] : model_->layers()) {
    const auto load = state.flags.expert_loads.find(index);
    if (load != state.flags.expert_loads.end()) layer->UpdateRoutingBias(load->second);
  }
}

void Trainer::AfterUpdatePass(StepState& state) {
  if (!state.record.skipped) sync_->AfterUpdate(state.step);
}

void Trainer::PrunePass(StepState& state) {
  const PruneConfig& prune = setup_.config.prune;
  MaskWeights(backend_, *optimizer_);
  if (state.step != prune.at_step) return;
  const WholeValues whole = [this](const Param& p, const Optimizer::Slot* slot) {
    if (std::optional<std::vector<float>> gathered = sync_->GatherWholeValues(p, slot)) {
      return *gathered;
    }
    if (IsMeta(backend_)) return std::vector<float>{};
    return HostValues(backend_, slot != nullptr && slot->master.defined() ? slot->master : p.value);
  };
  const PruneCount count = PruneByMagnitude(backend_, *optimizer_, model_->params(), prune, whole);
  if (!IsMeta(backend_)) {  // the planner's run prunes nothing
    spdlog::info("step {}: pruned {} of the {} weights of {} matrices ({}), masked from now on",
                 state.step, count.pruned, count.total, count.matrices, Name(prune.pattern));
  }
}

void Trainer::CombineTiedGradients() {
  for (size_t g = 0; g < setup_.tied.size(); ++g) {
    const TiedGroup& group = setup_.tied[g];
    std::vector<Param*> copies;  // this rank's, graph order
    for (auto& [index, layer] : model_->layers()) {
      if (std::find(group.layers.begin(), group.layers.end(), index) == group.layers.end()) {
        continue;
      }
      for (Param* p : layer->params()) {
        if (p->name != group.param) continue;
        // A shared block copy built beside its original holds the original's grad: once.
        const bool held = std::any_of(copies.begin(), copies.end(), [&](const Param* q) {
          return q->grad.raw() == p->grad.raw();
        });
        if (!held) copies.push_back(p);
      }
    }
    if (copies.empty()) continue;
    // Local copies first (emb + head when one rank holds both), then across the group's ranks:
    // one addition of the same two numbers either way, so the bits agree however it is cut.
    for (size_t k = 1; k < copies.size(); ++k)
      backend_.Accumulate(copies[k]->grad, copies[0]->grad);
    if (Group* ranks = tied_groups_[g].get()) ranks->AllReduceSum(copies[0]->grad, timeout_);
  }
}

Trainer::StepEnd Trainer::ReduceStepEnd(bool local_loss_finite, std::vector<float>& losses,
                                        const std::map<std::string, ExpertStats>& experts) {
  const int num_layers = model_->num_layers_in_graph();
  const bool replicated = setup_.layout.replicas() > 1;
  // Slot i: layer i's sum of squares (f32; written by the one rank holding it, zero elsewhere, so
  // the all-reduce sum is exact; with replicas, whose gradients are equal by now, by replica 0's
  // rank); then this rank's overflow flag, its stop request and whether its loss was not finite;
  // then, with replicas, the loss of each of the step's micro-batches (written by the head of
  // the replica that ran it).
  const size_t overflow_slot = static_cast<size_t>(num_layers);
  const size_t stop_slot = overflow_slot + 1;
  const size_t bad_loss_slot = overflow_slot + 2;
  const size_t loss_slots = bad_loss_slot + 1;
  // Then, for a sigmoid_bias router, each layer's expert loads as two slots per expert (the
  // load's multiples of kLoadSplit, and the rest), each written by tensor rank 0 of every replica
  // holding the layer: sums of integers under 2^24, exact in f32 in any order, up to 2^36
  // choices per expert and step.
  const size_t load_slots =
      loss_slots + (replicated ? static_cast<size_t>(setup_.config.train.micro_batches) : 0);
  const size_t experts_per_layer =
      setup_.dims.moe.routing_bias() ? static_cast<size_t>(setup_.dims.moe.num_experts) : 0;
  // Then, with experts whole on the replicas holding them (no ZeRO, or ZeRO with the experts
  // split over expert groups and sharded apart: ExpertZeroSync; E = 1's ZeRO shards them with
  // the rest, each replica adding its shard's part of a layer's sum), each MoE layer's sum of
  // squares of each expert's gradients (its stacked parameters' parts, in order), kept apart from
  // the layer's own slot, and written by the member of expert group 0 holding it (replica 0 with
  // every expert): the same numbers however the experts are split.
  const size_t expert_sum_slots =
      load_slots + 2 * experts_per_layer * static_cast<size_t>(num_layers);
  const bool whole_experts = !sync_->optimizer_shard() || setup_.layout.experts() > 1;
  const size_t experts_summed = setup_.dims.moe.num_experts > 0 && whole_experts
                                    ? static_cast<size_t>(setup_.dims.moe.num_experts)
                                    : 0;
  std::vector<float> partial(expert_sum_slots + experts_summed * static_cast<size_t>(num_layers),
                             0.0f);
  const bool writes_expert_sums = setup_.replica < setup_.layout.experts();
  if (stop_flag_ != nullptr && stop_flag_->load()) partial[stop_slot] = 1.0f;
  if (!local_loss_finite) partial[bad_loss_slot] = 1.0f;
  if (replicated && setup_.tensor == 0) {  // the head's tensor ranks hold the same losses
    for (size_t k = 0; k < losses.size(); ++k) {
      partial[loss_slots + static_cast<size_t>(first_microbatch()) + k] = losses[k];
    }
  }
  // Under ZeRO-1 each replica holds the reduced gradients of its shard only: its part of each
  // layer's sum, added across the replicas by the all-reduce below; otherwise replica 0 writes it.
  const bool writes_layer_sums = sync_->writes_layer_sums(setup_.replica);
  for (auto& [index, layer] : model_->layers()) {
    double sum = 0;
    bool finite = true;
    std::map<int64_t, double> expert_sums;  // by expert of the layer
    for (Param* p : layer->params()) {
      if (p->tied) continue;
      // A replicated parameter's gradient is the same on every tensor rank: counted once.
      if (setup_.tensor != 0 && !p->split.cut()) continue;
      for (const Tensor& grad : sync_->ReducedGradient(*p)) {
        if (scaler_.enabled()) finite = finite && backend_.AllFinite(grad);
        if (experts_summed == 0 || !p->stacked_experts) {
          sum += backend_.SumOfSquares(grad);
          continue;
        }
        // This rank's experts, of its expert group's or its tensor ranks' split.
        const int64_t first = p->split.cut() ? p->split.part * grad.size(0) : 0;
        for (int64_t e = 0; e < grad.size(0); ++e) {
          expert_sums[first + e] += backend_.SumOfSquares(grad.Slice(0, e, e + 1));
        }
      }
    }
    if (writes_layer_sums) partial[static_cast<size_t>(index)] = static_cast<float>(sum);
    if (writes_expert_sums) {
      for (const auto& [e, expert_sum] : expert_sums) {
        partial[expert_sum_slots + static_cast<size_t>(index) * experts_summed +
                static_cast<size_t>(e)] = static_cast<float>(expert_sum);
      }
    }
    if (!finite) partial[overflow_slot] = 1.0f;
  }
  constexpr int64_t kLoadSplit = 1 << 12;
  const auto load_slot = [&](int layer, size_t expert) {
    return load_slots + 2 * (static_cast<size_t>(layer) * experts_per_layer + expert);
  };
  for (const auto& [index, layer] : model_->layers()) {
    const auto stats = experts.find(layer->name());
    if (experts_per_layer == 0 || setup_.tensor != 0 || stats == experts.end()) continue;
    for (size_t e = 0; e < experts_per_layer; ++e) {
      const int64_t load = stats->second.load.at(e);
      BATON_CHECK(load < kLoadSplit * kLoadSplit * kLoadSplit,
                  "{}: {} choices of expert {} in one step", layer->name(), load, e);
      partial[load_slot(index, e)] = static_cast<float>(load / kLoadSplit);
      partial[load_slot(index, e) + 1] = static_cast<float>(load % kLoadSplit);
    }
  }
  if (setup_.layout.world_size() > 1) AllReduceOverJob(partial);
  StepEnd end{};
  for (const auto& [index, layer] : model_->layers()) {
    if (experts_per_layer == 0 || experts.find(layer->name()) == experts.end()) continue;
    std::vector<int64_t>& load = end.expert_loads[index];
    for (size_t e = 0; e < experts_per_layer; ++e) {
      load.push_back(static_cast<int64_t>(partial[load_slot(index, e)]) * kLoadSplit +
                     static_cast<int64_t>(partial[load_slot(index, e) + 1]));
    }
  }
  if (replicated && model_->holds_last_layer()) {
    losses.assign(partial.begin() + static_cast<std::ptrdiff_t>(loss_slots),
                  partial.begin() + static_cast<std::ptrdiff_t>(load_slots));
  }
  double total = 0;
  for (int i = 0; i < num_layers; ++i) total += partial[static_cast<size_t>(i)];
  for (size_t i = expert_sum_slots; i < partial.size(); ++i) total += partial[i];
  const double norm = std::sqrt(total) / scaler_.scale();
  end.norm = norm;
  end.overflow = partial[overflow_slot] > 0.0f || !std::isfinite(norm);
  end.stop = partial[stop_slot] > 0.0f;
  end.loss_finite = partial[bad_loss_slot] == 0.0f;
  return end;
}

}  // namespace baton
