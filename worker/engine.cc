#include "worker/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "core/units.h"

namespace baton {

struct StageEngine::Slot {
  Tensor input;  // F's input activation (received, or handed on by the previous local chunk)
  std::unique_ptr<Work> input_work;
  Tensor output;       // F's output; for the head, the micro-batch loss
  Tensor grad_output;  // gradient of `output` (received, or handed back by the next local chunk)
  std::unique_ptr<Work> grad_work;
  Tensor grad_input;                   // B's / I's gradient of `input`, to send back
  std::vector<Stash> stashes;          // one per layer of the chunk
  std::vector<Tensor> segment_inputs;  // under checkpointing: each segment's input
};

struct StageEngine::PendingSend {
  std::unique_ptr<Work> work;
  Tensor tensor;  // kept alive until the send completes
  std::string what;
  Action action;  // the SEND_F / SEND_B
  int peer_stage;
};

StageEngine::StageEngine(Backend& backend, StageModel& model, Communicator* comm,
                         EngineOptions options)
    : backend_(backend), model_(model), comm_(comm), options_(std::move(options)) {
  BATON_CHECK(comm_ != nullptr || model_.num_stages() == 1,
              "a {}-rank pipeline needs a communicator", model_.num_stages());
  BATON_CHECK(options_.num_microbatches >= 1, "need at least one micro-batch");
  const size_t num_slots = static_cast<size_t>(options_.num_microbatches) * model_.chunks().size();
  for (size_t i = 0; i < num_slots; ++i) slots_.push_back(std::make_unique<Slot>());
  status_.action = "idle";
  status_.since = Clock::now();
}

StageEngine::~StageEngine() = default;

StageEngine::Slot& StageEngine::slot(int microbatch, int chunk) {
  BATON_CHECK(0 <= microbatch && microbatch < options_.num_microbatches, "micro-batch {} of {}",
              microbatch, options_.num_microbatches);
  BATON_CHECK(0 <= chunk && chunk < static_cast<int>(model_.chunks().size()),
              "chunk {} not held by rank {}", chunk, model_.stage());
  return *slots_[static_cast<size_t>(microbatch) * model_.chunks().size() +
                 static_cast<size_t>(chunk)];
}

std::string StageEngine::Describe(const Action& action) const {
  return fmt::format("stage {} action {} (micro-batch {}, chunk {})", model_.stage(),
                     ToString(action, model_.num_stages(), model_.layout()), action.microbatch,
                     action.chunk);
}

void StageEngine::SetStatus(const Action* action, int peer_stage) {
  SetStatus(std::string(KindName(action->kind)), action->microbatch, peer_stage);
}

void StageEngine::SetStatus(std::string what, int microbatch, int peer_stage, int64_t bytes) {
  EngineStatus now;
  now.action = std::move(what);
  now.microbatch = microbatch;
  now.bytes = bytes;
  // The pipeline talks to stages; the status names the peer's world rank, which is what the
  // launcher's rank table and hang headline print beside "peer rank".
  now.peer_rank = peer_stage < 0 || comm_ == nullptr ? -1 : comm_->WorldRank(peer_stage);
  now.since = Clock::now();
  {
    std::lock_guard lock(status_mutex_);
    status_ = now;
  }
  if (on_status_) on_status_(now);
}

EngineStatus StageEngine::status() const {
  std::lock_guard lock(status_mutex_);
  return status_;
}

std::vector<float> StageEngine::RunStep(const std::vector<Action>& actions,
                                        const std::vector<MicroBatch>& batches,
                                        float loss_grad_scale) {
  BATON_CHECK(static_cast<int>(batches.size()) == options_.num_microbatches,
              "{} micro-batches given, {} expected", batches.size(), options_.num_microbatches);
  batches_ = &batches;
  loss_grad_scale_ = loss_grad_scale;
  losses_.assign(model_.holds_last_layer() ? static_cast<size_t>(options_.num_microbatches) : 0,
                 0.0f);
  timings_ = {};
  trace_.clear();
  stashed_ = 0;
  peak_stashed_ = 0;
  const Clock::time_point start = Clock::now();
  step_start_ = start;
  step_start_us_ = WallMicros();
  for (const Action& action : actions) {
    BATON_CHECK(action.stage == model_.stage(), "stage {} was given {}", model_.stage(),
                ToString(action, model_.num_stages(), model_.layout()));
    if (options_.complete_sends_before_compute && !IsSend(action.kind)) {
      ReapSends(/*wait_all=*/true);
    }
    const Clock::time_point t0 = Clock::now();
    last_wait_end_ = t0;
    if (IsCompute(action.kind)) SetStatus(&action, -1);  // its waits for inputs say so
    Dispatch(action);
    if (IsCompute(action.kind)) {
      // The compute span starts once its input arrived (the wait is its own span).
      const Clock::time_point end = Clock::now();
      timings_.compute_s += Seconds(end - last_wait_end_);
      const double end_us = NowUs();
      trace_.push_back({TraceSpan::Kind::kCompute, action,
                        end_us - Seconds(end - last_wait_end_) * 1e6, end_us});
    }
    // Under rendezvous-safe schedules sends are reaped only before a compute action, so what is
    // alive at each point does not depend on how fast the peers run (docs/memory.md).
    if (!options_.complete_sends_before_compute) ReapSends(/*wait_all=*/false);
  }
  ReapSends(/*wait_all=*/true);
  SetStatus("idle", -1, -1);
  for (auto& s : slots_) *s = Slot{};  // nothing survives a step
  timings_.wall_s = Seconds(Clock::now() - start);
  batches_ = nullptr;
  return losses_;
}

std::vector<float> StageEngine::RunForward(const std::vector<Action>& actions,
                                           const std::vector<MicroBatch>& batches) {
  for (const Action& action : actions) {
    const bool forward = action.kind == ActionKind::kForward ||
                         action.kind == ActionKind::kSendForward ||
                         action.kind == ActionKind::kRecvForward;
    BATON_CHECK(forward, "{}: a forward-only program holds only F, SEND_F and RECV_F",
                Describe(action));
  }
  forward_only_ = true;
  try {
    std::vector<float> losses = RunStep(actions, batches, 1.0f);
    forward_only_ = false;
    return losses;
  } catch (...) {
    forward_only_ = false;
    throw;
  }
}

double StageEngine::NowUs() const {
  return step_start_us_ +
         std::chrono::duration<double, std::micro>(Clock::now() - step_start_).count();
}

void StageEngine::Waited(const Action& on, Clock::time_point from) {
  const Clock::time_point now = Clock::now();
  const double waited = Seconds(now - from);
  timings_.wait_s += waited;
  last_wait_end_ = now;
  const double end_us = NowUs();
  trace_.push_back({TraceSpan::Kind::kWait, on, end_us - waited * 1e6, end_us});
}

void StageEngine::Dispatch(const Action& action) {
  switch (action.kind) {
    case ActionKind::kForward:
      Forward(action);
      return;
    case ActionKind::kBackward:
      Backward(action, /*input_only=*/false);
      return;
    case ActionKind::kBackwardInput:
      Backward(action, /*input_only=*/true);
      return;
    case ActionKind::kBackwardWeight:
      BackwardWeight(action);
      return;
    case ActionKind::kSendForward:
    case ActionKind::kSendBackward:
      PostSend(action);
      return;
    case ActionKind::kRecvForward:
    case ActionKind::kRecvBackward:
      PostRecv(action);
      return;
  }
  BATON_FAIL("{}: unknown action kind {}", Describe(action), static_cast<int>(action.kind));
}

void StageEngine::PostRecv(const Action& action) {
  const int peer = PeerStage(action, model_.num_stages(), model_.layout());
  BATON_CHECK(peer != model_.stage(), "{}: receive from itself", Describe(action));
  Slot& s = slot(action.microbatch, action.chunk);
  Tensor buffer = Tensor::Empty(backend_.allocator(), options_.activation_shape,
                                options_.activation_dtype, MemCategory::kActivations);
  std::unique_ptr<Work> work = comm_->Irecv(buffer, peer);
  if (action.kind == ActionKind::kRecvForward) {
    BATON_CHECK(!s.input.defined(), "{}: input already received", Describe(action));
    s.input = std::move(buffer);
    s.input_work = std::move(work);
  } else {
    BATON_CHECK(!s.grad_output.defined(), "{}: gradient already received", Describe(action));
    s.grad_output = std::move(buffer);
    s.grad_work = std::move(work);
  }
}

void StageEngine::PostSend(const Action& action) {
  const int peer = PeerStage(action, model_.num_stages(), model_.layout());
  BATON_CHECK(peer != model_.stage(), "{}: send to itself", Describe(action));
  Slot& s = slot(action.microbatch, action.chunk);
  Tensor& tensor = action.kind == ActionKind::kSendForward ? s.output : s.grad_input;
  BATON_CHECK(tensor.defined(), "{}: nothing to send (its compute action has not run)",
              Describe(action));
  PendingSend pending{comm_->Isend(tensor, peer), tensor, Describe(action), action, peer};
  tensor = Tensor();  // the pending send owns it now
  sends_.push_back(std::move(pending));
}

void StageEngine::ReapSends(bool wait_all) {
  for (auto it = sends_.begin(); it != sends_.end();) {
    if (wait_all) {
      SetStatus(std::string(KindName(it->action.kind)), it->action.microbatch, it->peer_stage,
                static_cast<int64_t>(it->tensor.nbytes()));
    }
    bool done = it->work->Test();
    if (!done && wait_all) {
      const Clock::time_point from = Clock::now();
      try {
        it->work->Wait(options_.timeout);
      } catch (const Error& e) {
        BATON_FAIL("{}: send did not complete: {}", it->what, e.what());
      }
      Waited(it->action, from);
      done = true;
    }
    it = done ? sends_.erase(it) : it + 1;
  }
}

Tensor StageEngine::AwaitInput(const Action& action) {
  Slot& s = slot(action.microbatch, action.chunk);
  const int virtual_stage = VirtualStage(action, model_.num_stages(), model_.layout());
  if (virtual_stage == 0) return Tensor();  // the embedding reads tokens
  const int previous_rank =
      StageOfVirtualStage(virtual_stage - 1, model_.num_stages(), model_.layout());
  if (previous_rank == model_.stage()) {  // the previous chunk is ours: hand it on
    Slot& previous =
        slot(action.microbatch, ChunkOfVirtualStage(virtual_stage - 1, model_.num_stages()));
    BATON_CHECK(previous.output.defined(), "{}: the previous chunk's forward has not run",
                Describe(action));
    return std::move(previous.output);
  }
  BATON_CHECK(s.input.defined(), "{}: no RECV_F was posted for this input", Describe(action));
  if (s.input_work) {
    SetStatus("RECV_F", action.microbatch, previous_rank, static_cast<int64_t>(s.input.nbytes()));
    const Clock::time_point from = Clock::now();
    try {
      s.input_work->Wait(options_.timeout);
    } catch (const Error& e) {
      // The communicator's error says whether it timed out, the peer went away or the job was
      // aborted; this only adds what was awaited, and for how long.
      BATON_FAIL("{}: waiting {:.1f} s for the activation from stage {}: {}", Describe(action),
                 Seconds(Clock::now() - from), previous_rank, e.what());
    }
    s.input_work.reset();
    Waited({action.stage, ActionKind::kRecvForward, action.microbatch, action.chunk}, from);
  }
  return s.input;
}

Tensor StageEngine::AwaitGradient(const Action& action) {
  Slot& s = slot(action.microbatch, action.chunk);
  const int virtual_stage = VirtualStage(action, model_.num_stages(), model_.layout());
  if (virtual_stage == model_.num_virtual_stages() - 1) return Tensor();  // the head's loss
  const int next_rank =
      StageOfVirtualStage(virtual_stage + 1, model_.num_stages(), model_.layout());
  if (next_rank == model_.stage()) {
    Slot& next =
        slot(action.microbatch, ChunkOfVirtualStage(virtual_stage + 1, model_.num_stages()));
    BATON_CHECK(next.grad_input.defined(), "{}: the next chunk's backward has not run",
                Describe(action));
    return std::move(next.grad_input);
  }
  BATON_CHECK(s.grad_output.defined(), "{}: no RECV_B was posted for this gradient",
              Describe(action));
  if (s.grad_work) {
    SetStatus("RECV_B", action.microbatch, next_rank, static_cast<int64_t>(s.grad_output.nbytes()));
    const Clock::time_point from = Clock::now();
    try {
      s.grad_work->Wait(options_.timeout);
    } catch (const Error& e) {
      // The communicator's error says whether it timed out, the peer went away or the job was
      // aborted; this only adds what was awaited, and for how long.
      BATON_FAIL("{}: waiting {:.1f} s for the gradient from stage {}: {}", Describe(action),
                 Seconds(Clock::now() - from), next_rank, e.what());
    }
    s.grad_work.reset();
    Waited({action.stage, ActionKind::kRecvBackward, action.microbatch, action.chunk}, from);
  }
  Tensor dy = std::move(s.grad_output);
  s.grad_output = Tensor();
  return dy;
}

void StageEngine::Forward(const Action& action) {
  Chunk& chunk = model_.chunk(action.chunk);
  Slot& s = slot(action.microbatch, action.chunk);
  const MicroBatch& batch = (*batches_)[static_cast<size_t>(action.microbatch)];
  BATON_CHECK(s.stashes.empty(), "{}: forward ran twice", Describe(action));
  Tensor x = AwaitInput(action);
  SetStatus(&action, -1);
  uses_ = UseOrder(chunk, ActionKind::kForward);
  next_use_ = 0;
  const int num_layers = static_cast<int>(chunk.layers.size());
  const int every = options_.layers_per_segment;
  s.stashes.resize(static_cast<size_t>(num_layers));
  peak_stashed_ = std::max(peak_stashed_, ++stashed_);
  for (int i = 0; i < num_layers; ++i) {
    if (forward_only_) {  // no backward will read the stash
      x = LayerForward(chunk, i, x, batch, s.stashes[static_cast<size_t>(i)]);
      s.stashes[static_cast<size_t>(i)].Clear();
      continue;
    }
    if (every > 0 && i % every == 0) s.segment_inputs.push_back(x);
    x = LayerForward(chunk, i, x, batch, s.stashes[static_cast<size_t>(i)]);
    const bool segment_ends = every > 0 && (i % every == every - 1 || i == num_layers - 1);
    if (segment_ends) {
      for (int j = i - i % every; j <= i; ++j) s.stashes[static_cast<size_t>(j)].Clear();
    }
  }
  s.input = Tensor();  // held by the stash or a segment input when backward needs it
  if (forward_only_) {
    s.stashes.clear();
    --stashed_;
  }
  if (chunk.range.last == model_.num_layers_in_graph() - 1) {
    float loss = 0.0f;
    Tensor host = Tensor::Wrap(&loss, {1}, DType::kF32);
    backend_.Copy(x.View({1}), host);
    backend_.Synchronize();
    losses_[static_cast<size_t>(action.microbatch)] = loss;
  } else {
    s.output = std::move(x);
  }
}

void StageEngine::RecomputeSegment(Slot& s, Chunk& chunk, int segment, const MicroBatch& batch) {
  const int every = options_.layers_per_segment;
  const int first = segment * every;
  const int last = std::min(first + every, static_cast<int>(chunk.layers.size())) - 1;
  Tensor x = s.segment_inputs[static_cast<size_t>(segment)];
  for (int j = first; j <= last; ++j) {
    x = LayerForward(chunk, j, x, batch, s.stashes[static_cast<size_t>(j)]);
  }
  s.segment_inputs[static_cast<size_t>(segment)] = Tensor();
}

Tensor StageEngine::LayerForward(Chunk& chunk, int i, const Tensor& x, const MicroBatch& batch,
                                 Stash& stash) {
  const int index = chunk.range.first + i;
  BeforeUse(index);
  Tensor y = chunk.layers[static_cast<size_t>(i)]->Forward(x, batch, stash);
  AfterUse(index);
  return y;
}

std::vector<int> StageEngine::UseOrder(const Chunk& chunk, ActionKind kind) const {
  const int num_layers = static_cast<int>(chunk.layers.size());
  const int every = options_.layers_per_segment;
  std::vector<int> order;
  for (int k = 0; k < num_layers; ++k) {
    const int i = kind == ActionKind::kForward ? k : num_layers - 1 - k;
    const bool recomputes = (kind == ActionKind::kBackward || kind == ActionKind::kBackwardInput) &&
                            every > 0 && (i % every == every - 1 || i == num_layers - 1);
    if (recomputes) {  // RecomputeSegment's forwards, then this layer's backward
      for (int j = i - i % every; j <= i; ++j) order.push_back(chunk.range.first + j);
    }
    order.push_back(chunk.range.first + i);
  }
  return order;
}

void StageEngine::BeforeUse(int index) {
  BATON_CHECK(next_use_ < uses_.size() && uses_[next_use_] == index,
              "layer {} used out of its action's order", index);
  ++next_use_;
  const int next = next_use_ < uses_.size() ? uses_[next_use_] : -1;
  if (options_.before_layer_use) options_.before_layer_use(index, next);
}

void StageEngine::AfterUse(int index) {
  if (options_.after_layer_use) options_.after_layer_use(index);
}

void StageEngine::Backward(const Action& action, bool input_only) {
  Chunk& chunk = model_.chunk(action.chunk);
  Slot& s = slot(action.microbatch, action.chunk);
  const MicroBatch& batch = (*batches_)[static_cast<size_t>(action.microbatch)];
  BATON_CHECK(!s.stashes.empty(), "{}: backward before forward", Describe(action));
  Tensor dy = AwaitGradient(action);
  SetStatus(&action, -1);
  uses_ = UseOrder(chunk, action.kind);
  next_use_ = 0;
  const BackwardArgs args{loss_grad_scale_};
  const int every = options_.layers_per_segment;
  const int num_layers = static_cast<int>(chunk.layers.size());
  for (int i = num_layers - 1; i >= 0; --i) {
    if (every > 0 && (i % every == every - 1 || i == num_layers - 1)) {
      RecomputeSegment(s, chunk, i / every, batch);
    }
    Layer& layer = *chunk.layers[static_cast<size_t>(i)];
    Stash& stash = s.stashes[static_cast<size_t>(i)];
    const int index = chunk.range.first + i;
    if (options_.before_layer_backward) options_.before_layer_backward(index);
    BeforeUse(index);
    dy = input_only ? layer.BackwardInput(dy, batch, stash, args)
                    : layer.Backward(dy, batch, stash, args);
    AfterUse(index);
    if (!input_only && options_.after_layer_gradients) options_.after_layer_gradients(index);
  }
  s.segment_inputs.clear();
  if (!input_only) {
    s.stashes.clear();
    --stashed_;
  }
  if (chunk.virtual_stage > 0) s.grad_input = std::move(dy);
}

void StageEngine::BackwardWeight(const Action& action) {
  Chunk& chunk = model_.chunk(action.chunk);
  Slot& s = slot(action.microbatch, action.chunk);
  BATON_CHECK(s.stashes.size() == chunk.layers.size(), "{}: W before I", Describe(action));
  uses_ = UseOrder(chunk, ActionKind::kBackwardWeight);
  next_use_ = 0;
  for (size_t i = chunk.layers.size(); i-- > 0;) {
    const int index = chunk.range.first + static_cast<int>(i);
    BeforeUse(index);
    chunk.layers[i]->BackwardWeight(s.stashes[i]);
    AfterUse(index);
    if (options_.after_layer_gradients) options_.after_layer_gradients(index);
  }
  s.stashes.clear();
  --stashed_;
}

}  // namespace baton
