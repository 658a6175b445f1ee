// ZeroSync's ZeRO-3 half (worker/gradient_sync.h): the parameters' values held as the replica's
// shard between uses, gathered whole for each use (the next layer's gather posted during the
// current one), and made whole or resident for checkpoints, digests and loads.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "worker/gradient_sync.h"
#include "worker/stage_tensors.h"

namespace baton {

void ZeroSync::SetUpValues(const std::vector<ZeroLayer>& layers) {
  const auto same = [](const Tensor& a, const Tensor& b) { return a.storage() == b.storage(); };
  Allocator& allocator = context_.backend->allocator();
  for (const ZeroLayer& layer : layers) {
    LayerValues& values = values_[layer.index];
    for (const FlatPiece& piece : flat_) {
      const auto holds = [&](const Param* p) { return same(p->value, piece.param->value); };
      if (std::none_of(layer.params.begin(), layer.params.end(), holds)) continue;
      const int64_t end = piece.at + piece.param->value.numel();
      if (!values.runs.empty() && values.runs.back().end == piece.at) {
        values.runs.back().end = end;
      } else {
        values.runs.push_back({piece.at, end});
      }
      const bool inside = own_begin() <= piece.at && end <= own_end();
      if (inside) {
        BATON_CHECK(piece.param->value.storage()->resident(),
                    "{} lies in replica {}'s shard and was released", piece.param->name,
                    context_.replica());
        continue;
      }
      values.released.push_back(piece.param->value);
      if (end <= own_begin() || piece.at >= own_end()) continue;
      // Across the shard's edge: its elements in the shard live in a part of their own, the
      // value whole only while gathered (released once the optimizer has its part).
      const Storage* storage = piece.param->value.storage();
      if (parts_.count(storage) == 1) continue;  // a share group's copy: the first's part
      ShardPart& part = parts_[storage];
      part.begin = std::max(own_begin(), piece.at) - piece.at;
      part.end = std::min(own_end(), end) - piece.at;
      part.values = Tensor::Empty(allocator, {part.end - part.begin}, piece.param->value.dtype(),
                                  MemCategory::kParams);
      context_.backend->Copy(FlatSlice(piece.param->value, part.begin, part.end), part.values);
    }
    // The Trainer released those outside the shard at the build already; the parts' wholes go
    // at AttachOptimizer.
    for (Tensor& value : values.released) {
      if (parts_.count(value.storage()) == 0) ReleaseOne(value);
    }
  }
}

void ZeroSync::ReleaseOne(Tensor& t) {
  std::vector<Tensor> one = {t};
  Release(one);
}

void ZeroSync::AttachOptimizer(Optimizer& optimizer) {
  for (Optimizer::Slot& slot : optimizer.slots()) {
    const auto it = parts_.find(slot.param->value.storage());
    if (it == parts_.end()) continue;
    BATON_CHECK(slot.begin == it->second.begin && slot.end == it->second.end,
                "{}: the optimizer's shard [{}, {}) is not ZeRO-3's [{}, {})", slot.param->name,
                slot.begin, slot.end, it->second.begin, it->second.end);
    slot.values = it->second.values;
    ReleaseOne(slot.param->value);
  }
}

void ZeroSync::SaveParts(const std::vector<Tensor>& values) {
  for (const Tensor& value : values) {
    const auto it = parts_.find(value.storage());
    if (it == parts_.end() || !value.storage()->resident()) continue;
    context_.backend->Copy(FlatSlice(value, it->second.begin, it->second.end), it->second.values);
  }
}

void ZeroSync::FillParts(const std::vector<Tensor>& values) {
  for (const Tensor& value : values) {
    const auto it = parts_.find(value.storage());
    if (it == parts_.end()) continue;
    Tensor into = FlatSlice(value, it->second.begin, it->second.end);
    context_.backend->Copy(it->second.values, into);
  }
}

void ZeroSync::Restore(std::vector<Tensor>& tensors) {
  for (Tensor& t : tensors) {
    if (!t.storage()->resident()) t.storage()->Restore();
  }
}

std::vector<ZeroSync::Span> ZeroSync::StaleRuns(int index) const {
  std::vector<Span> stale;
  for (const Span& run : values_.at(index).runs) {
    if (fresh_.count({run.begin, run.end}) == 0) stale.push_back(run);
  }
  return stale;
}

int64_t ZeroSync::ValueBytes(const std::vector<Span>& runs) const {
  int64_t numel = 0;
  for (const Span& run : runs) numel += run.end - run.begin;
  return numel * static_cast<int64_t>(SizeOf(flat_.front().param->value.dtype()));
}

std::string ZeroSync::GatherWhat(int index, int64_t step) const {
  return fmt::format("step {}: the data-parallel all-gather of layer {}'s parameters", step, index);
}

void ZeroSync::MakeResident(int index) {
  LayerValues& values = values_.at(index);
  Restore(values.released);
  FillParts(values.released);
}

bool ZeroSync::BeforeLayerUse(int index, int next, int64_t step) {
  if (level_ < 3) return false;
  bool exchanged = false;
  if (prefetch_) {  // posted at the previous use, for this layer
    context_.Report("ALLGATHER", context_.another_replica(), ValueBytes(prefetch_->runs));
    FinishPrefetch();
    exchanged = true;
  }
  const std::vector<Span> stale = StaleRuns(index);
  if (!stale.empty()) {
    context_.Report("ALLGATHER", context_.another_replica(), ValueBytes(stale));
    MakeResident(index);
    for (const Span& run : stale) {
      Gather(run, GatherWhat(index, step));
      fresh_.insert({run.begin, run.end});
    }
    exchanged = true;
  }
  // The next layer's gather goes on while this one computes: its first round posted.
  if (next >= 0 && next != index) {
    std::vector<Span> runs = StaleRuns(next);
    if (!runs.empty()) {
      MakeResident(next);
      prefetch_ = Prefetch{next, runs, PostGather(runs.front(), 0, GatherWhat(next, step))};
    }
  }
  return exchanged;
}

void ZeroSync::FinishPrefetch() {
  Prefetch prefetch = std::move(*prefetch_);
  prefetch_.reset();
  CompleteGather(prefetch.first);
  const std::string& what = prefetch.first.what;
  for (const Span& run : prefetch.runs) {
    const int64_t first_round = &run == &prefetch.runs.front() ? 1 : 0;
    for (int64_t k = first_round; k < Rounds(run); ++k) {
      Round round = PostGather(run, k, what);
      CompleteGather(round);
    }
    fresh_.insert({run.begin, run.end});
  }
}

void ZeroSync::AfterLayerUse(int index) {
  if (level_ < 3 || keep_for_step_) return;
  // Released at once, but for what the layer shares with the one being fetched.
  std::vector<Tensor> release;
  for (const Tensor& value : values_.at(index).released) {
    const bool fetched =
        prefetch_ && std::any_of(values_.at(prefetch_->index).released.begin(),
                                 values_.at(prefetch_->index).released.end(),
                                 [&](const Tensor& t) { return t.storage() == value.storage(); });
    if (!fetched) release.push_back(value);
  }
  Release(release);
  for (const Span& run : values_.at(index).runs) {
    const bool fetched = prefetch_ && std::any_of(prefetch_->runs.begin(), prefetch_->runs.end(),
                                                  [&](const Span& f) {
                                                    return f.begin == run.begin && f.end == run.end;
                                                  });
    if (!fetched) fresh_.erase({run.begin, run.end});
  }
}

void ZeroSync::AcquireLayerValues(int index, bool gather) {
  if (level_ < 3) return;
  BATON_CHECK(!prefetch_, "layer {}'s gather is in flight outside a step", prefetch_->index);
  LayerValues& values = values_.at(index);
  Restore(values.released);
  if (!gather) return;
  FillParts(values.released);
  const std::string what = fmt::format(
      "the data-parallel all-gather of layer {}'s parameters "
      "(for a checkpoint or the parameters' digests)",
      index);
  for (const Span& run : values.runs) Gather(run, what);
}

void ZeroSync::ReleaseLayerValues(int index) {
  if (level_ < 3) return;
  SaveParts(values_.at(index).released);  // what a load put in the whole values
  Release(values_.at(index).released);
  fresh_.clear();  // a run kept this step may have lost a value shared with this layer
}

}  // namespace baton
