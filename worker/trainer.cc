#include "worker/trainer.h"

#include <algorithm>
#include <functional>
#include <optional>
#include <set>
#include <string>

#include "comm/group.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/units.h"
#include "data/packing.h"
#include "data/tokenizer.h"
#include "kernels/backend.h"
#include "model/init.h"
#include "model/prune.h"
#include "worker/expert_zero_sync.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {

// Whether one of `ranges` (a rank's chunks) holds graph layer `index`.
bool HoldsLayer(const std::vector<LayerRange>& ranges, int index) {
  return std::any_of(ranges.begin(), ranges.end(),
                     [&](const LayerRange& r) { return r.first <= index && index <= r.last; });
}

}  // namespace

TrainerSetup TrainerSetupFor(const Plan& plan, int world_rank, Communicator* comm) {
  TrainerSetup setup;
  setup.config = plan.config;
  setup.dims = plan.dims;
  setup.graph = plan.graph;
  setup.layout = plan.layout();
  const Coordinates at = setup.layout.At(world_rank);
  setup.stage = at.stage;
  setup.replica = at.replica;
  setup.tensor = at.tensor;
  setup.chunk_ranges = plan.ChunkRanges(setup.stage);
  setup.schedule = plan.schedule;
  setup.eval_schedule = plan.eval_schedule;
  setup.eval_batches = plan.eval_batches;
  setup.sends_complete_before_compute = plan.sends_complete_before_compute;
  setup.tied = plan.tied;
  for (const TiedGroup& group : plan.tied) {
    setup.tied_ranks.push_back(plan.TiedRanks(group, world_rank));
  }
  setup.pipeline_group = setup.layout.GroupOf(Axis::kPipeline, world_rank);
  setup.replica_group = setup.layout.GroupOf(Axis::kData, world_rank);
  setup.tensor_group = setup.layout.GroupOf(Axis::kTensor, world_rank);
  setup.expert_group = setup.layout.ExpertGroupOf(world_rank);
  setup.expert_data_group = setup.layout.ExpertDataGroupOf(world_rank);
  setup.timeout = plan.timeouts.wait;
  setup.comm = comm;
  return setup;
}

namespace {

constexpr const char* kInt8IsForInference =
    "model.weights: int8 holds the weights for inference only (baton eval, baton generate); "
    "training and its memory plan need model.weights: dense";

// This rank among its stage's replicas, as the plan names them.
ReplicaContext ReplicaContextOf(const TrainerSetup& setup, Group& replicas, Backend& backend,
                                const StatusCallback* on_status) {
  ReplicaContext context;
  context.backend = &backend;
  context.replicas = &replicas;
  context.stage = setup.stage;
  context.timeout = setup.timeout;
  context.on_status = on_status;
  return context;
}

// Experts split over an expert group: summed by the experts' pass (ExpertSumsPass), and under
// ZeRO sharded apart (ExpertZeroSync).
bool SplitExperts(const Param& p) {
  return p.stacked_experts && p.split.cut() && p.split.over == SplitOver::kExperts;
}

// The stage's layers as ZeroSync sees them: every parameter but the split experts.
std::vector<ZeroLayer> ZeroLayersOf(StageModel& model, const std::vector<TiedGroup>& tied) {
  std::vector<ZeroLayer> layers;
  for (auto& [index, layer] : model.layers()) {
    std::vector<Param*> params = layer->params();
    params.erase(
        std::remove_if(params.begin(), params.end(), [](Param* p) { return SplitExperts(*p); }),
        params.end());
    ZeroLayer& z = layers.emplace_back(ZeroLayer{index, std::move(params), true});
    // A tied or shared layer's sums come at the step end (the tied sums pass).
    for (const TiedGroup& group : tied) {
      if (std::find(group.layers.begin(), group.layers.end(), index) != group.layers.end()) {
        z.final_at_backward = false;
      }
    }
    for (const Param* p : z.params) {
      if (p->tied || p->tensor_partial_grad) z.final_at_backward = false;
    }
  }
  return layers;
}

// The engine's options from the setup: micro-batches, checkpointing, waits, what it passes.
EngineOptions EngineOptionsFor(const TrainerSetup& setup) {
  const Config& config = setup.config;
  EngineOptions options;
  options.num_microbatches = MicroBatchesPerReplica(config);
  options.layers_per_segment = config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kEvery
                                   ? config.parallel.checkpoint.every
                                   : 0;
  options.timeout = setup.timeout;
  // Under sequence parallelism the stages pass each tensor rank its part of the sequence.
  const int64_t parts = config.parallel.sequence_parallel ? setup.layout.tensor() : 1;
  options.activation_shape = {MicroBatchSize(config), SequenceLength(config) / parts,
                              setup.dims.width};
  options.activation_dtype = config.precision.dtype;
  options.complete_sends_before_compute = setup.sends_complete_before_compute;
  return options;
}

// By this rank's layers' graph indices: how many times a step completes the layer's gradients
// of a micro-batch (the B and W actions of its chunk in this rank's program).
std::map<int, int> GradientPassesPerStep(const TrainerSetup& setup) {
  std::map<int, int> passes;
  for (const Action& action : setup.schedule.per_stage[static_cast<size_t>(setup.stage)]) {
    if (action.kind != ActionKind::kBackward && action.kind != ActionKind::kBackwardWeight) {
      continue;
    }
    const LayerRange& range = setup.chunk_ranges.at(static_cast<size_t>(action.chunk));
    for (int index = range.first; index <= range.last; ++index) ++passes[index];
  }
  return passes;
}

}  // namespace

void Trainer::LayerExchanged(Clock::time_point start) {
  layer_exchanges_.emplace_back(start, Clock::now());
  EngineStatus resumed = engine_status_;  // the action it ran inside goes on
  resumed.since = Clock::now();
  if (on_status_) on_status_(resumed);
}

void Trainer::set_status_callback(StatusCallback callback) {
  on_status_ = std::move(callback);
  engine_->set_status_callback([this](const EngineStatus& status) {
    engine_status_ = status;
    if (on_status_) on_status_(status);
  });
  // A collective inside a layer's action is a wait of that action's micro-batch; after it the
  // action goes on.
  const auto resume = [this] {
    EngineStatus resumed = engine_status_;
    resumed.since = Clock::now();
    if (on_status_) on_status_(resumed);
  };
  if (tensor_group_) {
    tensor_group_->set_status_hooks(
        [this](const char* what, int peer_rank, int64_t bytes) {
          if (on_status_) {
            on_status_({what, engine_status_.microbatch, peer_rank, bytes, Clock::now()});
          }
        },
        resume);
  }
  if (expert_group_) {
    expert_group_->set_status_hooks(
        [this](int peer_rank, int64_t bytes) {
          if (on_status_) {
            on_status_({"EP_ALLTOALL", engine_status_.microbatch, peer_rank, bytes, Clock::now()});
          }
        },
        resume,
        [this] {
          return fmt::format("step {}, {} of micro-batch {}", step_, engine_status_.action,
                             engine_status_.microbatch);
        });
  }
}

// The optimizer and the gradient synchronisation of this stage's replicas, in the order their
// state is booked: ZeRO's flat space before the optimizer (it decides the shard), the
// all-reduce's buckets after it.
void Trainer::SetUpOptimizer() {
  const Config& config = setup_.config;
  if (config.prune.enabled()) AllocatePruneMasks(backend_, model_->params());
  if (config.parallel.zero >= 1 && setup_.layout.replicas() > 1) {
    auto rest =
        std::make_unique<ZeroSync>(ReplicaContextOf(setup_, *replica_group_, backend_, &on_status_),
                                   ZeroLayersOf(*model_, setup_.tied), config.parallel.zero,
                                   config.parallel.zero3_keep == Zero3Keep::kStep,
                                   config.optimizer.state == OptimizerState::kInt8);
    std::vector<Param*> experts;
    for (Param* p : model_->params()) {
      if (SplitExperts(*p)) experts.push_back(p);
    }
    if (setup_.layout.experts() > 1) {
      ReplicaContext expert_data = ReplicaContextOf(setup_, *replica_group_, backend_, &on_status_);
      expert_data.replicas = expert_data_ranks_.get();  // null: this member alone holds them
      sync_ = std::make_unique<ExpertZeroSync>(std::move(rest), std::move(experts), expert_data,
                                               config.optimizer.state == OptimizerState::kInt8);
    } else {
      sync_ = std::move(rest);
    }
  }
  AdamWConfig hyper;
  hyper.beta1 = static_cast<float>(config.train.beta1);
  hyper.beta2 = static_cast<float>(config.train.beta2);
  hyper.eps = static_cast<float>(config.train.eps);
  hyper.weight_decay = static_cast<float>(config.train.weight_decay);
  optimizer_ = std::make_unique<Optimizer>(backend_, model_->params(), hyper,
                                           config.optimizer.state == OptimizerState::kInt8,
                                           zero() ? sync_->optimizer_shard() : std::nullopt);
  if (zero()) sync_->AttachOptimizer(*optimizer_);
  if (setup_.layout.replicas() > 1 && !zero()) {
    // Experts split over an expert group are summed by the experts' pass instead (ExpertSumsPass).
    std::vector<Param*> replicated;
    for (Param* p : model_->params()) {
      if (!SplitExperts(*p)) replicated.push_back(p);
    }
    sync_ = std::make_unique<AllReduceSync>(
        ReplicaContextOf(setup_, *replica_group_, backend_, &on_status_), replicated);
  }
}

Trainer::Trainer(TrainerSetup setup, Backend& backend)
    : setup_(std::move(setup)),
      backend_(backend),
      scaler_(setup_.config.precision.dtype == DType::kF16
                  ? LossScaler(setup_.config.precision.initial_loss_scale,
                               setup_.config.precision.loss_scale_growth_interval,
                               setup_.config.precision.max_loss_scale)
                  : LossScaler::Disabled()),
      timeout_(setup_.timeout) {
  const Config& config = setup_.config;
  const DType dtype = config.precision.dtype;
  const bool int8_weights = config.model.weights == WeightFormat::kInt8;
  const int world_size = setup_.layout.world_size();
  BATON_CHECK(setup_.comm != nullptr || world_size == 1,
              "a job of {} stage(s) x {} replica(s) x {} tensor rank(s) needs a communicator",
              setup_.layout.stages(), setup_.layout.replicas(), setup_.layout.tensor());
  if (world_size > setup_.layout.stages()) {
    BATON_CHECK(static_cast<int>(setup_.pipeline_group.size()) == setup_.layout.stages() &&
                    static_cast<int>(setup_.replica_group.size()) == setup_.layout.replicas() &&
                    static_cast<int>(setup_.tensor_group.size()) == setup_.layout.tensor(),
                "the setup names a pipeline of {}, {} replicas and {} tensor ranks for {} "
                "stage(s) x {} replica(s) x {} tensor rank(s)",
                setup_.pipeline_group.size(), setup_.replica_group.size(),
                setup_.tensor_group.size(), setup_.layout.stages(), setup_.layout.replicas(),
                setup_.layout.tensor());
    if (setup_.layout.stages() > 1) {
      pipeline_group_ = std::make_unique<Group>(*setup_.comm, setup_.pipeline_group);
      pipeline_ = pipeline_group_.get();
    }
  } else {
    pipeline_ = setup_.comm;
  }
  if (setup_.layout.replicas() > 1) {
    replica_group_ = std::make_unique<Group>(*setup_.comm, setup_.replica_group);
  }
  if (setup_.layout.tensor() > 1) {
    tensor_ranks_ = std::make_unique<Group>(*setup_.comm, setup_.tensor_group);
    tensor_group_ = std::make_unique<CommTensorGroup>(
        *tensor_ranks_, config.parallel.sequence_parallel, setup_.timeout);
  }
  if (setup_.layout.experts() > 1) {
    expert_ranks_ = std::make_unique<Group>(*setup_.comm, setup_.expert_group);
    expert_group_ =
        std::make_unique<CommExpertGroup>(*expert_ranks_, backend_, setup_.stage, setup_.timeout);
    if (setup_.expert_data_group.size() > 1) {
      expert_data_ranks_ = std::make_unique<Group>(*setup_.comm, setup_.expert_data_group);
    }
  }
  BATON_CHECK(setup_.tied_ranks.size() == setup_.tied.size(),
              "the setup names ranks for {} of {} tied groups", setup_.tied_ranks.size(),
              setup_.tied.size());
  for (const std::vector<int>& ranks : setup_.tied_ranks) {
    tied_groups_.push_back(ranks.size() < 2 ? nullptr
                                            : std::make_unique<Group>(*setup_.comm, ranks));
  }
  // Packed documents: every stage attends within documents, so every stage reads its
  // micro-batches' rows (the sampling is deterministic) to compute their segment starts.
  const bool packing = config.data.packing;
  const bool first = HoldsLayer(setup_.chunk_ranges, 0);
  const bool last = HoldsLayer(setup_.chunk_ranges, static_cast<int>(setup_.graph.size()) - 1);
  // The data is read, and its ids checked against model.vocab_size, before the model is
  // allocated: a token file that does not fit the model is named at once, not after (or, for a
  // vocabulary too large for memory, instead of: a bare std::bad_alloc) the model's allocation.
  if ((first || last || packing) && !IsMeta(backend_)) {  // the memory planner reads no data
    data_ = std::make_unique<RunData>(OpenRunData(config));
  }
  const auto build = [&](Backend& on, const StageModel::BuiltHook& built) {
    return std::make_unique<StageModel>(
        setup_.graph, setup_.dims, setup_.chunk_ranges, setup_.stage, setup_.layout.stages(),
        setup_.schedule.layout, on, dtype, dtype, config.train.seed, int8_weights,
        setup_.inference_only, tensor_group_.get(), expert_group_.get(), built);
  };
  // ZeRO-2 and -3 release at the build what this replica's shard does not hold: every gradient
  // (ZeroSync takes back, zeroed, those its shard overlaps) and, at ZeRO-3, each value with no
  // element in the shard, found on a ledger-only build of the stage (the flat space's size
  // decides the shard).
  const bool trains = !int8_weights && !setup_.inference_only;  // evaluation drops the grads
  const int zero = trains && setup_.layout.replicas() > 1 ? config.parallel.zero : 0;
  std::set<std::pair<int, std::string>> values_outside;  // (layer, parameter)
  if (zero == 3) {
    MemoryLedger scratch;
    const std::unique_ptr<Backend> meta = MakeCpuMetaBackend(scratch, 1);
    const std::unique_ptr<StageModel> shape = build(*meta, {});
    const ZeroFlatSpace space(ZeroLayersOf(*shape, setup_.tied));
    const std::vector<int64_t> bounds =
        space.Boundaries(setup_.layout.replicas(), config.optimizer.state == OptimizerState::kInt8);
    const int64_t begin = bounds[static_cast<size_t>(replica_group_->rank())];
    const int64_t end = bounds[static_cast<size_t>(replica_group_->rank() + 1)];
    for (const ZeroFlatSpace::Piece& piece : space.pieces) {
      if (piece.at + piece.param->value.numel() <= begin || piece.at >= end) {
        values_outside.emplace(piece.layer, piece.param->name);
      }
    }
  }
  StageModel::BuiltHook release;
  if (zero >= 2) {
    release = [&values_outside](int index, Layer& layer) {
      for (Param* p : layer.params()) {
        if (SplitExperts(*p)) continue;  // whole on the replicas holding them (ExpertZeroSync)
        // A share group's later copies hold the first one's, released with it.
        if (p->grad.storage()->resident()) p->grad.storage()->Release();
        if (values_outside.count({index, p->name}) == 1) p->value.storage()->Release();
      }
    };
  }
  model_ = build(backend_, release);
  if (config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kSelective) {
    for (auto& [index, layer] : model_->layers()) layer->set_selective_recompute(true);
  }
  for (auto& [index, layer] : model_->layers()) {
    layer->set_flash_attention(config.model.attention == AttentionKind::kFlash);
  }
  if (trains) SetUpOptimizer();  // evaluation keeps no state
  if (sync_ == nullptr) sync_ = std::make_unique<NoSync>();
  state_ = std::make_unique<StateLayout>(backend_, *model_, optimizer_.get(), *sync_,
                                         tensor_group_.get(), setup_.stage, expert_group_.get());
  step_end_ = StepEndPasses();

  lr_.lr = static_cast<float>(config.train.lr);
  lr_.min_lr = static_cast<float>(config.train.min_lr);
  lr_.warmup_steps = config.train.warmup_steps;
  lr_.total_steps = config.train.steps;
  lr_.schedule = config.train.lr_schedule;
  lr_.decay_steps = config.train.decay_steps;

  const int micro_batch_size = MicroBatchSize(config);
  const int64_t seq_len = SequenceLength(config);
  EngineOptions engine_options = EngineOptionsFor(setup_);
  engine_options.before_layer_backward = [this](int index) { sync_->BeforeLayerBackward(index); };
  engine_options.after_layer_gradients = [this, passes = GradientPassesPerStep(setup_)](int index) {
    if (++gradients_done_[index] != passes.at(index)) return;
    const Clock::time_point start = Clock::now();
    if (sync_->LayerGradientsDone(index, step_)) LayerExchanged(start);
  };
  engine_options.before_layer_use = [this](int index, int next) {
    const Clock::time_point start = Clock::now();
    if (sync_->BeforeLayerUse(index, next, step_)) LayerExchanged(start);
  };
  engine_options.after_layer_use = [this](int index) { sync_->AfterLayerUse(index); };
  engine_ = std::make_unique<StageEngine>(backend_, *model_, pipeline_, engine_options);

  BATON_CHECK(
      first == model_->holds_first_layer() && last == model_->holds_last_layer(),
      "stage {}: its chunk ranges and its model disagree on holding the first or last layer",
      setup_.stage);
  for (int k = 0; k < MicroBatchesPerReplica(config); ++k) {
    MicroBatch batch;
    const Shape shape = {micro_batch_size, seq_len};
    if (first) {
      batch.tokens =
          Tensor::Empty(backend_.allocator(), shape, DType::kI32, MemCategory::kActivations);
    }
    if (last) {
      batch.targets =
          Tensor::Empty(backend_.allocator(), shape, DType::kI32, MemCategory::kActivations);
    }
    if (packing) {
      batch.segment_starts =
          Tensor::Empty(backend_.allocator(), shape, DType::kI32, MemCategory::kActivations);
    }
    batches_.push_back(std::move(batch));
  }
}

Trainer::~Trainer() = default;

int Trainer::first_microbatch() const {
  return setup_.replica * MicroBatchesPerReplica(setup_.config);
}

// Copies a micro-batch's host rows into the tensors this rank holds (tokens on the first
// layer's rank, targets on the last's, segment starts on every rank with packed documents,
// which also marks the targets across a document boundary as not counted: data/packing.h).
// Packed rows that leave no target counted (every token the separator) are an error naming
// `rows` (where they come from) and `source`: their mean loss is undefined, and taking it as 0
// trained on nothing at loss 0 and evaluated to perplexity 1. Every rank packs the same rows, so
// every rank stops here together.
void Trainer::CopyIn(MicroBatch& batch, std::vector<int32_t>& tokens, std::vector<int32_t>& targets,
                     const std::function<std::string()>& rows, const std::string& source) {
  const Config& config = setup_.config;
  const int b = MicroBatchSize(config);
  const int t = static_cast<int>(SequenceLength(config));
  if (batch.segment_starts.defined()) {
    std::vector<int32_t> starts(tokens.size());
    const int64_t counted =
        PackRows(tokens.data(), b, t, static_cast<int32_t>(config.data.document_separator),
                 kIgnoreTarget, starts.data(), targets.data());
    BATON_CHECK(counted > 0,
                "{} of {}: all {} x {} tokens are data.document_separator {}, so data.packing "
                "leaves no target to predict and the loss is undefined (is {} the id that ends "
                "documents, and this the data meant?)",
                rows(), source, b, t, config.data.document_separator,
                config.data.document_separator);
    backend_.Copy(Tensor::Wrap(starts.data(), {b, t}, DType::kI32), batch.segment_starts);
  }
  if (batch.tokens.defined()) {
    backend_.Copy(Tensor::Wrap(tokens.data(), {b, t}, DType::kI32), batch.tokens);
  }
  if (batch.targets.defined()) {
    backend_.Copy(Tensor::Wrap(targets.data(), {b, t}, DType::kI32), batch.targets);
  }
}

void Trainer::FillMicroBatches(int64_t step) {
  if (!data_) return;
  const Config& config = setup_.config;
  const int b = MicroBatchSize(config);
  const int t = static_cast<int>(SequenceLength(config));
  std::vector<int32_t> tokens(static_cast<size_t>(b) * t), targets(tokens.size());
  for (int k = 0; k < MicroBatchesPerReplica(config); ++k) {
    // Micro-batch k of this replica is the step's micro-batch first_microbatch() + k.
    FillBatch(data_->train, config.train.seed, step - 1, (first_microbatch() + k) * b, b, t,
              tokens.data(), targets.data());
    CopyIn(
        batches_[static_cast<size_t>(k)], tokens, targets,
        [&] { return fmt::format("step {}: micro-batch {}", step, first_microbatch() + k); },
        data_->train.source());
  }
}

void Trainer::FillEvalMicroBatches(int64_t batch) {
  if (!data_) return;
  const Config& config = setup_.config;
  BATON_CHECK(data_->eval.has_value(), "evaluation needs data.eval_path or data.eval_fraction");
  const int b = MicroBatchSize(config);
  const int t = static_cast<int>(SequenceLength(config));
  std::vector<int32_t> tokens(static_cast<size_t>(b) * t), targets(tokens.size());
  for (int k = 0; k < MicroBatchesPerReplica(config); ++k) {
    const int64_t first_window =
        batch * config.train.batch_size + int64_t{first_microbatch() + k} * b;
    FillEvalWindows(*data_->eval, first_window, b, t, tokens.data(), targets.data());
    CopyIn(
        batches_[static_cast<size_t>(k)], tokens, targets,
        [&] {
          return fmt::format("evaluation: windows {} to {}", first_window, first_window + b - 1);
        },
        data_->eval->source());
  }
}

EvalRecord Trainer::Evaluate() {
  const Clock::time_point start = Clock::now();
  const Config& config = setup_.config;
  BATON_CHECK(setup_.eval_batches > 0,
              "evaluation needs held-out data (data.eval_path or data.eval_fraction)");
  const std::vector<Action>& program =
      setup_.eval_schedule.per_stage.at(static_cast<size_t>(setup_.stage));
  EvalRecord record;
  // Micro-batch mean losses by (batch, micro-batch of the step): this replica's share, then,
  // with replicas, every head's, so that the sum below has the same order on every layout.
  const int m = config.train.micro_batches;
  std::vector<float> losses(static_cast<size_t>(setup_.eval_batches * m), 0.0f);
  for (int64_t batch = 0; batch < setup_.eval_batches; ++batch) {
    FillEvalMicroBatches(batch);
    const std::vector<float> local = engine_->RunForward(program, batches_);
    if (setup_.layout.replicas() > 1 && setup_.tensor != 0) continue;  // tensor rank 0's count
    for (size_t k = 0; k < local.size(); ++k) {
      losses[static_cast<size_t>(batch * m + first_microbatch()) + k] = local[k];
    }
  }
  backend_.Synchronize();
  if (setup_.layout.replicas() > 1) AllReduceOverJob(losses);  // every head gets every replica's
  double sum = 0;
  int64_t count = 0;
  if (model_->holds_last_layer()) {
    for (float loss : losses) {
      sum += loss;
      ++count;
    }
  }
  record.batches = setup_.eval_batches;
  record.tokens = setup_.eval_batches * config.train.batch_size * SequenceLength(config);
  record.loss = count > 0 ? sum / static_cast<double>(count) : 0.0;
  record.seconds = Seconds(Clock::now() - start);
  return record;
}

namespace {
// The step end's time, kept apart from its math: the passes that wait for peers (exchange) and,
// among them, those between a stage's replicas.
struct StepClock {
  Clock::time_point start = Clock::now();
  Clock::time_point step_end_start;
  double exchange_s = 0;
  double replicas_s = 0;
};
}  // namespace

StepRecord Trainer::Step(int64_t step) {
  StepClock clock;
  const Config& config = setup_.config;
  BATON_CHECK(optimizer_ != nullptr, "{}",
              config.model.weights == WeightFormat::kInt8
                  ? kInt8IsForInference
                  : "this trainer was set up to evaluate only (baton eval): it cannot train");
  // ZeRO-2's released gradients come back zeroed at their layer's first backward.
  for (Param* p : model_->params()) {
    if (p->grad.storage()->resident()) backend_.Zero(p->grad);
  }
  step_ = step;
  gradients_done_.clear();
  layer_exchanges_.clear();
  FillMicroBatches(step);
  const Clock::time_point first_action = Clock::now();

  // The mean over all the step's micro-batches, whichever replica runs them.
  const float loss_grad_scale =
      static_cast<float>(scaler_.scale() / static_cast<double>(config.train.micro_batches));
  StepState state;
  state.step = step;
  state.losses = engine_->RunStep(setup_.schedule.per_stage[static_cast<size_t>(setup_.stage)],
                                  batches_, loss_grad_scale);
  for (const auto& [index, layer] : model_->layers()) {
    if (std::optional<ExpertStats> stats = layer->TakeExpertStats()) {
      state.record.experts[layer->name()] = std::move(*stats);
    }
  }

  clock.step_end_start = Clock::now();
  std::vector<std::pair<Clock::time_point, Clock::time_point>> exchanges;  // for the trace
  for (const StepPass& pass : step_end_) {
    const Clock::time_point pass_start = Clock::now();
    (this->*pass.run)(state);
    if (!pass.exchange) continue;
    exchanges.emplace_back(pass_start, Clock::now());
    const double seconds = Seconds(exchanges.back().second - pass_start);
    clock.exchange_s += seconds;
    if (pass.replicas) clock.replicas_s += seconds;
  }
  backend_.Synchronize();

  StepRecord& record = state.record;
  if (!state.losses.empty()) {
    double sum = 0;
    for (float l : state.losses) sum += l;
    record.loss = static_cast<float>(sum / static_cast<double>(state.losses.size()));
  }
  record.step_s = Seconds(Clock::now() - clock.start);
  // Busy time: the forward and backward actions, and the update (the step end but its
  // collectives).
  const double step_end_s = Seconds(Clock::now() - clock.step_end_start);
  // ZeRO-2's and -3's exchanges inside the layers' actions are exchanges with the replicas too.
  double layer_exchanges_s = 0;
  for (const auto& [from, to] : layer_exchanges_) layer_exchanges_s += Seconds(to - from);
  record.compute_s = engine_->last_timings().compute_s - layer_exchanges_s +
                     std::max(0.0, step_end_s - clock.exchange_s);
  record.wait_s = engine_->last_timings().wait_s;
  record.allreduce_s = clock.replicas_s + layer_exchanges_s;
  if (tensor_group_ != nullptr) {
    const CommTensorGroup::Traffic traffic = tensor_group_->TakeTraffic();
    record.tensor_collectives = traffic.collectives;
    record.tensor_gathers = traffic.gathers;
    record.tensor_bytes = traffic.bytes;
    record.tensor_s = traffic.seconds;
  }
  if (expert_group_ != nullptr) {
    const CommExpertGroup::Traffic traffic = expert_group_->TakeTraffic();
    record.alltoall_bytes = traffic.bytes;
    record.alltoall_s = traffic.seconds;
  }
  // The trace: the step start, the engine's spans, the step end with its exchanges inside.
  const Clock::time_point now = Clock::now();
  const double now_us = WallMicros();
  const auto wall_us = [&](Clock::time_point t) {
    return now_us - std::chrono::duration<double, std::micro>(now - t).count();
  };
  record.trace.push_back(
      {TraceSpan::Kind::kStepStart, {}, wall_us(clock.start), wall_us(first_action)});
  const std::vector<TraceSpan>& actions = engine_->last_trace();
  record.trace.insert(record.trace.end(), actions.begin(), actions.end());
  for (const auto& [from, to] : layer_exchanges_) {
    record.trace.push_back({TraceSpan::Kind::kExchange, {}, wall_us(from), wall_us(to)});
  }
  for (const auto& [from, to] : exchanges) {
    record.trace.push_back({TraceSpan::Kind::kExchange, {}, wall_us(from), wall_us(to)});
  }
  record.trace.push_back({TraceSpan::Kind::kOptimizer, {}, wall_us(clock.step_end_start), now_us});
  record.tokens_per_s = static_cast<double>(config.train.batch_size) *
                        static_cast<double>(SequenceLength(config)) / record.step_s;
  const int64_t eval_every = config.train.eval_every;
  if (eval_every > 0 && (step % eval_every == 0 || step == config.train.steps)) {
    record.eval = Evaluate();
  }
  return record;
}

void Trainer::AllReduceOverJob(std::vector<float>& values) {
  Tensor host = Tensor::Wrap(values.data(), {static_cast<int64_t>(values.size())}, DType::kF32);
  if (backend_.device().is_cpu()) {
    setup_.comm->AllReduceSum(host, timeout_);
    return;
  }
  // NCCL reduces device memory.
  Tensor on_device =
      Tensor::Empty(backend_.allocator(), host.shape(), DType::kF32, MemCategory::kComm);
  backend_.Copy(host, on_device);
  setup_.comm->AllReduceSum(on_device, timeout_);
  backend_.Copy(on_device, host);
  backend_.Synchronize();
}

std::vector<std::pair<int, uint64_t>> Trainer::LayerDigests() {
  backend_.Synchronize();
  std::vector<std::pair<int, uint64_t>> digests;
  for (auto& [index, layer] : model_->layers()) {
    Fnv1a64 hash;
    sync_->AcquireLayerValues(index, /*gather=*/true);  // ZeRO-3: the whole values
    for (Param* p : layer->params()) {
      if (p->tied) continue;
      // Experts split over an expert group: the whole, gathered (collective over the group), so
      // that every member, and every number of members, hashes the same bits.
      const bool experts_cut = p->stacked_experts && p->split.cut();
      const std::vector<std::byte> host =
          HostBytes(backend_, experts_cut ? state_->GatherWhole(p->value, p->split) : p->value);
      hash.Update(host.data(), host.size());
    }
    sync_->ReleaseLayerValues(index);
    // A sigmoid_bias router's bias routes the next step as the parameters do: part of the state.
    const Layer::RoutingBias bias = layer->routing_bias();
    if (bias.values.defined()) hash.Update(bias.values.raw(), bias.values.nbytes());
    digests.emplace_back(index, hash.digest());
  }
  return digests;
}

std::map<std::string, uint64_t> Trainer::TiedParamDigests() {
  backend_.Synchronize();
  std::map<std::string, uint64_t> digests;
  for (const TiedGroup& group : setup_.tied) {
    for (auto& [index, layer] : model_->layers()) {
      if (std::find(group.layers.begin(), group.layers.end(), index) == group.layers.end() ||
          digests.count(group.param) == 1) {
        continue;
      }
      sync_->AcquireLayerValues(index, /*gather=*/true);  // ZeRO-3: the whole values
      for (Param* p : layer->params()) {
        if (p->name != group.param) continue;
        const std::vector<std::byte> host = HostBytes(backend_, p->value);
        Fnv1a64 hash;
        hash.Update(host.data(), host.size());
        digests[group.param] = hash.digest();
      }
      sync_->ReleaseLayerValues(index);
    }
  }
  return digests;
}

std::string CombineLayerDigests(std::vector<std::pair<int, uint64_t>> digests) {
  std::sort(digests.begin(), digests.end());
  Fnv1a64 hash;
  for (auto& [index, digest] : digests) hash.UpdateU64(digest);
  return hash.hex();
}

}  // namespace baton
