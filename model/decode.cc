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
  CachedDecoder(std::vector<Layer*> layers, Backend& backend, int context)
      : layers_(std::move(layers)), backend_(backend), context_(context), caches_(layers_.size()) {
    BATON_CHECK(layers_.size() >= 2, "a decoder needs an embedding and a head");
  }

  std::vector<float> NextLogits(std::span<const int32_t> sequence) override {
    const std::span<const int32_t> window = Window(sequence, context_);
    // The caches serve when the window extends what they hold at the same positions: never once
    // the window slides (its first token is then a new one at position 0).
    int64_t start = static_cast<int64_t>(cached_.size());
    const bool extends = sequence.size() <= static_cast<size_t>(context_) &&
                         cached_.size() < window.size() &&
                         std::equal(cached_.begin(), cached_.end(), window.begin());
    if (!extends) {
      for (KvCache& cache : caches_) cache.Reset();
      start = 0;
    }
    cached_.clear();  // until this call succeeds: after a throw, the next call starts afresh
    const std::span<const int32_t> fresh = window.subspan(static_cast<size_t>(start));
    const int64_t t = static_cast<int64_t>(fresh.size());
    const MicroBatch batch{TokenTensor(backend_, fresh), Tensor()};
    Tensor x;  // (1,t,C)
    for (size_t i = 0; i + 1 < layers_.size(); ++i) {
      x = layers_[i]->ForwardCached(x, batch, start, caches_[i]);
    }
    // The head on the last row only: (1,1,C) -> logits (1,V).
    const int64_t width = x.size(2);
    const Tensor last = x.View({t, width}).Slice(0, t - 1, t).View({1, 1, width});
    const Tensor logits = layers_.back()->ForwardCached(last, batch, start + t - 1, caches_.back());
    cached_.assign(window.begin(), window.end());
    return HostRow(backend_, logits, 0);
  }

  int64_t cache_bytes() const override {
    int64_t total = 0;
    for (const KvCache& cache : caches_) total += cache.bytes();
    return total;
  }

 private:
  std::vector<Layer*> layers_;
  Backend& backend_;
  int context_;
  std::vector<KvCache> caches_;  // one per layer; empty for layers without attention
  std::vector<int32_t> cached_;  // the tokens at positions 0 .. length-1 of the caches
};

}  // namespace

std::unique_ptr<Decoder> MakeWindowDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context) {
  return std::make_unique<WindowDecoder>(std::move(layers), backend, context);
}

std::unique_ptr<Decoder> MakeCachedDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context) {
  return std::make_unique<CachedDecoder>(std::move(layers), backend, context);
}

}  // namespace baton
