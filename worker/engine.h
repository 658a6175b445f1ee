// The stage engine: runs one rank's action list for one training step (STYLE.md habit 2).
//
// The engine interprets; it never decides. Each action is dispatched by one switch:
//   RECV_F / RECV_B  post an asynchronous receive into a fresh buffer for (micro-batch, chunk),
//                    where the program puts it (the planner's PostReceivesEarly places each one
//                    before the compute action it should overlap);
//   F                waits for that input (or takes the local one), runs the chunk's layers
//                    forward and stashes what backward needs (under checkpointing, only each
//                    segment's input);
//   SEND_F / SEND_B  post an asynchronous send of the output / input-gradient; the buffer is
//                    kept until the send completes, then freed;
//   B                runs the chunk backward (recomputing checkpointed segments first);
//   I / W            the zero-bubble split of B: input gradients now, weight gradients later.
// Every blocking wait has a timeout that fails naming the stage, the action and the
// micro-batch. Buffers and stashes are booked as activations in the ledger.
//
// Not thread-safe: one thread drives an engine. `status()` may be read from another thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/timeouts.h"
#include "core/units.h"
#include "kernels/backend.h"
#include "plan/result.h"
#include "scheduler/action.h"
#include "scheduler/schedule.h"
#include "worker/stage_model.h"

namespace baton {

struct EngineOptions {
  int num_microbatches = 1;
  // Activation checkpointing: segments of `layers_per_segment` layers keep only their input
  // (0 = off). Selective recompute is a layer setting (Layer::set_selective_recompute).
  int layers_per_segment = 0;
  std::chrono::milliseconds timeout{kDefaultWait};
  Shape activation_shape;  // (B,T,C) of the tensors passed between stages
  DType activation_dtype = DType::kF32;
  // Wait for every posted send to complete before posting a receive or starting a compute
  // action, and free sent tensors only then, so a sent tensor lives exactly until the actions
  // after its SEND and the ledger's peaks do not depend on how fast the peers run
  // (docs/memory.md). Safe only for programs that pass the dry run under rendezvous semantics
  // (the plan says so: Plan::sends_complete_before_compute); otherwise sends complete
  // asynchronously.
  bool complete_sends_before_compute = false;
  // Called with a layer's graph index just before its backward (B or I) of a micro-batch, and
  // just after its parameters' gradients of a micro-batch are done (B or W): ZeRO-2 takes a
  // layer's gradients back at the first and reduces them after the step's last
  // (worker/gradient_sync.h). Either may be empty.
  std::function<void(int)> before_layer_backward;
  std::function<void(int)> after_layer_gradients;
  // Called with a layer's graph index around each call that reads its parameters: its forward
  // (and a checkpointed segment's recompute), its backward (B or I) and its W; before_layer_use
  // also gets the layer the same action uses next (-1 after its last). ZeRO-3 gathers the
  // layer's parameters before (and posts the next one's gather) and may release them after
  // (worker/gradient_sync.h). Either may be empty.
  std::function<void(int index, int next)> before_layer_use;
  std::function<void(int index)> after_layer_use;
};

// What the engine is doing right now, for hang diagnosis.
struct EngineStatus {
  std::string action;  // e.g. "F", "RECV_F", "ALLREDUCE" or "idle"
  int microbatch = -1;
  int peer_rank = -1;  // the world rank waited on (not its stage), -1 if none
  int64_t bytes = 0;   // of the message waited on, 0 if none
  Clock::time_point since;
};

// Called (on the engine's thread) whenever the engine starts a compute action (peer -1), starts
// or stops waiting on a peer, and when its step ends ("idle"); the step end's exchanges report
// theirs too (worker/gradient_sync.h). The flight recorder keeps them (worker/flight_recorder.h).
using StatusCallback = std::function<void(const EngineStatus&)>;

struct StepTimings {
  double wall_s = 0;     // from the first action to the last completion
  double compute_s = 0;  // time inside F/B/I/W, waits for their inputs excluded
  double wait_s = 0;     // time blocked on receives and on sends completing
};

class StageEngine {
 public:
  // `comm` may be null when the pipeline has one rank (no peers to talk to).
  StageEngine(Backend& backend, StageModel& model, Communicator* comm, EngineOptions options);
  ~StageEngine();
  StageEngine(const StageEngine&) = delete;
  StageEngine& operator=(const StageEngine&) = delete;

  // Runs `actions` (this rank's program for one step). `batches[k]` is micro-batch k (tokens on
  // the rank holding the first layer, targets on the one holding the last). Backward of the
  // last layer starts from `loss_grad_scale`. Returns the per-micro-batch losses when this rank
  // holds the head (empty otherwise).
  std::vector<float> RunStep(const std::vector<Action>& actions,
                             const std::vector<MicroBatch>& batches, float loss_grad_scale);

  // Runs a forward-only program (evaluation: F, SEND_F and RECV_F; an error for anything else).
  // Each layer's stash is dropped as soon as that layer ran: nothing is kept for a backward.
  // Returns the per-micro-batch losses when this rank holds the head (empty otherwise).
  std::vector<float> RunForward(const std::vector<Action>& actions,
                                const std::vector<MicroBatch>& batches);

  const StepTimings& last_timings() const { return timings_; }
  // The most (micro-batch, chunk) pairs whose forward had run and whose backward had not yet
  // freed it, during the last step: what sets activation memory (the simulator's peak in-flight).
  int peak_stashed() const { return peak_stashed_; }
  // The spans of the last step, in order (compute actions and waits).
  const std::vector<TraceSpan>& last_trace() const { return trace_; }
  EngineStatus status() const;
  void set_status_callback(StatusCallback callback) { on_status_ = std::move(callback); }

 private:
  struct Slot;  // per (micro-batch, chunk) state
  Slot& slot(int microbatch, int chunk);
  void Dispatch(const Action& action);
  void Forward(const Action& action);
  void Backward(const Action& action, bool input_only);
  void BackwardWeight(const Action& action);
  void PostRecv(const Action& action);
  void PostSend(const Action& action);
  Tensor AwaitInput(const Action& action);
  Tensor AwaitGradient(const Action& action);
  void RecomputeSegment(Slot& s, Chunk& chunk, int segment, const MicroBatch& batch);
  // Chunk layer `i`'s forward, between the layer-use hooks.
  Tensor LayerForward(Chunk& chunk, int i, const Tensor& x, const MicroBatch& batch, Stash& stash);
  // The layers a compute action on `chunk` uses, in order (a backward's recomputes included).
  std::vector<int> UseOrder(const Chunk& chunk, ActionKind kind) const;
  void BeforeUse(int index);
  void AfterUse(int index);
  void ReapSends(bool wait_all);
  // `action` (its kind and micro-batch); `peer_stage`: the pipeline stage waited on, or -1
  // (running it); reported as its world rank.
  void SetStatus(const Action* action, int peer_stage);
  void SetStatus(std::string what, int microbatch, int peer_stage, int64_t bytes = 0);
  std::string Describe(const Action& action) const;

  Backend& backend_;
  StageModel& model_;
  Communicator* comm_;
  EngineOptions options_;
  std::vector<std::unique_ptr<Slot>> slots_;
  struct PendingSend;
  std::vector<PendingSend> sends_;
  const std::vector<MicroBatch>* batches_ = nullptr;
  float loss_grad_scale_ = 1.0f;
  bool forward_only_ = false;  // inside RunForward
  std::vector<float> losses_;
  std::vector<int> uses_;  // the running compute action's UseOrder
  size_t next_use_ = 0;    // its position in uses_
  StepTimings timings_;
  double NowUs() const;
  void Waited(const Action& on, Clock::time_point from);
  std::vector<TraceSpan> trace_;
  Clock::time_point step_start_;
  double step_start_us_ = 0;
  Clock::time_point last_wait_end_;
  int stashed_ = 0;
  int peak_stashed_ = 0;
  mutable std::mutex status_mutex_;
  EngineStatus status_;
  StatusCallback on_status_;
};

}  // namespace baton
