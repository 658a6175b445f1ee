#include "worker/gradient_sync.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "core/units.h"
#include "kernels/quantize.h"
#include "model/init.h"
#include "worker/stage_tensors.h"

namespace baton {
void ReplicaContext::Report(const char* action, int peer, int64_t bytes) const {
  if (on_status != nullptr && *on_status) (*on_status)({action, -1, peer, bytes, Clock::now()});
}

int ReplicaContext::another_replica() const { return replicas->WorldRank(replica() == 0 ? 1 : 0); }

void ReplicaContext::Wait(std::vector<std::unique_ptr<Work>>& works, const std::string& what,
                          const char* peers) const {
  try {
    for (auto& work : works) work->Wait(timeout);
  } catch (const Error& e) {
    BATON_FAIL("{} of stage {} with {} failed; a replica of stage {} is dead or hung: {}", what,
               stage, peers, stage, e.what());
  }
  works.clear();
}

AllReduceSync::AllReduceSync(ReplicaContext context, const std::vector<Param*>& params)
    : context_(std::move(context)) {
  std::vector<const void*> seen;
  std::map<DType, int64_t> largest;
  for (Param* p : params) {
    if (std::find(seen.begin(), seen.end(), p->grad.raw()) != seen.end()) continue;
    seen.push_back(p->grad.raw());
    const DType dtype = p->grad.dtype();
    const int64_t capacity = kGradBucketBytes / static_cast<int64_t>(SizeOf(dtype));
    const Tensor flat = p->grad.View({-1});
    for (int64_t begin = 0; begin < flat.numel();) {
      Bucket* bucket = nullptr;
      for (Bucket& b : buckets_) {
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
    buffers_[dtype] =
        Tensor::Empty(context_.backend->allocator(), {numel}, dtype, MemCategory::kComm);
  }
}

void AllReduceSync::Reduce(int64_t step) {
  Backend& backend = *context_.backend;
  int64_t bytes = 0;
  for (const Bucket& bucket : buckets_) {
    bytes += bucket.numel * static_cast<int64_t>(SizeOf(bucket.dtype));
  }
  context_.Report("ALLREDUCE", context_.another_replica(), bytes);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& bucket = buckets_[i];
    Tensor flat = buffers_.at(bucket.dtype).Slice(0, 0, bucket.numel);
    for (Bucket::Piece& piece : bucket.pieces) {
      Tensor into = flat.Slice(0, piece.at, piece.at + piece.grad.numel());
      backend.Copy(piece.grad, into);
    }
    try {
      context_.replicas->AllReduceSum(flat, context_.timeout);
    } catch (const Error& e) {
      BATON_FAIL(
          "step {}: the data-parallel all-reduce of stage {}'s gradients (bucket {} of {}) with "
          "its other replicas failed; a replica of stage {} is dead or hung: {}",
          step, context_.stage, i + 1, buckets_.size(), context_.stage, e.what());
    }
    for (Bucket::Piece& piece : bucket.pieces) {
      backend.Copy(flat.Slice(0, piece.at, piece.at + piece.grad.numel()), piece.grad);
    }
  }
  context_.Report("idle", -1);
}

ZeroFlatSpace::ZeroFlatSpace(const std::vector<ZeroLayer>& layers) {
  std::vector<const Storage*> seen;
  for (const ZeroLayer& layer : layers) {
    const int64_t first = numel;
    for (Param* p : layer.params) {
      const Storage* storage = p->value.storage();
      if (std::find(seen.begin(), seen.end(), storage) != seen.end()) continue;
      seen.push_back(storage);
      pieces.push_back({p, numel, layer.index});
      numel += p->value.numel();
    }
    layer_spans[layer.index] = {first, numel};
  }
}

std::vector<int64_t> ZeroFlatSpace::Boundaries(int replicas, bool block_aligned) const {
  const int64_t size = (numel + replicas - 1) / replicas;
  std::vector<int64_t> b = {0};
  for (int r = 1; r < replicas; ++r) {
    int64_t at = std::min(numel, r * size);
    for (const Piece& piece : pieces) {
      const int64_t n = piece.param->value.numel();
      if (!block_aligned || n < kMinQuantizedElements || at <= piece.at || at >= piece.at + n) {
        continue;
      }
      at = piece.at + std::min(n, (at - piece.at + kQuantBlock - 1) / kQuantBlock * kQuantBlock);
    }
    b.push_back(std::max(b.back(), at));
  }
  b.push_back(numel);
  return b;
}

ZeroSync::ZeroSync(ReplicaContext context, const std::vector<ZeroLayer>& layers, int level,
                   bool keep_for_step, bool quantized_state)
    : context_(std::move(context)),
      level_(level),
      keep_for_step_(keep_for_step),
      quantized_state_(quantized_state) {
  BATON_CHECK(level >= 1 && level <= 3, "ZeRO level {} is not 1, 2 or 3", level);
  const ZeroFlatSpace space(layers);
  flat_ = space.pieces;
  flat_numel_ = space.numel;
  for (const ZeroLayer& layer : layers) {
    LayerGrads& grads = layers_[layer.index];
    grads.final_at_backward = layer.final_at_backward;
    const auto [first, end] = space.layer_spans.at(layer.index);
    grads.span = {first, end};
  }
  BATON_CHECK(!flat_.empty(), "ZeRO needs parameters to shard");
  const int64_t r = context_.num_replicas();
  boundaries_ = space.Boundaries(static_cast<int>(r), quantized_state);
  int64_t largest = 0;
  for (int64_t j = 0; j < r; ++j) {
    largest = std::max(
        largest, boundaries_[static_cast<size_t>(j + 1)] - boundaries_[static_cast<size_t>(j)]);
  }
  chunk_ = std::max<int64_t>(1, std::min(largest, kGradBucketBytes / 4 / r));
  const DType dtype = flat_.front().param->value.dtype();
  for (const FlatPiece& piece : flat_) {
    BATON_CHECK(piece.param->value.dtype() == dtype && piece.param->grad.dtype() == DType::kF32,
                "ZeRO needs one parameter dtype and f32 gradients; {} is {}", piece.param->name,
                piece.param->value.ToString());
  }
  Allocator& allocator = context_.backend->allocator();
  buffer_ = Tensor::Empty(allocator, {r * chunk_}, DType::kF32, MemCategory::kComm);
  received_ = Tensor::Empty(allocator, {(r - 1) * chunk_}, DType::kF32, MemCategory::kComm);
  // ZeRO-3 posts a layer's gather while a reduce-scatter round may be in flight in buffer_.
  if (dtype != DType::kF32 || level_ == 3) {
    values_buffer_ = Tensor::Empty(allocator, {r * chunk_}, dtype, MemCategory::kComm);
  }
  if (level_ < 2) return;
  const auto same = [](const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); };
  std::vector<Tensor> kept;  // gradients holding some of this replica's shard
  ForEachFlatPart(own_begin(), own_end(), [&](Param& p, int64_t, int64_t, int64_t) {
    kept.push_back(p.grad);
    if (p.grad.storage()->resident()) return;  // the model did not release it
    p.grad.storage()->Restore();
    context_.backend->Zero(p.grad);
  });
  for (const ZeroLayer& layer : layers) {
    LayerGrads& grads = layers_.at(layer.index);
    for (Param* p : layer.params) {
      const auto is_p = [&](const Tensor& g) { return same(g, p->grad); };
      if (std::none_of(kept.begin(), kept.end(), is_p) &&
          std::none_of(grads.released.begin(), grads.released.end(), is_p)) {
        grads.released.push_back(p->grad);
      }
    }
    Release(grads.released);
    if (grads.final_at_backward || grads.span.begin == grads.span.end) continue;
    if (!at_step_end_.empty() && at_step_end_.back().end == grads.span.begin) {
      at_step_end_.back().end = grads.span.end;  // one span for adjacent layers
    } else {
      at_step_end_.push_back(grads.span);
    }
  }
  if (level_ == 3) SetUpValues(layers);
}

std::optional<std::vector<float>> ZeroSync::GatherWholeValues(const Param& p,
                                                              const Optimizer::Slot* slot) {
  Backend& backend = *context_.backend;
  // Every element from the one replica that steps it, zeros from the others: x + 0 is x.
  Tensor whole =
      Tensor::Empty(backend.allocator(), {p.value.numel()}, DType::kF32, MemCategory::kWorkspace);
  backend.Zero(whole);
  if (slot != nullptr) {
    Tensor into = whole.Slice(0, slot->begin, slot->end);
    const Tensor from = slot->master.defined()   ? slot->master.View({-1})
                        : slot->values.defined() ? slot->values
                                                 : FlatSlice(p.value, slot->begin, slot->end);
    backend.Copy(from, into);
  }
  try {
    context_.replicas->AllReduceSum(whole, context_.timeout);
  } catch (const Error& e) {
    BATON_FAIL(
        "gathering {}'s values to prune it, stage {} with its other replicas failed; a replica "
        "of stage {} is dead or hung: {}",
        p.name, context_.stage, context_.stage, e.what());
  }
  if (IsMeta(backend)) return std::vector<float>{};
  return HostValues(backend, whole);
}

int64_t ZeroSync::own_begin() const { return boundaries_[static_cast<size_t>(context_.replica())]; }

int64_t ZeroSync::own_end() const {
  return boundaries_[static_cast<size_t>(context_.replica() + 1)];
}

std::optional<OptimizerShard> ZeroSync::optimizer_shard() const {
  return OptimizerShard{own_begin(), own_end(), {}};
}

void ZeroSync::Release(std::vector<Tensor>& tensors) {
  bool synchronized = false;
  for (Tensor& t : tensors) {
    if (!t.storage()->resident()) continue;  // shared with a layer released before
    if (!synchronized) {
      context_.backend->Synchronize();  // the reads out of them are done
      synchronized = true;
    }
    t.storage()->Release();
  }
}

void ZeroSync::BeforeLayerBackward(int index) {
  if (level_ < 2) return;
  for (Tensor& grad : layers_.at(index).released) {
    if (grad.storage()->resident()) continue;  // back already: the step's first was another's
    grad.storage()->Restore();
    context_.backend->Zero(grad);
  }
}

bool ZeroSync::LayerGradientsDone(int index, int64_t step) {
  if (level_ < 2) return false;
  LayerGrads& grads = layers_.at(index);
  if (!grads.final_at_backward) return false;  // at the step end
  // The previous layer's last round first: its buffers are this layer's.
  bool waited = FinishInFlight();
  const Span span = grads.span;
  const std::string what =
      fmt::format("step {}: the data-parallel reduce-scatter of layer {}'s gradients", step, index);
  const int64_t rounds = Rounds(span);
  if (rounds > 1) {
    context_.Report("ALLREDUCE", context_.another_replica(),
                    (span.end - span.begin) * static_cast<int64_t>(sizeof(float)));
    waited = true;
  }
  for (int64_t k = 0; k + 1 < rounds; ++k) {
    Round round = Post(span, k, what);
    Complete(round);
  }
  // The last round goes on behind the backward of the layers before this one.
  if (rounds > 0) in_flight_ = Post(span, rounds - 1, what);
  Release(grads.released);  // packed: Release waits for the copies out of them
  return waited;
}

template <typename Fn>
void ZeroSync::ForEachFlatPart(int64_t begin, int64_t end, Fn fn) const {
  for (const FlatPiece& piece : flat_) {
    const int64_t numel = piece.param->value.numel();
    const int64_t lo = std::max(begin, piece.at), hi = std::min(end, piece.at + numel);
    if (lo < hi) fn(*piece.param, lo - piece.at, hi - piece.at, lo);
  }
}

ZeroSync::Span ZeroSync::PartOf(int j, Span span) const {
  return {std::clamp(boundaries_[static_cast<size_t>(j)], span.begin, span.end),
          std::clamp(boundaries_[static_cast<size_t>(j + 1)], span.begin, span.end)};
}

std::pair<int64_t, int64_t> ZeroSync::Chunk(int j, int64_t k, Span span) const {
  const Span part = PartOf(j, span);
  const int64_t first = part.begin + k * chunk_;
  return {first, std::clamp(part.end - first, int64_t{0}, chunk_)};
}

int64_t ZeroSync::Rounds(Span span) const {
  int64_t longest = 0;
  for (int j = 0; j < context_.num_replicas(); ++j) {
    const Span part = PartOf(j, span);
    longest = std::max(longest, part.end - part.begin);
  }
  return (longest + chunk_ - 1) / chunk_;
}

void ZeroSync::WaitAll(std::vector<std::unique_ptr<Work>>& works, const std::string& what) const {
  context_.Wait(works, what);
}

void ZeroSync::Reduce(int64_t step) {
  context_.Report("ALLREDUCE", context_.another_replica(),
                  flat_numel_ * static_cast<int64_t>(sizeof(float)));
  const std::string what = fmt::format("step {}: the data-parallel reduce-scatter", step);
  if (level_ < 2) {
    ReduceScatter({0, flat_numel_}, what);
  } else {
    FinishInFlight();
    for (const Span& span : at_step_end_) ReduceScatter(span, what);
    for (auto& [index, grads] : layers_) {
      if (!grads.final_at_backward) Release(grads.released);
    }
  }
  context_.Report("idle", -1);
}

void ZeroSync::ReduceScatter(Span span, const std::string& what) {
  for (int64_t k = 0; k < Rounds(span); ++k) {
    Round round = Post(span, k, what);
    Complete(round);
  }
}

std::vector<Tensor> ZeroSync::RoundChunks(const Tensor& buffer, Span span, int64_t k) const {
  std::vector<Tensor> chunks;  // chunk j: the elements replica j owns in round k
  for (int j = 0; j < context_.num_replicas(); ++j) {
    const int64_t count = Chunk(j, k, span).second;
    chunks.push_back(buffer.Slice(0, j * chunk_, j * chunk_ + count));
  }
  return chunks;
}

Tensor ZeroSync::Received(int i, int64_t count) const {
  const int me = context_.replica();
  const int64_t slot = i < me ? i : i - 1;
  return received_.Slice(0, slot * chunk_, slot * chunk_ + count);
}

ZeroSync::Round ZeroSync::Post(Span span, int64_t k, const std::string& what) {
  Backend& backend = *context_.backend;
  const int r = context_.num_replicas(), me = context_.replica();
  Round round{span, k, what, {}};
  std::vector<Tensor> chunks = RoundChunks(buffer_, span, k);
  for (int j = 0; j < r; ++j) {
    const int64_t first = Chunk(j, k, span).first;
    Tensor& chunk = chunks[static_cast<size_t>(j)];
    ForEachFlatPart(first, first + chunk.numel(),
                    [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
                      Tensor into = chunk.Slice(0, at - first, at - first + (hi - lo));
                      backend.Copy(FlatSlice(p.grad, lo, hi), into);
                    });
  }
  const int64_t mine = chunks[static_cast<size_t>(me)].numel();
  for (int i = 0; i < r; ++i) {
    if (i == me || mine == 0) continue;
    Tensor theirs = Received(i, mine);
    round.works.push_back(context_.replicas->Irecv(theirs, i));
  }
  for (int j = 0; j < r; ++j) {
    if (j != me && chunks[static_cast<size_t>(j)].numel() > 0) {
      round.works.push_back(context_.replicas->Isend(chunks[static_cast<size_t>(j)], j));
    }
  }
  return round;
}

void ZeroSync::Complete(Round& round) {
  Backend& backend = *context_.backend;
  const int r = context_.num_replicas(), me = context_.replica();
  WaitAll(round.works, round.what);
  const auto [first, mine] = Chunk(me, round.k, round.span);
  if (mine == 0) return;
  Tensor sum = RoundChunks(buffer_, round.span, round.k)[static_cast<size_t>(me)];
  std::vector<Tensor> in_order;  // replica order: the terms of my chunk's sum
  for (int i = 0; i < r; ++i) in_order.push_back(i == me ? sum : Received(i, mine));
  // ((x0 + x1) + x2) ...: replica order, accumulated in the first term's buffer (mine only
  // when I am replica 0, so that my own term is intact until its turn).
  Tensor& acc = in_order[0];
  backend.Add(in_order[0], in_order[1], acc);
  for (int i = 2; i < r; ++i) backend.Accumulate(in_order[static_cast<size_t>(i)], acc);
  if (me != 0) backend.Copy(acc, sum);
  ForEachFlatPart(first, first + mine, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
    Tensor grad = FlatSlice(p.grad, lo, hi);
    backend.Copy(sum.Slice(0, at - first, at - first + (hi - lo)), grad);
  });
}

bool ZeroSync::FinishInFlight() {
  if (!in_flight_) return false;
  context_.Report(
      "ALLREDUCE", context_.another_replica(),
      (in_flight_->span.end - in_flight_->span.begin) * static_cast<int64_t>(sizeof(float)));
  Round round = std::move(*in_flight_);
  in_flight_.reset();
  Complete(round);
  return true;
}

void ZeroSync::AfterUpdate(int64_t step) {
  BATON_CHECK(!prefetch_, "step {}: layer {}'s gather is still in flight at the step end", step,
              prefetch_->index);
  if (level_ < 3) {
    Gather({0, flat_numel_},
           fmt::format("step {}: the data-parallel all-gather of the parameters", step));
    return;
  }
  // ZeRO-3: the updated shard is the parameters' state; each layer's next use gathers it.
  for (auto& [index, values] : values_) Release(values.released);
  fresh_.clear();
}

Tensor& ZeroSync::GatherBuffer() {
  // In buffer_ (f32 values below ZeRO-3), the reduce-scatter round in flight there goes first
  // (there is none at the step end's all-gather).
  if (!values_buffer_.defined()) FinishInFlight();
  return values_buffer_.defined() ? values_buffer_ : buffer_;
}

void ZeroSync::Gather(Span span, const std::string& what) {
  for (int64_t k = 0; k < Rounds(span); ++k) {
    Round round = PostGather(span, k, what);
    CompleteGather(round);
  }
}

ZeroSync::Round ZeroSync::PostGather(Span span, int64_t k, const std::string& what) {
  Backend& backend = *context_.backend;
  const int r = context_.num_replicas(), me = context_.replica();
  Round round{span, k, what, {}};
  std::vector<Tensor> chunks = RoundChunks(GatherBuffer(), span, k);
  const auto [my_first, mine] = Chunk(me, k, span);
  ForEachFlatPart(my_first, my_first + mine, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
    Tensor into = chunks[static_cast<size_t>(me)].Slice(0, at - my_first, at - my_first + hi - lo);
    backend.Copy(FlatSlice(p.value, lo, hi), into);
  });
  for (int i = 0; i < r; ++i) {
    if (i != me && chunks[static_cast<size_t>(i)].numel() > 0) {
      round.works.push_back(context_.replicas->Irecv(chunks[static_cast<size_t>(i)], i));
    }
  }
  for (int j = 0; j < r; ++j) {
    if (j != me && mine > 0) {
      round.works.push_back(context_.replicas->Isend(chunks[static_cast<size_t>(me)], j));
    }
  }
  return round;
}

void ZeroSync::CompleteGather(Round& round) {
  Backend& backend = *context_.backend;
  const int r = context_.num_replicas(), me = context_.replica();
  WaitAll(round.works, round.what);
  std::vector<Tensor> chunks = RoundChunks(GatherBuffer(), round.span, round.k);
  for (int i = 0; i < r; ++i) {
    if (i == me) continue;
    const auto [first, count] = Chunk(i, round.k, round.span);
    ForEachFlatPart(first, first + count, [&](Param& p, int64_t lo, int64_t hi, int64_t at) {
      Tensor value = FlatSlice(p.value, lo, hi);
      backend.Copy(chunks[static_cast<size_t>(i)].Slice(0, at - first, at - first + hi - lo),
                   value);
    });
  }
}

std::vector<Tensor> ZeroSync::ReducedGradient(Param& p) const {
  std::vector<Tensor> parts;
  const int64_t begin = own_begin(), end = own_end();
  for (const FlatPiece& piece : flat_) {
    if (piece.param->value.storage() != p.value.storage()) continue;
    const int64_t lo = std::max(begin, piece.at) - piece.at;
    const int64_t hi = std::min(end, piece.at + p.value.numel()) - piece.at;
    if (lo < hi) parts.push_back(FlatSlice(piece.param->grad, lo, hi));
  }
  return parts;
}

std::optional<LayerTensors> ZeroSync::GatherLayerState(LayerTensors layer,
                                                       const Optimizer& optimizer) {
  Backend& backend = *context_.backend;
  const int me = context_.replica();
  const int holder = 0;  // replica 0 writes the checkpoint
  std::vector<std::unique_ptr<Work>> works;
  std::vector<Tensor> keep;  // temporaries in flight
  for (ParamTensors& t : layer.params) {
    if (t.tied) continue;  // stored with its original
    const auto piece = std::find_if(flat_.begin(), flat_.end(), [&](const FlatPiece& f) {
      return f.param->value.storage() == t.value.storage();
    });
    BATON_CHECK(piece != flat_.end(), "{} is not in the optimizer's flat space", t.name);
    const Optimizer::Slot* own = nullptr;
    for (const Optimizer::Slot& slot : optimizer.slots()) {
      if (slot.param == piece->param) own = &slot;
    }
    const int64_t numel = t.value.numel();
    // 8-bit moments: codes, and a maximum per block (a shard holds whole blocks).
    const bool quantized = quantized_state_ && QuantizedState(t.value.shape(), t.split);
    if (me == 0) AllocateWholeState(t, backend.allocator(), quantized);
    for (int i = 0; i < context_.num_replicas(); ++i) {
      // Replica i's part of this parameter: its shard's overlap, the elements its slot holds.
      const int64_t lo =
          std::clamp(boundaries_[static_cast<size_t>(i)] - piece->at, int64_t{0}, numel);
      const int64_t hi =
          std::clamp(boundaries_[static_cast<size_t>(i + 1)] - piece->at, int64_t{0}, numel);
      if (lo < hi) {
        MoveStateRun(backend, context_.replicas, t, own, {lo, hi, i, holder, quantized}, keep,
                     works);
      }
    }
  }
  WaitAll(works, fmt::format("gathering layer {}'s optimizer state for a checkpoint", layer.index));
  if (me != 0) return std::nullopt;
  return layer;
}

void AllocateWholeState(ParamTensors& t, Allocator& allocator, bool quantized) {
  const DType state = quantized ? DType::kU8 : DType::kF32;
  t.adam_m = Tensor::Empty(allocator, t.value.shape(), state, MemCategory::kWorkspace);
  t.adam_v = Tensor::Empty(allocator, t.value.shape(), state, MemCategory::kWorkspace);
  if (quantized) {
    const Shape blocks = {QuantBlocks(t.value.numel())};
    t.adam_m_absmax = Tensor::Empty(allocator, blocks, DType::kF32, MemCategory::kWorkspace);
    t.adam_v_absmax = Tensor::Empty(allocator, blocks, DType::kF32, MemCategory::kWorkspace);
  }
  if (t.value.dtype() != DType::kF32) {
    t.master = Tensor::Empty(allocator, t.value.shape(), DType::kF32, MemCategory::kWorkspace);
  }
}

void MoveStateRun(Backend& backend, Group* group, const ParamTensors& t, const Optimizer::Slot* own,
                  const StateRun& run, std::vector<Tensor>& keep,
                  std::vector<std::unique_ptr<Work>>& works) {
  const int me = group == nullptr ? 0 : group->rank();
  if (me != run.from && me != run.holder) return;
  struct Part {
    Tensor whole;  // the holder's temporary
    Tensor slot;   // the sender's slot's
    bool blocks;   // one element per quantisation block
  };
  const bool master = t.value.dtype() != DType::kF32;
  std::vector<Part> parts = {{t.adam_m, own ? own->m : Tensor(), false},
                             {t.adam_v, own ? own->v : Tensor(), false}};
  if (run.quantized) {
    parts.push_back({t.adam_m_absmax, own ? own->m_absmax : Tensor(), true});
    parts.push_back({t.adam_v_absmax, own ? own->v_absmax : Tensor(), true});
  }
  if (master) parts.push_back({t.master, own ? own->master : Tensor(), false});
  for (const auto& [whole, slot, blocks] : parts) {
    const int64_t first = blocks ? run.begin / kQuantBlock : run.begin;
    const int64_t last = blocks ? QuantBlocks(run.end) : run.end;
    if (me == run.holder) {
      Tensor into = FlatSlice(whole, first, last);
      if (run.from == me) {
        backend.Copy(slot.View({-1}), into);
      } else {
        keep.push_back(into);
        works.push_back(group->Irecv(into, run.from));
      }
    } else {
      const Tensor flat = slot.View({-1});
      keep.push_back(flat);
      works.push_back(group->Isend(flat, run.holder));
    }
  }
}

}  // namespace baton
