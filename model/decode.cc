// Next-token logits by recomputing the window or with a key-value cache (see decode.h).
#include "model/decode.h"

#include <algorithm>

#include "core/error.h"

namespace baton {
namespace {

using Sequences = std::vector<std::vector<int32_t>>;

// tokens (B,T) i32, booked as activations: row b is rows[b] followed by `pad` up to T, the
// longest row's length.
Tensor TokenTensor(Backend& backend, const std::vector<std::span<const int32_t>>& rows,
                   int32_t pad = 0) {
  size_t t = 0;
  for (const std::span<const int32_t> row : rows) t = std::max(t, row.size());
  std::vector<int32_t> host(rows.size() * t, pad);
  for (size_t b = 0; b < rows.size(); ++b) std::ranges::copy(rows[b], host.begin() + b * t);
  const Shape shape{static_cast<int64_t>(rows.size()), static_cast<int64_t>(t)};
  Tensor out = Tensor::Empty(backend.allocator(), shape, DType::kI32, MemCategory::kActivations);
  backend.Copy(Tensor::Wrap(host.data(), shape, DType::kI32), out);
  return out;
}

// Rows `rows` of logits (N,V), any float dtype, on the host as f32.
std::vector<std::vector<float>> HostRows(Backend& backend, const Tensor& logits,
                                         const std::vector<int64_t>& rows) {
  std::vector<char> bytes(logits.nbytes());
  Tensor host = Tensor::Wrap(bytes.data(), logits.shape(), logits.dtype());
  backend.Copy(logits, host);
  backend.Synchronize();
  const auto vocab = static_cast<size_t>(logits.size(1));
  std::vector<std::vector<float>> out;
  for (const int64_t row : rows) {
    std::vector<float>& values = out.emplace_back(vocab);
    ConvertFloats(bytes.data() + static_cast<size_t>(row) * vocab * SizeOf(logits.dtype()),
                  logits.dtype(), values.data(), DType::kF32, vocab);
  }
  return out;
}

void CheckSequences(const Sequences& sequences) {
  BATON_CHECK(!sequences.empty(), "next-token logits need at least one sequence");
  for (const std::vector<int32_t>& sequence : sequences) {
    BATON_CHECK(!sequence.empty(), "next-token logits need at least one token");
  }
}

std::span<const int32_t> Window(std::span<const int32_t> sequence, int context) {
  return sequence.last(std::min<size_t>(sequence.size(), static_cast<size_t>(context)));
}

class WindowDecoder final : public Decoder {
 public:
  WindowDecoder(std::vector<Layer*> layers, Backend& backend, int context)
      : layers_(std::move(layers)), backend_(backend), context_(context) {}

  std::vector<std::vector<float>> NextLogitsBatch(const Sequences& sequences) override {
    CheckSequences(sequences);
    std::vector<std::span<const int32_t>> windows;
    for (const std::vector<int32_t>& sequence : sequences) {
      windows.push_back(Window(sequence, context_));
    }
    // The head's loss is not read: any ids serve as targets.
    const Tensor tokens = TokenTensor(backend_, windows);
    const MicroBatch batch{tokens, tokens};
    std::vector<Stash> stashes(layers_.size());
    Tensor x;
    for (size_t i = 0; i < layers_.size(); ++i) x = layers_[i]->Forward(x, batch, stashes[i]);
    // The head stashes logits (B*T,V): row b's last real row predicts its next token.
    std::vector<int64_t> rows;
    for (size_t b = 0; b < windows.size(); ++b) {
      rows.push_back(static_cast<int64_t>(b) * tokens.size(1) +
                     static_cast<int64_t>(windows[b].size()) - 1);
    }
    return HostRows(backend_, stashes.back().Get("logits"), rows);
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

  std::vector<std::vector<float>> NextLogitsBatch(const Sequences& sequences) override {
    CheckSequences(sequences);
    const size_t rows = sequences.size();
    if (rows != first_.size()) {  // the caches hold another number of rows
      for (KvCache& cache : caches_) cache.Release();
      seen_.clear();
      first_.assign(rows, 0);
    }
    bool extends = seen_.size() == rows;
    for (size_t b = 0; extends && b < rows; ++b) {
      extends = seen_[b].size() < sequences[b].size() &&
                std::equal(seen_[b].begin(), seen_[b].end(), sequences[b].begin()) &&
                // Learned positions: past the context the window slides.
                (rotary_ || sequences[b].size() <= static_cast<size_t>(context_));
    }
    std::vector<size_t> done(rows, 0);
    if (extends) {
      for (size_t b = 0; b < rows; ++b) done[b] = seen_[b].size();
    }
    seen_.clear();  // until this call succeeds: after a throw, the next call starts afresh
    last_ = Tensor();
    if (extends) {
      Extend(sequences, done);
    } else {
      Fresh(sequences);
    }
    // The head on each row's last position: (B,1,C) -> logits (B,V).
    const MicroBatch none{Tensor(), Tensor()};
    const Tensor logits =
        layers_.back()->ForwardCached(last_, none, std::vector<int64_t>(rows, 0), caches_.back());
    last_ = Tensor();
    std::vector<int64_t> all(rows);
    for (size_t b = 0; b < rows; ++b) all[b] = static_cast<int64_t>(b);
    std::vector<std::vector<float>> out = HostRows(backend_, logits, all);
    seen_ = sequences;
    return out;
  }

  int64_t cache_bytes() const override {
    int64_t total = 0;
    for (const KvCache& cache : caches_) total += cache.bytes();
    return total;
  }

 private:
  // tokens (B,T) at positions starts[b] .. through every layer but the head, with `caches` (one
  // per layer: the decoder's, or views of one row): (B,T,C).
  Tensor RunBlocks(const Tensor& tokens, const std::vector<int64_t>& starts,
                   std::vector<KvCache>& caches) {
    const MicroBatch batch{tokens, Tensor()};
    Tensor x;
    for (size_t i = 0; i + 1 < layers_.size(); ++i) {
      x = layers_[i]->ForwardCached(x, batch, starts, caches[i]);
    }
    return x;
  }

  // Keeps x's (B',T,C) position t of row `from` as row b of last_ (B,1,C), the head's input.
  void Keep(size_t b, const Tensor& x, int64_t from, int64_t t) {
    const int64_t width = x.size(2);
    if (!last_.defined()) {
      last_ = Tensor::Empty(backend_.allocator(), {static_cast<int64_t>(first_.size()), 1, width},
                            x.dtype(), MemCategory::kActivations);
    }
    const Tensor row = x.Slice(0, from, from + 1).View({x.size(1), width}).Slice(0, t, t + 1);
    Tensor into =
        last_.Slice(0, static_cast<int64_t>(b), static_cast<int64_t>(b) + 1).View({1, width});
    backend_.Copy(row, into);
  }

  // Positions row b's caches hold.
  int64_t Held(size_t b, size_t done) const { return static_cast<int64_t>(done) - first_[b]; }

  // Every row afresh. Each row's first tokens (learned positions: its window; rotary: up to
  // context of them) run together, right-padded to the longest, at positions 0 ..; each row's
  // caches are then cut back to its own tokens (the padding's keys are never read: causal
  // attention keeps them out of the real rows, and the next tokens overwrite them). Rotary rows
  // longer than the context read the rest in their own row (Advance).
  void Fresh(const Sequences& sequences) {
    for (KvCache& cache : caches_) cache.Reset();
    std::fill(first_.begin(), first_.end(), 0);
    std::vector<std::span<const int32_t>> heads;
    for (const std::vector<int32_t>& sequence : sequences) {
      const std::span<const int32_t> all(sequence);
      heads.push_back(rotary_ ? all.first(std::min<size_t>(all.size(), context_))
                              : Window(all, context_));
    }
    const Tensor x =
        RunBlocks(TokenTensor(backend_, heads), std::vector<int64_t>(heads.size(), 0), caches_);
    for (size_t b = 0; b < heads.size(); ++b) {
      const auto length = static_cast<int64_t>(heads[b].size());
      for (KvCache& cache : caches_) {
        if (cache.rows() > 0) cache.length[b] = length;
      }
      Keep(b, x, static_cast<int64_t>(b), length - 1);
    }
    for (size_t b = 0; b < heads.size(); ++b) {
      if (rotary_ && heads[b].size() < sequences[b].size()) {
        Advance(b, sequences[b], heads[b].size());
      }
    }
  }

  // Rows extending what they ran (done[b] tokens each, all inside the caches' positions). The
  // same number of new tokens per row, with room for them (rotary rows drop their oldest
  // position for a single new token), run together; otherwise each row by itself.
  void Extend(const Sequences& sequences, const std::vector<size_t>& done) {
    const size_t rows = sequences.size(), count = sequences[0].size() - done[0];
    bool together = true;
    for (size_t b = 0; together && b < rows; ++b) {
      const int64_t room = context_ - Held(b, done[b]);
      together = sequences[b].size() - done[b] == count &&
                 (static_cast<int64_t>(count) <= room || (rotary_ && count == 1));
    }
    if (!together) {
      for (size_t b = 0; b < rows; ++b) Advance(b, sequences[b], done[b]);
      return;
    }
    std::vector<std::span<const int32_t>> tokens;
    std::vector<int64_t> starts;
    for (size_t b = 0; b < rows; ++b) {
      if (Held(b, done[b]) == context_) DropOldestOfRow(b);
      tokens.push_back(std::span<const int32_t>(sequences[b]).subspan(done[b]));
      starts.push_back(static_cast<int64_t>(done[b]));
    }
    const Tensor x = RunBlocks(TokenTensor(backend_, tokens), starts, caches_);
    for (size_t b = 0; b < rows; ++b) {
      Keep(b, x, static_cast<int64_t>(b), static_cast<int64_t>(count) - 1);
    }
  }

  void DropOldestOfRow(size_t b) {
    for (KvCache& cache : caches_) DropOldest(backend_, cache, static_cast<int64_t>(b), 1);
    ++first_[b];
  }

  // Row b alone runs its tokens from `done` on, through views of its row of the caches. While
  // they have room, new tokens run together; once they hold `context` positions (rotary only:
  // learned positions never extend past the context), each further token first drops the oldest
  // (DropOldest), so it attends over itself and the context - 1 tokens before it, whose keys and
  // values stay as they were computed (sliding-window attention, as Mistral's rolling cache).
  void Advance(size_t b, const std::vector<int32_t>& sequence, size_t done) {
    const auto row = static_cast<int64_t>(b);
    Tensor x;
    while (done < sequence.size()) {
      int64_t room = context_ - Held(b, done);
      if (room == 0) {
        DropOldestOfRow(b);
        room = 1;
      }
      const size_t take = std::min(sequence.size() - done, static_cast<size_t>(room));
      std::vector<KvCache> views;
      for (const KvCache& cache : caches_) views.push_back(cache.Row(row));
      const std::span<const int32_t> tokens = std::span(sequence).subspan(done, take);
      x = RunBlocks(TokenTensor(backend_, {tokens}), {static_cast<int64_t>(done)}, views);
      for (size_t i = 0; i < caches_.size(); ++i) caches_[i].Absorb(row, views[i]);
      done += take;
    }
    Keep(b, x, 0, x.size(1) - 1);
  }

  std::vector<Layer*> layers_;
  Backend& backend_;
  int context_;
  bool rotary_;
  std::vector<KvCache> caches_;  // one per layer; empty for layers without attention
  // Per row, the tokens the caches were built from: the window (learned positions) or the whole
  // sequence (rotary, whose first first_[b] positions have been dropped).
  Sequences seen_;
  std::vector<int64_t> first_;
  Tensor last_;  // (B,1,C) during a call: each row's last position, the head's input
};

}  // namespace

std::vector<float> Decoder::NextLogits(std::span<const int32_t> sequence) {
  return NextLogitsBatch({std::vector<int32_t>(sequence.begin(), sequence.end())}).front();
}

std::unique_ptr<Decoder> MakeWindowDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context) {
  return std::make_unique<WindowDecoder>(std::move(layers), backend, context);
}

std::unique_ptr<Decoder> MakeCachedDecoder(std::vector<Layer*> layers, Backend& backend,
                                           int context, bool rotary) {
  return std::make_unique<CachedDecoder>(std::move(layers), backend, context, rotary);
}

}  // namespace baton
