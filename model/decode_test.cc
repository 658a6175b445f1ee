// Inference with a key-value cache (model/decode.h, Layer::ForwardCached) against the training
// forward over the whole window, for every kind of model the blocks support: flash and
// materialized attention, f32 and bf16, MLP-only blocks, low rank with shared blocks, INT8
// weights. Also: what the caches book in the ledger, and the errors of misuse.
//
// Tolerances are normalised errors of the logits. f32: the two paths run the same kernels on
// rows in other groupings (GEMMs of 1 row vs T rows, attention key blocks cut at another
// diagonal), so they differ by float rounding only: ~1e-7 per operation, a few 1e-7 after two
// blocks; 1e-5 leaves margin yet fails on any real difference (a wrong position, a missing key:
// errors of order 1). bf16: every activation is rounded to 8 significant bits (2^-9 = 2e-3
// relative), and a different summation order flips some roundings by one unit, so 2e-2.
#include "model/decode.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/graph.h"
#include "model/head.h"
#include "model/int8_weights.h"
#include "model/test_util.h"

namespace baton {
namespace {

using numeric_check::NormalisedError;

struct ModelCase {
  std::string name;
  bool mlp_only = false;
  bool flash = true;
  DType dtype = DType::kF32;
  bool low_rank_and_shared = false;
  bool int8 = false;
  double tolerance = 1e-5;
  bool llama = false;  // RMSNorm, rotary positions, SwiGLU, 2 query heads over 1 key/value head
  int window = 0;      // with llama: Mistral's sliding window
};

// V=37, context 20, L=3, NH=2, C=16: small, with a context short enough to cross often.
ModelDims CaseDims(const ModelCase& c) {
  ModelDims dims{37, 20, 3, 2, 16};
  if (c.llama) {
    dims.family = ModelFamily::kLlama;
    dims.num_kv_heads = 1;
    dims.mlp_hidden = 24;
    dims.rope.theta = 10000.0;
    if (c.window > 0) {
      dims.family = ModelFamily::kMistral;
      dims.sliding_window = c.window;
    }
  }
  if (c.low_rank_and_shared) {
    dims.low_rank_attn = 4;
    dims.low_rank_mlp = 6;
    dims.share_group = 2;  // blocks 0 and 1 share every parameter
    dims.share_attention = true;
    dims.share_mlp = true;
  }
  return dims;
}

// A whole model in one process, as StageModel builds it for generate: shared parameters held
// once, the head's wte tied to the embedding's; then every parameter drawn N(0, 0.3^2) (LayerNorm
// weights around 1) so that attention is far from uniform.
struct TinyModel {
  model_test::CpuFixture fx;
  ModelDims dims;
  DType dtype;  // of the activations
  std::vector<std::unique_ptr<Layer>> owned;
  std::vector<Layer*> layers;

  explicit TinyModel(const ModelCase& c) : dims(CaseDims(c)), dtype(c.dtype) {
    std::map<std::string, Param*> built;
    const LocalParams local = [&built](const std::string& name) -> Param* {
      const auto it = built.find(name);
      return it == built.end() ? nullptr : it->second;
    };
    for (const LayerSpec& spec : c.mlp_only ? MlpGraph(dims) : GptGraph(dims)) {
      owned.push_back(BuildLayer(spec, dims, *fx.backend, c.dtype, c.dtype, 5, local));
      for (Param* p : owned.back()->params()) built.emplace(p->name, p);
      owned.back()->set_flash_attention(c.flash);
      layers.push_back(owned.back().get());
    }
    TieEmbedding(*owned.front(), *owned.back());
    Rng rng(9);
    for (Layer* layer : layers) {
      for (Param* p : layer->params()) {
        if (p->tied) continue;  // shares its original's storage, drawn there
        const bool norm_weight = p->name.find("ln_") != std::string::npos &&
                                 p->name.find(".weight") != std::string::npos;
        numeric_check::FillNormal(p->value, rng, 0.3f, norm_weight ? 1.0f : 0.0f);
      }
      if (c.int8) MakeInt8InferenceLayer(*fx.backend, *layer);
    }
  }
};

std::vector<int32_t> RandomTokens(int count, int vocab, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> tokens;
  for (int i = 0; i < count; ++i) {
    tokens.push_back(static_cast<int32_t>(rng.NextBelow(static_cast<uint64_t>(vocab))));
  }
  return tokens;
}

std::vector<ModelCase> Cases() {
  return {{"flash f32"},
          {"materialized f32", false, false},
          // Where the CPU multiplies bf16, flash attention and the cache's attention both
          // multiply bf16 probabilities (FlashAttentionForwardBf16, CachedAttentionArgs::
          // bf16_probs); materialized attention keeps them f32, so its window and cache differ
          // by that rounding.
          {"flash bf16", false, true, DType::kBF16, false, false, 1e-2},
          {"materialized bf16", false, false, DType::kBF16, false, false, 3e-2},
          {"mlp blocks f32", true},
          {"low rank, shared f32", false, true, DType::kF32, true},
          {"int8 weights f32", false, true, DType::kF32, false, true},
          {"llama flash f32", false, true, DType::kF32, false, false, 1e-5, true},
          {"llama materialized f32", false, false, DType::kF32, false, false, 1e-5, true},
          // Past the context the sliding caches turn q and k by other absolute angles than the
          // recomputed reference does (the same differences), and bf16 rounds each differently.
          {"llama flash bf16", false, true, DType::kBF16, false, false, 3e-2, true},
          {"mistral window 6 flash f32", false, true, DType::kF32, false, false, 1e-5, true, 6},
          {"mistral window 6 materialized f32", false, false, DType::kF32, false, false, 1e-5, true,
           6}};
}

std::vector<ModelCase> RotaryCases() {
  std::vector<ModelCase> cases;
  for (const ModelCase& c : Cases()) {
    if (c.llama) cases.push_back(c);
  }
  return cases;
}

// As generate makes it: rotary caches hold the attention window and slide.
std::unique_ptr<Decoder> CachedDecoderOf(TinyModel& model) {
  return MakeCachedDecoder(model.layers, *model.fx.backend,
                           static_cast<int>(model.dims.attention_window(model.dims.context)),
                           !model.dims.learned_positions());
}

// (1,T) i32 tokens on the CPU fixture's allocator.
Tensor Tokens(TinyModel& model, std::span<const int32_t> tokens) {
  const int64_t t = static_cast<int64_t>(tokens.size());
  Tensor out = Tensor::Empty(model.fx.allocator(), {1, t}, DType::kI32, MemCategory::kActivations);
  std::copy(tokens.begin(), tokens.end(), out.data<int32_t>());
  return out;
}

// Positions [begin, end) of a (1,S,C) tensor, as a contiguous view.
Tensor Positions(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t width = t.size(2);
  return t.View({t.size(1), width}).Slice(0, begin, end).View({1, end - begin, width});
}

// The next-token logits after `sequence` under sliding-window attention of width W (the model's
// sliding window, else its context), recomputed from the training forward, layer by layer and
// token by token: token i's output of block l is the last row of block l's Forward over the
// block's inputs of tokens max(0, i - W + 1) .. i (at positions 0 .., which rotary attention cannot
// tell from their own: only differences of positions count); the head's logits of the last token.
// What the sliding caches must compute (model/decode.h), by another road.
std::vector<float> SlidingWindowReference(TinyModel& model, std::span<const int32_t> sequence) {
  const int64_t n = static_cast<int64_t>(sequence.size()), c = model.dims.width;
  const DType dtype = model.dtype;
  Backend& backend = *model.fx.backend;
  Tensor h = Tensor::Empty(model.fx.allocator(), {1, n, c}, dtype, MemCategory::kActivations);
  for (int64_t i = 0; i < n; ++i) {  // the embedding: each token alone
    const MicroBatch one{Tokens(model, sequence.subspan(i, 1)),
                         Tokens(model, sequence.subspan(i, 1))};
    Stash stash;
    const Tensor row = model.layers.front()->Forward(Tensor(), one, stash);
    Tensor into = Positions(h, i, i + 1);
    backend.Copy(row, into);
  }
  for (size_t l = 1; l + 1 < model.layers.size(); ++l) {
    Tensor next = Tensor::Empty(model.fx.allocator(), {1, n, c}, dtype, MemCategory::kActivations);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t lo =
          std::max<int64_t>(0, i - model.dims.attention_window(model.dims.context) + 1);
      const std::span<const int32_t> window = sequence.subspan(lo, i + 1 - lo);
      const MicroBatch batch{Tokens(model, window), Tokens(model, window)};
      Stash stash;
      const Tensor y = model.layers[l]->Forward(Positions(h, lo, i + 1), batch, stash);
      Tensor into = Positions(next, i, i + 1);
      backend.Copy(Positions(y, i - lo, i + 1 - lo), into);
    }
    h = next;
  }
  const MicroBatch last{Tokens(model, sequence.last(1)), Tokens(model, sequence.last(1))};
  Stash stash;
  model.layers.back()->Forward(Positions(h, n - 1, n), last, stash);
  return ToFloatVector(stash.Get("logits"));
}

// A 7-token prompt prefilled at once, then one token per call up to 2 * context + 5 tokens: past
// the context every call re-prefills the slid window. At every length both decoders' logits
// agree; for rotary models up to the context (past it their caches slide: the next test).
TEST(DecodeTest, CachedLogitsEqualTheFullWindowForwardBeforeAndAfterTheContext) {
  for (const ModelCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    TinyModel model(c);
    const std::unique_ptr<Decoder> window =
        MakeWindowDecoder(model.layers, *model.fx.backend, model.dims.context);
    const std::unique_ptr<Decoder> cached = CachedDecoderOf(model);
    const std::vector<int32_t> sequence = RandomTokens(
        c.llama ? model.dims.context : 2 * model.dims.context + 5, model.dims.vocab_size, 3);
    double worst = 0;
    for (size_t n = 7; n <= sequence.size(); ++n) {
      const std::span<const int32_t> prefix(sequence.data(), n);
      const std::vector<float> expected = window->NextLogits(prefix);
      const std::vector<float> got = cached->NextLogits(prefix);
      ASSERT_EQ(got.size(), static_cast<size_t>(model.dims.vocab_size));
      const double error = NormalisedError(got, expected);
      EXPECT_LT(error, c.tolerance) << "after " << n << " tokens";
      worst = std::max(worst, error);
    }
    // The logits are not trivially equal: a neighbouring position's differ by far more.
    const std::vector<float> a = window->NextLogits({sequence.data(), 10});
    const std::vector<float> b = window->NextLogits({sequence.data(), 11});
    EXPECT_GT(NormalisedError(a, b), 10 * c.tolerance);
    RecordProperty(c.name, fmt::format("{:.3g}", worst));
  }
}

// Rotary models past the context: the caches slide (one position dropped per new token) and
// equal sliding-window attention recomputed from the training forward at every length up to
// 2 * context + 5, whether the sequence grows a token per call or a prompt longer than the
// context comes at once; the window's recompute differs, by design. The cache's memory stays
// that of context positions.
TEST(DecodeTest, SlidingCachesOfARotaryModelEqualSlidingWindowAttentionRecomputed) {
  for (const ModelCase& c : RotaryCases()) {
    SCOPED_TRACE(c.name);
    TinyModel model(c);
    const int context = model.dims.context;
    const std::unique_ptr<Decoder> cached = CachedDecoderOf(model);
    const std::vector<int32_t> sequence = RandomTokens(2 * context + 5, model.dims.vocab_size, 5);
    int64_t bytes = 0;
    double worst = 0;
    for (size_t n = 7; n <= sequence.size(); ++n) {
      const std::span<const int32_t> prefix(sequence.data(), n);
      const std::vector<float> got = cached->NextLogits(prefix);
      if (n == 7) bytes = cached->cache_bytes();
      if (n <= static_cast<size_t>(context) + 1 && n % 3 != 0) continue;  // the cheap half
      const double error = NormalisedError(got, SlidingWindowReference(model, prefix));
      EXPECT_LT(error, c.tolerance) << "after " << n << " tokens";
      worst = std::max(worst, error);
    }
    EXPECT_EQ(cached->cache_bytes(), bytes);
    RecordProperty(c.name, fmt::format("{:.3g}", worst));
    // A long prompt at once (a fresh decoder): read whole, the same logits.
    const std::unique_ptr<Decoder> prompt = CachedDecoderOf(model);
    const std::span<const int32_t> whole(sequence);
    const std::vector<float> expected = SlidingWindowReference(model, whole);
    EXPECT_LT(NormalisedError(prompt->NextLogits(whole), expected), c.tolerance);
    // The recomputed window is another computation past the context. (Not under a sliding
    // window whose reach through the layers, L (W - 1) tokens, fits the context: the recompute
    // then sees every token the last one depends on.)
    if (c.window == 0) {
      const std::unique_ptr<Decoder> window =
          MakeWindowDecoder(model.layers, *model.fx.backend, context);
      const double apart = NormalisedError(window->NextLogits(whole), expected);
      EXPECT_GT(apart, 10 * c.tolerance);
      RecordProperty(c.name + " recompute", fmt::format("{:.3g}", apart));
    }
  }
}

// Three sequences of different lengths decoded as one batch (prompts of 3, 9 and 15 tokens, the
// last longer than the context for rotary models, whose sliding caches then read it whole) grow
// a token per row and call up to 2 * context + 5 tokens, once by uneven numbers (2, 1, 3 tokens):
// at every call each row's logits equal those of its sequence decoded alone, with the cache and
// without it; the caches hold three rows of one sequence's.
TEST(DecodeTest, EachRowOfABatchEqualsItsSequenceDecodedAlone) {
  for (const ModelCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    TinyModel model(c);
    const int context = model.dims.context;
    Backend& backend = *model.fx.backend;
    const std::unique_ptr<Decoder> cached = CachedDecoderOf(model);
    const std::unique_ptr<Decoder> window = MakeWindowDecoder(model.layers, backend, context);
    std::vector<std::unique_ptr<Decoder>> alone_cached, alone_window;
    std::vector<std::vector<int32_t>> sequences;
    std::vector<size_t> lengths;
    for (int b = 0; b < 3; ++b) {
      alone_cached.push_back(CachedDecoderOf(model));
      alone_window.push_back(MakeWindowDecoder(model.layers, backend, context));
      lengths.push_back(b == 2 && c.llama ? context + 4 : 3 + 6 * b);
      sequences.push_back(RandomTokens(static_cast<int>(lengths[b]) + 2 * context + 5,
                                       model.dims.vocab_size, 20 + b));
    }
    double worst = 0;
    for (int call = 0; lengths[0] <= static_cast<size_t>(2 * context + 5); ++call) {
      std::vector<std::vector<int32_t>> prefixes;
      for (size_t b = 0; b < 3; ++b) {
        prefixes.emplace_back(sequences[b].begin(), sequences[b].begin() + lengths[b]);
        lengths[b] += call == 9 ? std::vector<size_t>{2, 1, 3}[b] : 1;
      }
      const std::vector<std::vector<float>> got = cached->NextLogitsBatch(prefixes);
      const std::vector<std::vector<float>> recomputed = window->NextLogitsBatch(prefixes);
      ASSERT_EQ(got.size(), 3u);
      ASSERT_EQ(recomputed.size(), 3u);
      for (size_t b = 0; b < 3; ++b) {
        const double error = NormalisedError(got[b], alone_cached[b]->NextLogits(prefixes[b]));
        EXPECT_LT(error, c.tolerance) << "row " << b << ", " << prefixes[b].size() << " tokens";
        EXPECT_LT(NormalisedError(recomputed[b], alone_window[b]->NextLogits(prefixes[b])),
                  c.tolerance)
            << "row " << b << ", " << prefixes[b].size() << " tokens";
        worst = std::max(worst, error);
      }
    }
    EXPECT_EQ(cached->cache_bytes(), 3 * alone_cached[0]->cache_bytes());
    RecordProperty(c.name, fmt::format("{:.3g}", worst));
  }
}

// Prefill in uneven chunks, the head on every row: each position's logits equal the training
// forward's logits row (what the head stashes) for the whole sequence.
TEST(DecodeTest, ChunkedPrefillGivesEveryRowOfTheForwardLogits) {
  for (const ModelCase& c : Cases()) {
    // A sliding window's cache holds its W positions: the decoder drops older ones (the test
    // above), which this test's straight prefill of the context does not.
    if (c.window > 0) continue;
    SCOPED_TRACE(c.name);
    TinyModel model(c);
    const int t = model.dims.context;
    Rng rng(4);
    const MicroBatch batch =
        model_test::RandomBatch(model.fx.allocator(), 1, t, model.dims.vocab_size, rng);
    std::vector<Stash> stashes(model.layers.size());
    Tensor x;
    for (size_t i = 0; i < model.layers.size(); ++i) {
      x = model.layers[i]->Forward(x, batch, stashes[i]);
    }
    const std::vector<float> expected = ToFloatVector(stashes.back().Get("logits"));

    std::vector<KvCache> caches(model.layers.size());
    std::vector<float> got;
    int64_t start = 0;
    for (const int64_t end : {int64_t{6}, int64_t{7}, int64_t{13}, int64_t{t}}) {
      const MicroBatch chunk{batch.tokens.View({t}).Slice(0, start, end).View({1, end - start}),
                             Tensor()};
      Tensor h;
      for (size_t i = 0; i < model.layers.size(); ++i) {
        h = model.layers[i]->ForwardCached(h, chunk, {start}, caches[i]);
      }
      const std::vector<float> rows = ToFloatVector(h);
      got.insert(got.end(), rows.begin(), rows.end());
      start = end;
    }
    EXPECT_LT(NormalisedError(got, expected), c.tolerance);
  }
}

// The caches are the only activations kept between calls: exactly 2 (keys, values) x attention
// blocks x context x C x the dtype's bytes, booked as activations on the first call, the same
// after crossing the context (Reset keeps the memory), and freed with the decoder.
TEST(DecodeTest, CachesAreBookedAsActivationsAndFreedWithTheDecoder) {
  for (const ModelCase& c : Cases()) {
    SCOPED_TRACE(c.name);
    TinyModel model(c);
    MemoryLedger& ledger = model.fx.ledger;
    const int64_t before = ledger.current(MemCategory::kActivations);
    const int64_t expected = c.mlp_only ? 0
                                        : int64_t{2} * model.dims.num_layers *
                                              model.dims.attention_window(model.dims.context) *
                                              model.dims.width * SizeOf(c.dtype);
    std::unique_ptr<Decoder> cached = CachedDecoderOf(model);
    EXPECT_EQ(cached->cache_bytes(), 0);
    const std::vector<int32_t> sequence =
        RandomTokens(model.dims.context + 3, model.dims.vocab_size, 8);
    for (size_t n : {size_t{5}, size_t{6}, sequence.size()}) {
      cached->NextLogits({sequence.data(), n});
      EXPECT_EQ(cached->cache_bytes(), expected) << n;
      EXPECT_EQ(ledger.current(MemCategory::kActivations) - before, expected) << n;
    }
    EXPECT_GE(ledger.peak(MemCategory::kActivations) - before, expected);
    cached.reset();
    EXPECT_EQ(ledger.current(MemCategory::kActivations), before);
  }
}

TEST(DecodeTest, MisuseFailsWithTheReason) {
  TinyModel model(Cases().front());
  Layer& block = *model.layers[1];
  Rng rng(2);
  const Tensor x = model_test::RandomActivation(model.fx.allocator(), {1, 4, model.dims.width},
                                                DType::kF32, rng);
  KvCache cache;
  block.ForwardCached(x, MicroBatch(), {0}, cache);
  EXPECT_EQ(cache.length, std::vector<int64_t>{4});
  // New positions must follow the cached ones, and stay inside the context; one start per row.
  EXPECT_THROW(block.ForwardCached(x, MicroBatch(), {0}, cache), Error);
  EXPECT_THROW(block.ForwardCached(x, MicroBatch(), {4, 4}, cache), Error);
  cache.Reset();
  EXPECT_THROW(block.ForwardCached(x, MicroBatch(), {model.dims.context - 3}, cache), Error);
  EXPECT_THROW(model.layers.front()->ForwardCached(Tensor(), {Tensor(), Tensor()}, {0}, cache),
               Error);
  // A cache of one row takes no second row.
  const Tensor two = model_test::RandomActivation(model.fx.allocator(), {2, 1, model.dims.width},
                                                  DType::kF32, rng);
  EXPECT_THROW(block.ForwardCached(two, MicroBatch(), {0, 0}, cache), Error);
  const std::unique_ptr<Decoder> cached =
      MakeCachedDecoder(model.layers, *model.fx.backend, model.dims.context);
  EXPECT_THROW(cached->NextLogits({}), Error);
  EXPECT_THROW(cached->NextLogitsBatch({}), Error);
  EXPECT_THROW(cached->NextLogitsBatch({{1, 2}, {}}), Error);
}

}  // namespace
}  // namespace baton
