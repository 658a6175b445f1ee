// Next-token logits by recomputing the window or with a key-value cache (see decode.h).
#include "model/decode.h"

#include <algorithm>

#include "core/error.h"

namespace baton {
namespace {

// tokens (1,T) i32, booked as activations; T = tokens.size().
Tensor TokenTensor(Backend& backend, std::span<const int32_t> tokens) {
  const int64_t t = static_cast<int64_t>(tokens.size());
  Tensor out = Tensor::Empty(backend.allocator(), {1, t}, DType::kI32, MemCategory::kActivations);
  std::vector<int32_t> host(tokens.begin(), tokens.end());
  backend.Copy(Tensor::Wrap(host.data(), {1, t}, DType::kI32), out);
  return out;
}

// Row `row` of logits (N,V), any float dtype, on the host as f32.
std::vector<float> HostRow(Backend& backend, const Tensor& logits, int64_t row) {
  const Tensor slice = logits.Slice(0, row, row + 1);
  std::vector<char> bytes(slice.nbytes());
  Tensor host = Tensor::Wrap(bytes.data(), slice.shape(), slice.dtype());
  backend.Copy(slice, host);
  backend.Synchronize();
  std::vector<float> values(static_cast<size_t>(logits.size(1)));
  ConvertFloats(bytes.data(), logits.dtype(), values.data(), DType::kF32, values.size());
  return values;
}

std::span<const int32_t> Window(std::span<const int32_t> sequence, int context) {
  BATON_CHECK(!sequence.empty(), "next-token logits need at least one token");
  return sequence.last(std::min<size_t>(sequence.size(), static_cast<size_t>(context)));
}

class WindowDecoder final : public Decoder {
 public:
  WindowDecoder(std::vector<Layer*> layers, Backend& backend, int context)
      : layers_(std::move(layers)), backend_(backend), context_(context) {}

  std::vector<float> NextLogits(std::span<const int32_t> sequence) override {
    const std::span<const int32_t> window = Window(sequence, context_);
    const std::vector<int32_t> targets(window.size(), 0);  // the head's loss is not read
    MicroBatch batch{TokenTensor(backend_, window), TokenTensor(backend_, targets)};
    std::vector<Stash> stashes(layers_.size());
    Tensor x;
    for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->Forward(x, batch, stashes[i]);
    // The head stashes logits (T,V): the last row predicts the next token.
    const Tensor& logits = stashes.back().Get("logits");
    return HostRow(backend_, logits, logits.size(0) - 1);
  }
  int64_t cache_bytes() const override { return 0; }

 private:
  std::vector<Layer*> layers_;
  Backend& backend_;
  int context_;
};

class CachedDecoder final : public Decoder {
 public:
  CachedDecoder(std::vector<Layer*> layers, Backend& backend, int context, bool rotary)
      : layers_(std::move(layers)),
        backend_(backend),
        context_(context),
        rotary_(rotary),
        caches_(layers_.size()) {
    BATON_CHECK(layers_.size() >= 2, "a decoder needs an embedding and a head");
  }

  std::vector<float> NextLogits(std::span<const int32_t> sequence) override {
    BATON_CHECK(!sequence.empty(), "next-token logits need at least one token");
    const Tensor x = rotary_ ? RunSliding(sequence) : RunWindow(sequence);
    // The head on the last row only: (1,t,C) -> (1,1,C) -> logits (1,V).
    const int64_t t = x.size(1), width = x.size(2);
    const Tensor last = x.View({t, width}).Slice(0, t - 1, t).View({1, 1, width});
    const MicroBatch none{Tensor(), Tensor()};
    const Tensor logits = layers_.back()->ForwardCached(last, none, 0, caches_.back());
    return HostRow(backend_, logits, 0);
  }

  int64_t cache_bytes() const override {
    int64_t total = 0;
    for (const KvCache& cache : caches_) total += cache.bytes();
    return total;
  }

 private:
  // The tokens at positions start .. start+T-1 through every layer but the head: (1,T,C).
  Tensor RunBlocks(std::span<const int32_t> tokens, int64_t start) {
    const MicroBatch batch{TokenTensor(backend_, tokens), Tensor()};
    Tensor x;
    for (size_t i = 0; i + 1 < layers_.size(); ++i) {
      x = layers_[i]->ForwardCached(x, batch, start, caches_[i]);
    }
    return x;
  }

  // Learned positions: the window's first token sits at position 0. The caches serve when the
  // window extends what they hold at the same positions: never once the window slides (its first
  // token is then a new one at position 0), so every call past the context prefills it afresh.
  Tensor RunWindow(std::span<const int32_t> sequence) {
    const std::span<const int32_t> window = Window(sequence, context_);
    int64_t start = static_cast<int64_t>(seen_.size());
    const bool extends = !seen_.empty() && sequence.size() <= static_cast<size_t>(context_) &&
                         seen_.size() < window.size() &&
                         std::equal(seen_.begin(), seen_.end(), window.begin());
    if (!extends) {
      for (KvCache& cache : caches_) cache.Reset();
      start = 0;
    }
    seen_.clear();  // until this call succeeds: after a throw, the next call starts afresh
    Tensor x = RunBlocks(window.subspan(static_cast<size_t>(start)), start);
    seen_.assign(window.begin(), window.end());
    return x;
  }

  // Rotary positions: every token runs once, at its own position. While the caches have room,
  // new tokens run together; once they hold `context` positions, each further token first drops
  // the oldest (DropOldest), so it attends over itself and the context - 1 tokens before it, whose
  // keys and values stay as they were computed (sliding-window attention, as Mistral's rolling
  // cache). A sequence that does not extend the one run so far starts afresh.
  Tensor RunSliding(std::span<const int32_t> sequence) {
    size_t done = seen_.size();
    const bool extends = !seen_.empty() && done < sequence.size() &&
                         std::equal(seen_.begin(), seen_.end(), sequence.begin());
    if (!extends) {
      for (KvCache& cache : caches_) cache.Reset();
      done = 0;
      first_ = 0;
    }
    seen_.clear();  // until this call succeeds
    Tensor x;
    while (done < sequence.size()) {
      int64_t room = context_ - (static_cast<int64_t>(done) - first_);
      if (room == 0) {
        for (KvCache& cache : caches_) DropOldest(backend_, cache, 1);
        ++first_;
        room = 1;
      }
      const size_t take = std::min(sequence.size() - done, static_cast<size_t>(room));
      x = RunBlocks(sequence.subspan(done, take), static_cast<int64_t>(done));
      done += take;
    }
    seen_.assign(sequence.begin(), sequence.end());
    return x;
  }

  std::vector<Layer*> layers_;
  Backend& backend_;
  int context_;
  bool rotary_;
  std::vector<KvCache> caches_;  // one per layer; empty for layers without attention
  // The tokens the caches were built from: the window (learned positions) or the whole sequence
  // (rotary, whose first first_ positions have been dropped).
  std::vector<int32_t> seen_;
  int64_t first_ = 0;
};

}  // namespace

std::unique_ptr<Decoder> MakeWindowDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context) {
  return std::make_unique<WindowDecoder>(std::move(layers), backend, context);
}

std::unique_ptr<Decoder> MakeCachedDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context, bool rotary) {
  return std::make_unique<CachedDecoder>(std::move(layers), backend, context, rotary);
}

}  // namespace baton
