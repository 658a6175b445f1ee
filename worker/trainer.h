// One rank's training loop: data in, the stage engine for the micro-batches, then the step end
// that every rank runs identically (DESIGN.md, "data flow of one training step", 4-6).
//
// Step end, in order (with sequence parallelism, first the norms' gradients, each rank's part of
// the sequence, are summed over the stage's tensor group):
//   0. with data-parallel replicas (parallel.replicas R > 1), as soon as this rank's program of
//      the step is done (its last backward), its gradients are summed across the R replicas of
//      its stage, in buckets of at most kGradBucketBytes, while other stages may still be in
//      their cooldown; every replica then holds the same bits;
//      With ZeRO-1 (parallel.zero 1) the tied sums (1) come first, then a reduce-scatter in
//      place of the all-reduce: the stage's distinct parameters laid end to end form a flat
//      space cut into R equal shards; replica r gets the replicas' sum (rank order) of shard r
//      only, steps only shard r (its optimizer holds state for it alone) and, after the step,
//      every replica gathers the others' updated shards of the parameters; ZeRO-2 (parallel.zero
//      2) reduce-scatters each layer final at its backward right then, and releases the
//      gradients with no element in its shard until their layer's next backward;
//   1. every tied parameter's gradient is summed across the ranks holding its copies: the token
//      embedding between the ranks holding the first and the last layer (or locally when one
//      rank holds both), and a shared block parameter (model.share) between the stages its
//      share group spans (within a stage its copies hold one gradient); all then hold the sum;
//   2. each rank computes per-layer sums of squared gradients for its layers (a tied copy counts
//      once, at the embedding; with tensor ranks, each adds its parts of the cut parameters and
//      tensor rank 0 alone the replicated ones); all ranks exchange them and add them in layer
//      order, so the global norm has the same bits however the graph is cut into stages; the
//      fp16 overflow flag rides along;
//   3. every rank clips by that norm, skips the step on overflow, and steps AdamW.
//
// Not thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/layer_tensors.h"
#include "comm/communicator.h"
#include "config/config.h"
#include "core/timeouts.h"
#include "data/data.h"
#include "kernels/backend.h"
#include "model/graph.h"
#include "plan/plan.h"
#include "plan/result.h"
#include "scheduler/schedule.h"
#include "worker/checkpoint_steps.h"
#include "worker/engine.h"
#include "worker/expert_group.h"
#include "worker/gradient_sync.h"
#include "worker/loss_scaler.h"
#include "worker/optimizer.h"
#include "worker/run_data.h"
#include "worker/stage_model.h"
#include "worker/state_layout.h"
#include "worker/tensor_group.h"

namespace baton {

struct TrainerSetup {
  Config config;
  std::vector<LayerSpec> graph;
  ModelDims dims;
  ParallelLayout layout;  // the job's stages x tensor ranks x replicas (Plan::layout)
  int stage = 0;          // this rank's place in its pipeline (the schedule's stage)
  int replica = 0;        // data-parallel replica
  int tensor = 0;         // tensor-parallel rank in its stage
  std::vector<LayerRange> chunk_ranges;        // this rank's layers, one range per chunk
  Schedule schedule;                           // with communication actions; validated
  Schedule eval_schedule;                      // forward-only, with communication; validated
  int64_t eval_batches = 0;                    // per evaluation (EvalBatchesFor); 0: no eval data
  bool sends_complete_before_compute = false;  // Plan::sends_complete_before_compute
  std::vector<TiedGroup> tied;                 // every tied group of the graph
  std::vector<std::vector<int>> tied_ranks;    // by tied's index: Plan::TiedRanks of this rank
  // World ranks (ParallelLayout::GroupOf): this rank's pipeline, stage order, its stage's
  // replicas, replica order, and its stage's tensor ranks, tensor order.
  std::vector<int> pipeline_group;
  std::vector<int> replica_group;
  std::vector<int> tensor_group;
  // Expert parallelism (layout.experts() E > 1): this rank's expert group (ParallelLayout::
  // ExpertGroupOf) and the replicas holding the same experts (ExpertDataGroupOf), replica order.
  std::vector<int> expert_group;
  std::vector<int> expert_data_group;
  std::chrono::milliseconds timeout{kDefaultWait};  // any wait on a peer (Timeouts::wait)
  // All layout.world_size() ranks, by world rank; null when that is one.
  Communicator* comm = nullptr;
  // `baton eval`: the trainer only evaluates, so it keeps no gradients and no optimizer state
  // (Step throws). An INT8 model (model.weights: int8) is always so.
  bool inference_only = false;
};

// What world rank `world_rank`'s Trainer is built from: the plan's own figures, nothing
// re-derived. `comm` spans the world (all plan.world_size() ranks); null when that is one rank.
TrainerSetup TrainerSetupFor(const Plan& plan, int world_rank, Communicator* comm);

struct StepRecord {
  int64_t step = 0;  // 1-based
  float loss = 0;    // mean over micro-batches; valid on the rank holding the head
  double grad_norm = 0;
  float lr = 0;
  double loss_scale = 1;
  bool skipped = false;  // fp16 overflow: no update this step
  bool stop = false;     // some rank was asked to stop (SIGTERM/SIGINT): all stop after this step
  double step_s = 0;
  double compute_s = 0;    // inside F/B/I/W, and the update (the step end but its collectives)
  double wait_s = 0;       // blocked on peers
  double allreduce_s = 0;  // summing gradients across data-parallel replicas (step end)
  // Tensor parallelism: the collectives this rank issued over its stage's tensor group in the
  // step (the layers' and the step end's; CommTensorGroup::Traffic), how many of them were
  // all-gathers, their bytes and seconds.
  int64_t tensor_collectives = 0;
  int64_t tensor_gathers = 0;
  int64_t tensor_bytes = 0;
  double tensor_s = 0;
  // Expert parallelism: the experts' all-to-alls this rank ran over its expert group in the step
  // (CommExpertGroup::Traffic): the bytes it sent and their seconds.
  int64_t alltoall_bytes = 0;
  double alltoall_s = 0;
  double tokens_per_s = 0;
  // Experts (model.moe): each of this rank's MoE layers' routing over the step, by layer name.
  std::map<std::string, ExpertStats> experts;
  // "step start", the engine's spans, each step-end "exchange", then "optimizer" (the step end,
  // around the exchanges).
  std::vector<TraceSpan> trace;
  // After the step, when train.eval_every says so (every eval_every steps, and the last step).
  std::optional<EvalRecord> eval;
};

class Trainer {
 public:
  Trainer(TrainerSetup setup, Backend& backend);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  StepRecord Step(int64_t step);
  // Runs the setup's eval_batches batches of held-out windows through the forward-only schedule;
  // every rank calls it at the same point. The weights and the optimizer are untouched.
  EvalRecord Evaluate();

  // How this rank's parameter state lies across its tensor ranks and replicas, and the whole <->
  // part moves of checkpoints and initialisation (worker/state_layout.h). The worker saves and
  // loads through it, and the memory planner books a checkpoint's save through it.
  StateLayout& state() { return *state_; }

  // FNV-1a digest of each local layer's parameter bytes (tied copies excluded), by graph index.
  std::vector<std::pair<int, uint64_t>> LayerDigests();
  // FNV-1a digest of every tied parameter this rank holds (original or copy), by name: every
  // rank holding one must hold the same bytes.
  std::map<std::string, uint64_t> TiedParamDigests();
  bool holds_head() const { return model_->holds_last_layer(); }
  int peak_stashed_microbatches() const { return engine_->peak_stashed(); }
  StageModel& model() { return *model_; }
  // Null for an inference-only trainer (TrainerSetup::inference_only, or INT8 weights), which
  // keeps no optimizer state.
  Optimizer* optimizer() { return optimizer_.get(); }
  void set_loss_scaler_state(const LossScaler::State& state) { scaler_.set_state(state); }
  // An extended run's learning-rate schedule (Launch::lr_segments): the first segment's end is
  // the schedule's total, the others its extensions. Empty: train.steps, as configured.
  void set_lr_segments(const std::vector<LrSegment>& segments) {
    if (segments.empty()) return;
    lr_.total_steps = segments.front().to;
    lr_.extensions.assign(segments.begin() + 1, segments.end());
  }
  // A flag (set from a signal handler) that asks this rank to stop; reduced across ranks at
  // every step end so that all ranks stop after the same step. May be null.
  void set_stop_flag(const std::atomic<bool>* flag) { stop_flag_ = flag; }
  // Told whenever this rank starts a compute action or starts or stops waiting on a peer: the
  // engine's actions and waits, the tensor group's collectives ("TP_ALLREDUCE", ..., peer: the
  // next tensor rank; then the engine's action again), and the replicas' gradient all-reduce
  // ("ALLREDUCE", peer: another replica of this stage).
  void set_status_callback(StatusCallback callback);
  const LossScaler& loss_scaler() const { return scaler_; }

 private:
  void FillMicroBatches(int64_t step);
  void FillEvalMicroBatches(int64_t batch);
  void CopyIn(MicroBatch& batch, std::vector<int32_t>& tokens, std::vector<int32_t>& targets,
              const std::function<std::string()>& rows, const std::string& source);
  void CombineTiedGradients();
  // The optimizer and sync_ (ZeRO-1's or the all-reduce's), for a trainer that trains.
  void SetUpOptimizer();
  // ZeRO-1/2 (parallel.zero 1 or 2 with replicas): the optimizer holds only this replica's shard.
  bool zero() const { return sync_ != nullptr && sync_->optimizer_shard().has_value(); }
  // Sums `values` over every rank of the job (host memory; staged through the device on GPUs).
  void AllReduceOverJob(std::vector<float>& values);
  struct StepEnd {
    double norm;       // global gradient norm of the unscaled gradients
    bool overflow;     // some gradient was not finite
    bool stop;         // some rank was asked to stop
    bool loss_finite;  // the head's loss was finite (every rank learns it)
    // sigmoid_bias routers: each of this rank's MoE layers' expert loads (by graph index),
    // summed over the replicas.
    std::map<int, std::vector<int64_t>> expert_loads;
  };
  // `losses`: this rank's per-micro-batch losses (the head's); with replicas every head gets
  // back the whole step's, in micro-batch order. `experts`: this rank's step's expert statistics
  // (StepRecord::experts).
  StepEnd ReduceStepEnd(bool local_loss_finite, std::vector<float>& losses,
                        const std::map<std::string, ExpertStats>& experts);
  // This replica's first micro-batch of a step, of the step's train.micro_batches.
  int first_microbatch() const;

  // What the step end's passes hand on: the engine's losses, the reduced flags, the record.
  struct StepState {
    int64_t step = 0;
    std::vector<float> losses;
    StepEnd flags{};
    StepRecord record;
  };
  // One named pass of the step end. `exchange`: it waits for peers (timed apart from the update);
  // `replicas`: between this stage's replicas (StepRecord::allreduce_s).
  struct StepPass {
    const char* name;
    bool exchange;
    bool replicas;
    void (Trainer::*run)(StepState&);
  };
  // The step end in order (the file comment's 0-3), for this trainer's GradientSync and config.
  std::vector<StepPass> StepEndPasses() const;
  void ReducePass(StepState& state);  // GradientSync::Reduce
  // Expert parallelism: each split expert's gradient made the sum of every replica's, in replica
  // order (the bits of AllReduceSync's sum with the experts whole): the expert-data-parallel
  // replicas' per-source gradients all-gathered, then every source added in order.
  void ExpertSumsPass(StepState& state);
  // Sums Param::tensor_partial_grad gradients over the tensor group (sequence parallelism's
  // norms, Qwen3's q/k norms).
  void TensorPartialSumsPass(StepState& state);
  void MaskGradientsPass(StepState& state);
  void TiedSumsPass(StepState& state);
  void StepEndFlagsPass(StepState& state);  // also stops the job on a non-finite fp32/bf16 step
  void UpdatePass(StepState& state);        // clip, step AdamW, or skip on fp16 overflow
  void AfterUpdatePass(StepState& state);   // GradientSync::AfterUpdate, unless skipped
  void PrunePass(StepState& state);         // the masks, and the magnitude pruning at prune.at_step

  TrainerSetup setup_;
  Backend& backend_;
  // This rank's process groups over the world communicator (comm/group.h), from the plan's
  // layout; each null where it would hold this rank alone:
  //  - its pipeline (this replica's stages at this tensor rank), when the world is more;
  //  - its stage's replicas, replica order, and its stage's tensor ranks, tensor order;
  //  - by setup_.tied's index, the ranks holding that tied parameter's copies;
  //  - its expert group and the replicas holding the same experts (parallel.experts > 1).
  std::unique_ptr<Group> pipeline_group_;
  std::unique_ptr<Group> replica_group_;
  std::unique_ptr<Group> tensor_ranks_;
  std::unique_ptr<Group> expert_ranks_;
  std::unique_ptr<Group> expert_data_ranks_;
  std::vector<std::unique_ptr<Group>> tied_groups_;
  // The engine's communicator: pipeline_group_, or the world when that is the pipeline, or null
  // for a one-rank job.
  Communicator* pipeline_ = nullptr;
  // What the layers sum over (parallel.tensor > 1): tensor_ranks_ as model/'s TensorGroup.
  std::unique_ptr<CommTensorGroup> tensor_group_;
  // What the experts move their rows over (parallel.experts > 1): expert_ranks_ as model/'s
  // ExpertGroup.
  std::unique_ptr<CommExpertGroup> expert_group_;
  std::unique_ptr<GradientSync> sync_;  // how this stage's replicas make their gradients one
  int64_t step_ = 0;                    // the step being run
  // By graph index: the micro-batches whose gradients this step has completed (the engine's
  // after_layer_gradients), for GradientSync::LayerGradientsDone.
  std::map<int, int> gradients_done_;
  // This step's exchanges with the replicas inside a layer's action (start, end), for the
  // report and the trace: ZeRO-2's reductions in a backward, ZeRO-3's gathers before a use.
  std::vector<std::pair<Clock::time_point, Clock::time_point>> layer_exchanges_;
  // Records one that began at `start` and reports the action it ran inside as going on.
  void LayerExchanged(Clock::time_point start);
  std::unique_ptr<RunData> data_;  // on the ranks holding the first or the last layer
  std::unique_ptr<StageModel> model_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<StateLayout> state_;  // over model_, optimizer_, sync_ and tensor_group_
  std::unique_ptr<StageEngine> engine_;
  std::vector<MicroBatch> batches_;
  LearningRateSchedule lr_;
  LossScaler scaler_;
  std::chrono::milliseconds timeout_;
  const std::atomic<bool>* stop_flag_ = nullptr;
  StatusCallback on_status_;
  EngineStatus engine_status_;  // the engine's latest, restored after a tensor collective
  std::vector<StepPass> step_end_;
};

// Combines per-layer digests (graph order) into the job's param_checksum.
std::string CombineLayerDigests(std::vector<std::pair<int, uint64_t>> digests);

}  // namespace baton
