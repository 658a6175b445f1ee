#include "worker/trainer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "comm/subgroup_communicator.h"
#include "core/error.h"
#include "core/hash.h"
#include "data/tokenizer.h"
#include "model/prune.h"
#include "worker/pruning.h"
#include "worker/stage_tensors.h"

namespace baton {
namespace {
using Clock = std::chrono::steady_clock;

constexpr const char* kInt8IsForInference =
    "model.weights: int8 holds the weights for inference only (baton eval, baton generate); "
    "training and its memory plan need model.weights: dense";

}  // namespace

Trainer::Trainer(TrainerSetup setup, Backend& backend)
    : setup_(std::move(setup)),
      backend_(backend),
      scaler_(setup_.config.precision.dtype == DType::kF16
                  ? LossScaler(setup_.config.precision.initial_loss_scale,
                               setup_.config.precision.loss_scale_growth_interval)
                  : LossScaler::Disabled()),
      timeout_(setup_.timeout) {
  const Config& config = setup_.config;
  const DType dtype = config.precision.dtype;
  const bool int8_weights = config.model.weights == WeightFormat::kInt8;
  const int world_size = setup_.num_ranks * setup_.num_replicas;
  BATON_CHECK(setup_.comm != nullptr || world_size == 1,
              "a job of {} stage(s) x {} replica(s) needs a communicator", setup_.num_ranks,
              setup_.num_replicas);
  if (setup_.num_replicas > 1) {
    std::vector<int> pipeline;
    for (int s = 0; s < setup_.num_ranks; ++s) {
      pipeline.push_back(setup_.replica * setup_.num_ranks + s);
    }
    for (int r = 0; r < setup_.num_replicas; ++r) {
      replica_group_.push_back(r * setup_.num_ranks + setup_.rank);
    }
    if (setup_.num_ranks > 1) {
      pipeline_view_ = std::make_unique<SubgroupCommunicator>(*setup_.comm, pipeline);
      pipeline_ = pipeline_view_.get();
    }
  } else {
    pipeline_ = setup_.comm;
  }
  model_ = std::make_unique<StageModel>(setup_.graph, setup_.dims, setup_.chunk_ranges, setup_.rank,
                                        setup_.num_ranks, backend_, dtype, dtype, config.train.seed,
                                        int8_weights, setup_.inference_only);
  if (config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kSelective) {
    for (auto& [index, layer] : model_->layers()) layer->set_selective_recompute(true);
  }
  for (auto& [index, layer] : model_->layers()) {
    layer->set_flash_attention(config.model.attention == AttentionKind::kFlash);
  }
  AdamWConfig hyper;
  hyper.beta1 = static_cast<float>(config.train.beta1);
  hyper.beta2 = static_cast<float>(config.train.beta2);
  hyper.eps = static_cast<float>(config.train.eps);
  hyper.weight_decay = static_cast<float>(config.train.weight_decay);
  if (!int8_weights && !setup_.inference_only) {  // evaluation keeps no optimizer state
    if (config.prune.enabled()) AllocatePruneMasks(backend_, model_->params());
    std::optional<OptimizerShard> shard;
    if (config.parallel.zero == 1 && setup_.num_replicas > 1) {
      BuildFlatSpace();
      const int64_t begin = std::min(flat_numel_, setup_.replica * shard_size_);
      shard = OptimizerShard{begin, std::min(flat_numel_, begin + shard_size_)};
    }
    optimizer_ = std::make_unique<Optimizer>(
        backend_, model_->params(), hyper, config.optimizer.state == OptimizerState::kInt8, shard);
    if (setup_.num_replicas > 1 && !zero()) BuildGradBuckets();
  }

  lr_.lr = static_cast<float>(config.train.lr);
  lr_.min_lr = static_cast<float>(config.train.min_lr);
  lr_.warmup_steps = config.train.warmup_steps;
  lr_.total_steps = config.train.steps;
  lr_.cosine = config.train.lr_schedule == LrSchedule::kCosine;

  const int micro_batch_size = MicroBatchSize(config);
  const int64_t seq_len = SequenceLength(config);
  EngineOptions options;
  options.num_microbatches = MicroBatchesPerReplica(config);
  options.checkpoint_every = config.parallel.checkpoint.kind == CheckpointPolicy::Kind::kEvery
                                 ? config.parallel.checkpoint.every
                                 : 0;
  options.timeout = timeout_;
  options.activation_shape = {micro_batch_size, seq_len, setup_.dims.width};
  options.activation_dtype = dtype;
  options.complete_sends_before_compute = RendezvousSafeSends(setup_.schedule);
  engine_ = std::make_unique<StageEngine>(backend_, *model_, pipeline_, options);

  const bool first = model_->holds_first_layer();
  const bool last = model_->holds_last_layer();
  if ((first || last) && !IsMeta(backend_)) {  // the memory planner reads no data
    data_ = std::make_unique<RunData>(OpenRunData(config));
  }
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
    batches_.push_back(std::move(batch));
  }
}

Trainer::~Trainer() = default;

int Trainer::first_microbatch() const {
  return setup_.replica * MicroBatchesPerReplica(setup_.config);
}

// Packs every distinct gradient (a shared block's aliases once), in parameter order, into
// buckets of one dtype and at most kGradBucketBytes; a larger gradient spans buckets in pieces.
void Trainer::BuildGradBuckets() {
  std::vector<const void*> seen;
  std::map<DType, int64_t> largest;
  for (Param* p : model_->params()) {
    if (std::find(seen.begin(), seen.end(), p->grad.raw()) != seen.end()) continue;
    seen.push_back(p->grad.raw());
    const DType dtype = p->grad.dtype();
    const int64_t capacity = kGradBucketBytes / static_cast<int64_t>(SizeOf(dtype));
    const Tensor flat = p->grad.View({-1});
    for (int64_t begin = 0; begin < flat.numel();) {
      GradBucket* bucket = nullptr;
      for (GradBucket& b : buckets_) {
        if (b.dtype == dtype && b.numel < capacity) bucket = &b;
      }
      if (bucket == nullptr) {
        buckets_.push_back({dtype, 0, {}});
        bucket = &buckets_.back();
      }
      const int64_t count = std::min(flat.numel() - begin, capacity - bucket->numel);
      bucket->pieces.push_back({flat.Slice(0, begin, begin + count), bucket->numel});
      bucket->numel += count;
      begin += count;
      largest[dtype] = std::max(largest[dtype], bucket->numel);
    }
  }
  for (const auto& [dtype, numel] : largest) {
    bucket_buffers_[dtype] =
        Tensor::Empty(backend_.allocator(), {numel}, dtype, MemCategory::kComm);
  }
}

// ZeRO-1's flat space: the stage's distinct parameters (by storage, in params() order: the
// optimizer's slots), end to end; R shards of S elements; rounds of B elements per member.
void Trainer::BuildFlatSpace() {
  std::vector<const void*> seen;
  for (Param* p : model_->params()) {
    if (std::find(seen.begin(), seen.end(), p->value.raw()) != seen.end()) continue;
    seen.push_back(p->value.raw());
    flat_.push_back({p, flat_numel_});
    flat_numel_ += p->value.numel();
  }
  const int64_t r = setup_.num_replicas;
  shard_size_ = (flat_numel_ + r - 1) / r;
  zero_chunk_ = std::max<int64_t>(1, std::min(shard_size_, kGradBucketBytes / 4 / r));
  const DType dtype = flat_.front().param->value.dtype();
  for (const FlatPiece& piece : flat_) {
    BATON_CHECK(piece.param->value.dtype() == dtype && piece.param->grad.dtype() == DType::kF32,
                "ZeRO-1 needs one parameter dtype and f32 gradients; {} is {}", piece.param->name,
                piece.param->value.ToString());
  }
  Allocator& allocator = backend_.allocator();
  zero_buffer_ = Tensor::Empty(allocator, {r * zero_chunk_}, DType::kF32, MemCategory::kComm);
  zero_received_ =
      Tensor::Empty(allocator, {(r - 1) * zero_chunk_}, DType::kF32, MemCategory::kComm);
  if (dtype != DType::kF32) {
    zero_values_ = Tensor::Empty(allocator, {r * zero_chunk_}, dtype, MemCategory::kComm);
  }
}

template <typename Fn>
void Trainer::ForEachFlatPart(int64_t begin, int64_t end, Fn fn) {
  for (const FlatPiece& piece : flat_) {
    const int64_t numel = piece.param->value.numel();
    const int64_t lo = std::max(begin, piece.at), hi = std::min(end, piece.at + numel);
    if (lo < hi) fn(*piece.param, lo - piece.at, hi - piece.at, lo);
  }
}

std::pair<int64_t, int64_t> Trainer::ZeroChunk(int j, int64_t k) const {
  const int64_t first = j * shard_size_ + k * zero_chunk_;
  const int64_t last = std::min({first + zero_chunk_, (j + 1) * shard_size_, flat_numel_});
  return {first, std::max<int64_t>(0, last - first)};
}

void Trainer::WaitAll(std::vector<std::unique_ptr<Work>>& works, const std::string& what) {
  try {
    for (auto& work : works) work->Wait(timeout_);
  } catch (const Error& e) {
    BATON_FAIL(
        "{} of stage {} with its other replicas failed; a replica of stage {} is dead or "
        "hung: {}",
        what, setup_.rank, setup_.rank, e.what());
  }
  works.clear();
}

void Trainer::ReduceScatterGradients(int64_t step) {
  const int r = setup_.num_replicas, me = setup_.replica;
  const int peer = me == 0 ? WorldRankOfReplica(1) : WorldRankOfReplica(0);
  if (on_status_) on_status_({"ALLREDUCE", -1, peer, Clock::now()});
  const int64_t rounds = (shard_size_ + zero_chunk_ - 1) / zero_chunk_;
  const std::string what = fmt::format("step {}: the data-parallel reduce-scatter", step);
  std::vector<std::unique_ptr<Work>> works;
  for (int64_t k = 0; k < rounds; ++k) {
    std::vector<Tensor> chunks;  // chunk j: the elements replica j owns in this round
    for (int j = 0; j < r; ++j) {
      const auto [first, count] = ZeroChunk(j, k);
      Tensor chunk = zero_buffer_.Slice(0, j * zero_chunk_, j * zero_chunk_ + count);
      ForEachFlatPart(first, first + count, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
        Tensor into = chunk.Slice(0, at - first, at - first + (hi - lo));
        backend_.Copy(FlatSlice(p.grad, lo, hi), into);
      });
      chunks.push_back(chunk);
    }
    const int64_t mine = chunks[static_cast<size_t>(me)].numel();
    std::vector<Tensor> in_order;  // replica order: the terms of my chunk's sum
    for (int i = 0; i < r; ++i) {
      if (i == me) {
        in_order.push_back(chunks[static_cast<size_t>(i)]);
        continue;
      }
      const int64_t slot = i < me ? i : i - 1;
      Tensor theirs = zero_received_.Slice(0, slot * zero_chunk_, slot * zero_chunk_ + mine);
      if (mine > 0) works.push_back(setup_.comm->Irecv(theirs, WorldRankOfReplica(i)));
      in_order.push_back(theirs);
    }
    for (int j = 0; j < r; ++j) {
      if (j != me && chunks[static_cast<size_t>(j)].numel() > 0) {
        works.push_back(setup_.comm->Isend(chunks[static_cast<size_t>(j)], WorldRankOfReplica(j)));
      }
    }
    WaitAll(works, what);
    if (mine == 0) continue;
    // ((x0 + x1) + x2) ...: replica order, accumulated in the first term's buffer (mine only
    // when I am replica 0, so that my own term is intact until its turn).
    Tensor& sum = chunks[static_cast<size_t>(me)];
    Tensor& acc = in_order[0];
    backend_.Add(in_order[0], in_order[1], acc);
    for (int i = 2; i < r; ++i) backend_.Accumulate(in_order[static_cast<size_t>(i)], acc);
    if (me != 0) backend_.Copy(acc, sum);
    const int64_t first = ZeroChunk(me, k).first;
    ForEachFlatPart(first, first + mine, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
      Tensor grad = FlatSlice(p.grad, lo, hi);
      backend_.Copy(sum.Slice(0, at - first, at - first + (hi - lo)), grad);
    });
  }
  if (on_status_) on_status_({"idle", -1, -1, Clock::now()});
}

void Trainer::AllGatherParameters(int64_t step) {
  const int r = setup_.num_replicas, me = setup_.replica;
  Tensor& buffer = zero_values_.defined() ? zero_values_ : zero_buffer_;
  const int64_t rounds = (shard_size_ + zero_chunk_ - 1) / zero_chunk_;
  const std::string what =
      fmt::format("step {}: the data-parallel all-gather of the parameters", step);
  std::vector<std::unique_ptr<Work>> works;
  for (int64_t k = 0; k < rounds; ++k) {
    std::vector<Tensor> chunks;
    for (int j = 0; j < r; ++j) {
      const int64_t count = ZeroChunk(j, k).second;
      chunks.push_back(buffer.Slice(0, j * zero_chunk_, j * zero_chunk_ + count));
    }
    const auto [my_first, mine] = ZeroChunk(me, k);
    ForEachFlatPart(my_first, my_first + mine, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
      Tensor into =
          chunks[static_cast<size_t>(me)].Slice(0, at - my_first, at - my_first + hi - lo);
      backend_.Copy(FlatSlice(p.value, lo, hi), into);
    });
    for (int i = 0; i < r; ++i) {
      if (i != me && chunks[static_cast<size_t>(i)].numel() > 0) {
        works.push_back(setup_.comm->Irecv(chunks[static_cast<size_t>(i)], WorldRankOfReplica(i)));
      }
    }
    for (int j = 0; j < r; ++j) {
      if (j != me && mine > 0) {
        works.push_back(setup_.comm->Isend(chunks[static_cast<size_t>(me)], WorldRankOfReplica(j)));
      }
    }
    WaitAll(works, what);
    for (int i = 0; i < r; ++i) {
      if (i == me) continue;
      const auto [first, count] = ZeroChunk(i, k);
      ForEachFlatPart(first, first + count, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
        Tensor value = FlatSlice(p.value, lo, hi);
        backend_.Copy(chunks[static_cast<size_t>(i)].Slice(0, at - first, at - first + hi - lo),
                      value);
      });
    }
  }
}

std::optional<LayerTensors> Trainer::GatherLayerState(int layer_index) {
  BATON_CHECK(zero(), "GatherLayerState is for ZeRO-1 trainers");
  LayerTensors layer;
  for (auto& [index, l] : model_->layers()) {
    if (index == layer_index) layer = {index, l->name(), ParamTensorsOf(l->params(), nullptr)};
  }
  const int me = setup_.replica;
  const int holder = WorldRankOfReplica(0);
  std::vector<std::unique_ptr<Work>> works;
  std::vector<Tensor> keep;  // temporaries in flight
  for (ParamTensors& t : layer.params) {
    if (t.tied) continue;  // stored with its original
    const auto piece = std::find_if(flat_.begin(), flat_.end(), [&](const FlatPiece& f) {
      return f.param->value.raw() == t.value.raw();
    });
    BATON_CHECK(piece != flat_.end(), "{} is not in the optimizer's flat space", t.name);
    const Optimizer::Slot* own = nullptr;
    for (const Optimizer::Slot& slot : optimizer_->slots()) {
      if (slot.param == piece->param) own = &slot;
    }
    const bool master = piece->param->value.dtype() != DType::kF32;
    if (me == 0) {
      Allocator& a = backend_.allocator();
      t.adam_m = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
      t.adam_v = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
      if (master) {
        t.master = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
      }
    }
    const int64_t numel = t.value.numel();
    for (int i = 0; i < setup_.num_replicas; ++i) {
      // Replica i's part of this parameter: its shard's overlap, the elements its slot holds.
      const int64_t lo = std::clamp(i * shard_size_ - piece->at, int64_t{0}, numel);
      const int64_t hi = std::clamp((i + 1) * shard_size_ - piece->at, int64_t{0}, numel);
      if (lo >= hi || (i != me && me != 0)) continue;
      std::vector<std::pair<Tensor, Tensor>> parts = {{t.adam_m, own ? own->m : Tensor()},
                                                      {t.adam_v, own ? own->v : Tensor()}};
      if (master) parts.push_back({t.master, own ? own->master : Tensor()});
      for (auto& [full, shard] : parts) {
        if (i == me && me == 0) {
          Tensor into = FlatSlice(full, lo, hi);
          backend_.Copy(shard.View({-1}), into);
        } else if (me == 0) {
          Tensor into = FlatSlice(full, lo, hi);
          keep.push_back(into);
          works.push_back(setup_.comm->Irecv(into, WorldRankOfReplica(i)));
        } else {
          const Tensor flat = shard.View({-1});
          keep.push_back(flat);
          works.push_back(setup_.comm->Isend(flat, holder));
        }
      }
    }
  }
  WaitAll(works, fmt::format("gathering layer {}'s optimizer state for a checkpoint", layer_index));
  if (me != 0) return std::nullopt;
  return layer;
}

LayerTensors Trainer::LayerStateToLoad(int layer_index) {
  BATON_CHECK(zero(), "LayerStateToLoad is for ZeRO-1 trainers");
  LayerTensors layer;
  for (auto& [index, l] : model_->layers()) {
    if (index == layer_index) layer = {index, l->name(), ParamTensorsOf(l->params(), nullptr)};
  }
  Allocator& a = backend_.allocator();
  for (ParamTensors& t : layer.params) {
    t.adam_m = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
    t.adam_v = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
    if (t.value.dtype() != DType::kF32) {
      t.master = Tensor::Empty(a, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
    }
  }
  return layer;
}

void Trainer::KeepOwnState(const LayerTensors& loaded) {
  for (const ParamTensors& t : loaded.params) {
    for (Optimizer::Slot& slot : optimizer_->slots()) {
      if (slot.param->value.raw() != t.value.raw()) continue;
      // The slot's state as flat views (a slot covering its whole parameter has its shape).
      Tensor m = slot.m.View({-1}), v = slot.v.View({-1});
      backend_.Copy(FlatSlice(t.adam_m, slot.begin, slot.end), m);
      backend_.Copy(FlatSlice(t.adam_v, slot.begin, slot.end), v);
      if (slot.master.defined()) {
        Tensor master = slot.master.View({-1});
        backend_.Copy(FlatSlice(t.master, slot.begin, slot.end), master);
      }
    }
  }
}

void Trainer::ResetMastersFromValues() {
  if (optimizer_ == nullptr) return;
  for (Optimizer::Slot& slot : optimizer_->slots()) {
    if (slot.master.defined()) {
      Tensor master = slot.master.View({-1});
      backend_.Copy(FlatSlice(slot.param->value, slot.begin, slot.end), master);
    }
  }
}

void Trainer::AllReduceReplicaGradients(int64_t step) {
  const int me = setup_.replica * setup_.num_ranks + setup_.rank;
  const int peer = replica_group_[0] != me ? replica_group_[0] : replica_group_[1];
  if (on_status_) on_status_({"ALLREDUCE", -1, peer, Clock::now()});
  for (size_t i = 0; i < buckets_.size(); ++i) {
    GradBucket& bucket = buckets_[i];
    Tensor flat = bucket_buffers_.at(bucket.dtype).Slice(0, 0, bucket.numel);
    for (GradBucket::Piece& piece : bucket.pieces) {
      Tensor into = flat.Slice(0, piece.at, piece.at + piece.grad.numel());
      backend_.Copy(piece.grad, into);
    }
    try {
      setup_.comm->AllReduceSum(flat, replica_group_, timeout_);
    } catch (const Error& e) {
      BATON_FAIL(
          "step {}: the data-parallel all-reduce of stage {}'s gradients (bucket {} of {}) with "
          "its other replicas failed; a replica of stage {} is dead or hung: {}",
          step, setup_.rank, i + 1, buckets_.size(), setup_.rank, e.what());
    }
    for (GradBucket::Piece& piece : bucket.pieces) {
      backend_.Copy(flat.Slice(0, piece.at, piece.at + piece.grad.numel()), piece.grad);
    }
  }
  if (on_status_) on_status_({"idle", -1, -1, Clock::now()});
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

// Copies a micro-batch's host rows into the tensors this rank holds (tokens on the first
// layer's rank, targets on the last's).
void Trainer::CopyIn(MicroBatch& batch, std::vector<int32_t>& tokens,
                     std::vector<int32_t>& targets) {
  const int b = MicroBatchSize(setup_.config);
  const int t = static_cast<int>(SequenceLength(setup_.config));
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
    CopyIn(batches_[static_cast<size_t>(k)], tokens, targets);
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
    CopyIn(batches_[static_cast<size_t>(k)], tokens, targets);
  }
}

EvalRecord Trainer::Evaluate() {
  const Clock::time_point start = Clock::now();
  const Config& config = setup_.config;
  BATON_CHECK(setup_.eval_batches > 0,
              "evaluation needs held-out data (data.eval_path or data.eval_fraction)");
  const std::vector<Action>& program =
      setup_.eval_schedule.per_rank.at(static_cast<size_t>(setup_.rank));
  EvalRecord record;
  // Micro-batch mean losses by (batch, micro-batch of the step): this replica's share, then,
  // with replicas, every head's, so that the sum below has the same order on every layout.
  const int m = config.train.micro_batches;
  std::vector<float> losses(static_cast<size_t>(setup_.eval_batches * m), 0.0f);
  for (int64_t batch = 0; batch < setup_.eval_batches; ++batch) {
    FillEvalMicroBatches(batch);
    const std::vector<float> local = engine_->RunForward(program, batches_);
    for (size_t k = 0; k < local.size(); ++k) {
      losses[static_cast<size_t>(batch * m + first_microbatch()) + k] = local[k];
    }
  }
  backend_.Synchronize();
  if (setup_.num_replicas > 1) AllReduceOverJob(losses);
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
  record.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return record;
}

StepRecord Trainer::Step(int64_t step) {
  const Clock::time_point start = Clock::now();
  const Config& config = setup_.config;
  BATON_CHECK(optimizer_ != nullptr, "{}",
              config.model.weights == WeightFormat::kInt8
                  ? kInt8IsForInference
                  : "this trainer was set up to evaluate only (baton eval): it cannot train");
  for (Param* p : model_->params()) backend_.Zero(p->grad);
  FillMicroBatches(step);

  // The mean over all the step's micro-batches, whichever replica runs them.
  const float loss_grad_scale =
      static_cast<float>(scaler_.scale() / static_cast<double>(config.train.micro_batches));
  std::vector<float> losses = engine_->RunStep(
      setup_.schedule.per_rank[static_cast<size_t>(setup_.rank)], batches_, loss_grad_scale);

  const auto step_end_start = Clock::now();
  double allreduce_s = 0;
  if (zero()) {
    // The tied sums first: after the reduce-scatter a replica holds only its shard's sums.
    CombineTiedGradients();
    const auto start_reduce = Clock::now();
    ReduceScatterGradients(step);
    allreduce_s = std::chrono::duration<double>(Clock::now() - start_reduce).count();
  } else {
    if (setup_.num_replicas > 1) {
      AllReduceReplicaGradients(step);
      allreduce_s = std::chrono::duration<double>(Clock::now() - step_end_start).count();
    }
    if (config.prune.enabled()) MaskGradients(backend_, model_->params());
    CombineTiedGradients();
  }
  const bool loss_finite =
      std::all_of(losses.begin(), losses.end(), [](float l) { return std::isfinite(l); });
  const auto [norm, overflow, stop, all_losses_finite] = ReduceStepEnd(loss_finite, losses);
  // fp32 and bf16 have no loss scale to back off: a non-finite loss or gradient cannot recover,
  // so every rank stops at this step (they all see the same reduced flags) rather than train on
  // NaNs. fp16 skips the step and lowers the scale instead (below).
  if (!scaler_.enabled() && (!all_losses_finite || !std::isfinite(norm))) {
    const std::string what = all_losses_finite
                                 ? fmt::format("the gradient norm is not finite ({})", norm)
                                 : std::string("the loss is not finite (NaN or Inf)");
    BATON_FAIL(
        "step {}: {}; training stops here. Likely causes: a learning rate too high for this model "
        "(train.lr {}, warmup {} steps), no gradient clipping (train.grad_clip {}), or bad input "
        "data",
        step, what, config.train.lr, config.train.warmup_steps, config.train.grad_clip);
  }

  StepRecord record;
  double record_allgather_s = 0;
  record.step = step;
  record.loss_scale = scaler_.scale();
  record.lr = lr_.At(step);
  record.grad_norm = norm;
  record.stop = stop;
  record.skipped = scaler_.Update(overflow);
  if (!record.skipped) {
    const double clip = config.train.grad_clip;
    const double coef = clip > 0 ? std::min(1.0, clip / (norm + 1e-6)) : 1.0;
    optimizer_->Step(record.lr, step - scaler_.skipped_steps(),
                     static_cast<float>(coef / record.loss_scale));
    if (zero()) {
      const auto start_gather = Clock::now();
      AllGatherParameters(step);
      record_allgather_s = std::chrono::duration<double>(Clock::now() - start_gather).count();
    }
  } else {
    spdlog::warn("step {}: gradient overflow at loss scale {}; step skipped, scale now {}", step,
                 record.loss_scale, scaler_.scale());
  }
  if (config.prune.enabled()) {
    MaskWeights(backend_, *optimizer_);
    if (step == config.prune.at_step) {
      const PruneCount count = PruneByMagnitude(backend_, *optimizer_, config.prune);
      if (!IsMeta(backend_)) {  // the planner's run prunes nothing
        spdlog::info("step {}: pruned {} of the {} weights of {} matrices ({}), masked from now on",
                     step, count.pruned, count.total, count.matrices, Name(config.prune.pattern));
      }
    }
  }
  backend_.Synchronize();
  if (!losses.empty()) {
    double sum = 0;
    for (float l : losses) sum += l;
    record.loss = static_cast<float>(sum / static_cast<double>(losses.size()));
  }
  record.step_s = std::chrono::duration<double>(Clock::now() - start).count();
  record.compute_s = engine_->last_timings().compute_s;
  record.wait_s = engine_->last_timings().wait_s;
  record.allreduce_s = allreduce_s + record_allgather_s;
  record.trace = engine_->last_trace();
  const double end_us =
      std::chrono::duration<double, std::micro>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  const double optimizer_us =
      std::chrono::duration<double, std::micro>(Clock::now() - step_end_start).count();
  record.trace.push_back({TraceSpan::Kind::kOptimizer, {}, end_us - optimizer_us, end_us});
  record.tokens_per_s = static_cast<double>(config.train.batch_size) *
                        static_cast<double>(SequenceLength(config)) / record.step_s;
  const int64_t eval_every = config.train.eval_every;
  if (eval_every > 0 && (step % eval_every == 0 || step == config.train.steps)) {
    record.eval = Evaluate();
  }
  return record;
}

void Trainer::CombineTiedGradients() {
  for (const TiedGroup& group : setup_.tied) {
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
    if (group.ranks.size() > 1) {
      BATON_CHECK(setup_.comm != nullptr, "tied group {} spans ranks but there is no transport",
                  group.param);
      pipeline_->AllReduceSum(copies[0]->grad, group.ranks, timeout_);
    }
  }
}

Trainer::StepEnd Trainer::ReduceStepEnd(bool local_loss_finite, std::vector<float>& losses) {
  const int num_layers = model_->num_layers_in_graph();
  const bool replicated = setup_.num_replicas > 1;
  // Slot i: layer i's sum of squares (f32; written by the one rank holding it, zero elsewhere, so
  // the all-reduce sum is exact; with replicas, whose gradients are equal by now, by replica 0's
  // rank); then this rank's overflow flag, its stop request and whether its loss was not finite;
  // then, with replicas, the loss of each of the step's micro-batches (written by the head of
  // the replica that ran it).
  const size_t overflow_slot = static_cast<size_t>(num_layers);
  const size_t stop_slot = overflow_slot + 1;
  const size_t bad_loss_slot = overflow_slot + 2;
  const size_t loss_slots = bad_loss_slot + 1;
  std::vector<float> partial(
      loss_slots + (replicated ? static_cast<size_t>(setup_.config.train.micro_batches) : 0), 0.0f);
  if (stop_flag_ != nullptr && stop_flag_->load()) partial[stop_slot] = 1.0f;
  if (!local_loss_finite) partial[bad_loss_slot] = 1.0f;
  if (replicated) {
    for (size_t k = 0; k < losses.size(); ++k) {
      partial[loss_slots + static_cast<size_t>(first_microbatch()) + k] = losses[k];
    }
  }
  // ZeRO-1: each replica holds the reduced gradients of its shard only: its part of each
  // layer's sum, added across the replicas by the all-reduce below.
  const int64_t own_begin = setup_.replica * shard_size_, own_end = own_begin + shard_size_;
  for (auto& [index, layer] : model_->layers()) {
    double sum = 0;
    bool finite = true;
    for (Param* p : layer->params()) {
      if (p->tied) continue;
      if (zero()) {
        for (const FlatPiece& piece : flat_) {
          if (piece.param->value.raw() != p->value.raw()) continue;
          const int64_t lo = std::max(own_begin, piece.at) - piece.at;
          const int64_t hi = std::min(own_end, piece.at + p->value.numel()) - piece.at;
          if (lo >= hi) continue;
          const Tensor grad = FlatSlice(piece.param->grad, lo, hi);
          sum += backend_.SumOfSquares(grad);
          if (scaler_.enabled()) finite = finite && backend_.AllFinite(grad);
        }
        continue;
      }
      sum += backend_.SumOfSquares(p->grad);
      if (scaler_.enabled()) finite = finite && backend_.AllFinite(p->grad);
    }
    if (setup_.replica == 0 || zero()) {
      partial[static_cast<size_t>(index)] = static_cast<float>(sum);
    }
    if (!finite) partial[overflow_slot] = 1.0f;
  }
  if (setup_.num_ranks * setup_.num_replicas > 1) AllReduceOverJob(partial);
  if (replicated && model_->holds_last_layer()) {
    losses.assign(partial.begin() + static_cast<std::ptrdiff_t>(loss_slots), partial.end());
  }
  double total = 0;
  for (int i = 0; i < num_layers; ++i) total += partial[static_cast<size_t>(i)];
  const double norm = std::sqrt(total) / scaler_.scale();
  return {norm, partial[overflow_slot] > 0.0f || !std::isfinite(norm), partial[stop_slot] > 0.0f,
          partial[bad_loss_slot] == 0.0f};
}

std::vector<std::pair<int, uint64_t>> Trainer::LayerDigests() {
  backend_.Synchronize();
  std::vector<std::pair<int, uint64_t>> digests;
  for (auto& [index, layer] : model_->layers()) {
    Fnv1a64 hash;
    for (Param* p : layer->params()) {
      if (p->tied) continue;
      std::vector<char> host(p->value.nbytes());
      Tensor view = Tensor::Wrap(host.data(), p->value.shape(), p->value.dtype());
      backend_.Copy(p->value, view);
      hash.Update(host.data(), host.size());
    }
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
      for (Param* p : layer->params()) {
        if (p->name != group.param) continue;
        std::vector<char> host(p->value.nbytes());
        Tensor view = Tensor::Wrap(host.data(), p->value.shape(), p->value.dtype());
        backend_.Copy(p->value, view);
        Fnv1a64 hash;
        hash.Update(host.data(), host.size());
        digests[group.param] = hash.digest();
      }
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
