// The data-parallel part of a Trainer's step end (worker/trainer.h, step end 0; docs/parallel.md):
// the replicas' bucketed gradient all-reduce, ZeRO-1's flat space, reduce-scatter and parameter
// all-gather, its layer-by-layer checkpoint state, and the job-wide all-reduce of host values.
#include <algorithm>
#include <optional>

#include "core/error.h"
#include "core/units.h"
#include "worker/stage_tensors.h"
#include "worker/trainer.h"

namespace baton {
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
        what, setup_.stage, setup_.stage, e.what());
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
  const int me = setup_.replica * setup_.num_stages + setup_.stage;
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
          step, setup_.stage, i + 1, buckets_.size(), setup_.stage, e.what());
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

std::vector<Tensor> Trainer::ReducedGradient(Param& p) const {
  if (sync_ != GradientSync::kZero1) return {p.grad};
  std::vector<Tensor> parts;
  const int64_t own_begin = setup_.replica * shard_size_, own_end = own_begin + shard_size_;
  for (const FlatPiece& piece : flat_) {
    if (piece.param->value.raw() != p.value.raw()) continue;
    const int64_t lo = std::max(own_begin, piece.at) - piece.at;
    const int64_t hi = std::min(own_end, piece.at + p.value.numel()) - piece.at;
    if (lo < hi) parts.push_back(FlatSlice(piece.param->grad, lo, hi));
  }
  return parts;
}

}  // namespace baton
