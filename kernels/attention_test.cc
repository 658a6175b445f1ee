// CPU backend causal self-attention, materialized and flash-style: forward against a naive
// per-head softmax, causality, the backward by finite differences and accumulation, and flash
// against materialized on shapes that cross the flash block size; attention over a key-value cache
// (CachedAttentionForward) against the flash forward, chunk by chunk.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <string>
#include <vector>

#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

using numeric_check::NormalisedError;
using numeric_check::ProjectedSum;

struct Reference {
  std::vector<float> out;    // (B,T,C)
  std::vector<float> probs;  // (B,NH,T,T)
};

// softmax(q k^T / sqrt(D)) v per (b, h, t), in double, straight from the definition.
Reference NaiveAttention(const std::vector<float>& qkv, int64_t batch, int64_t seq,
                         int64_t channels, int64_t heads) {
  const int64_t dim = channels / heads;
  Reference ref{std::vector<float>(static_cast<size_t>(batch * seq * channels)),
                std::vector<float>(static_cast<size_t>(batch * heads * seq * seq))};
  const auto at = [&](int64_t b, int64_t t, int64_t col) {
    return qkv[(b * seq + t) * 3 * channels + col];
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        std::vector<double> scores(static_cast<size_t>(t + 1));
        double max = -INFINITY;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) {
            dot += static_cast<double>(at(b, t, h * dim + d)) * at(b, s, channels + h * dim + d);
          }
          scores[s] = dot / std::sqrt(static_cast<double>(dim));
          max = std::max(max, scores[s]);
        }
        double sum = 0.0;
        for (double& v : scores) sum += (v = std::exp(v - max));
        for (int64_t s = 0; s <= t; ++s) {
          const double p = scores[s] / sum;
          ref.probs[((b * heads + h) * seq + t) * seq + s] = static_cast<float>(p);
          for (int64_t d = 0; d < dim; ++d) {
            ref.out[(b * seq + t) * channels + h * dim + d] +=
                static_cast<float>(p * at(b, s, 2 * channels + h * dim + d));
          }
        }
      }
    }
  }
  return ref;
}

class AttentionTest : public CpuBackendTest {
 protected:
  void Forward(const Tensor& qkv, int heads, Tensor& out, Tensor& probs) {
    backend().AttentionForward(qkv, heads, out, probs);
  }
};

TEST_F(AttentionTest, ForwardMatchesNaivePerHeadSoftmax) {
  // The second shape spans several of the kernel's row blocks.
  for (auto [batch, seq, channels, heads] : {std::tuple{2, 5, 8, 2}, std::tuple{1, 70, 12, 3}}) {
    Tensor qkv = Random({batch, seq, 3 * channels});
    Tensor out = Random({batch, seq, channels});
    Tensor probs = Random({batch, heads, seq, seq});
    Forward(qkv, heads, out, probs);
    const Reference ref = NaiveAttention(Floats(qkv), batch, seq, channels, heads);
    EXPECT_LT(NormalisedError(Floats(out), ref.out), 1e-6) << "T = " << seq;
    EXPECT_LT(NormalisedError(Floats(probs), ref.probs), 1e-6) << "T = " << seq;
  }
}

TEST_F(AttentionTest, ProbsAreCausalRowsThatSumToOne) {
  const int64_t batch = 2, seq = 7, channels = 8, heads = 2;
  Tensor qkv = Random({batch, seq, 3 * channels}, 2.0f);
  Tensor out = Zeros({batch, seq, channels});
  Tensor probs = Random({batch, heads, seq, seq});  // stale values must be overwritten
  Forward(qkv, heads, out, probs);
  const std::vector<float> p = Floats(probs);
  for (int64_t row = 0; row < batch * heads * seq; ++row) {
    const int64_t t = row % seq;
    double sum = 0.0;
    for (int64_t s = 0; s < seq; ++s) {
      const float v = p[row * seq + s];
      if (s > t) {
        EXPECT_EQ(v, 0.0f) << "row " << row << " column " << s;
      } else {
        EXPECT_GT(v, 0.0f);
        sum += v;
      }
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << row;
  }
}

TEST_F(AttentionTest, OutputAtPositionIgnoresLaterPositions) {
  const int64_t batch = 1, seq = 80, channels = 16, heads = 4, cut = 37;
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor out = Zeros({batch, seq, channels});
  Tensor probs = Zeros({batch, heads, seq, seq});
  Forward(qkv, heads, out, probs);
  const std::vector<float> before = Floats(out);
  for (int64_t i = (cut + 1) * 3 * channels; i < qkv.numel(); ++i) {
    qkv.data<float>()[i] += 1.0f;  // change every q, k, v after position `cut`
  }
  Forward(qkv, heads, out, probs);
  const std::vector<float> after = Floats(out);
  for (int64_t i = 0; i < (cut + 1) * channels; ++i) EXPECT_EQ(after[i], before[i]) << i;
  int changed = 0;
  for (int64_t i = (cut + 1) * channels; i < seq * channels; ++i) changed += after[i] != before[i];
  EXPECT_GT(changed, 0);
}

TEST_F(AttentionTest, BackwardMatchesFiniteDifferences) {
  for (auto [batch, seq, channels, heads] : {std::tuple{2, 5, 8, 2}, std::tuple{1, 70, 8, 2}}) {
    Tensor qkv = Random({batch, seq, 3 * channels});
    Tensor dout = Random({batch, seq, channels});
    Tensor out = Zeros({batch, seq, channels});
    Tensor probs = Zeros({batch, heads, seq, seq});
    const auto loss = [&] {
      Forward(qkv, heads, out, probs);
      return ProjectedSum(out, dout);
    };
    loss();
    Tensor dqkv = Zeros(qkv.shape());
    backend().AttentionBackward(dout, qkv, probs, heads, dqkv);
    SCOPED_TRACE(testing::Message() << "T = " << seq);
    ExpectGradient(qkv, loss, dqkv, 2e-3, 1e-3);
  }
}

TEST_F(AttentionTest, BackwardAccumulates) {
  const int64_t batch = 2, seq = 9, channels = 12, heads = 3;
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor out = Zeros({batch, seq, channels});
  Tensor probs = Zeros({batch, heads, seq, seq});
  Forward(qkv, heads, out, probs);
  Tensor dout = Random(out.shape());
  Tensor dqkv = Zeros(qkv.shape());
  backend().AttentionBackward(dout, qkv, probs, heads, dqkv);
  const std::vector<float> once = Floats(dqkv);
  backend().AttentionBackward(dout, qkv, probs, heads, dqkv);
  const std::vector<float> twice = Floats(dqkv);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-6) << i;
}

TEST_F(AttentionTest, HeadsMustDivideChannels) {
  Tensor qkv = Random({1, 4, 3 * 10});
  Tensor out = Zeros({1, 4, 10});
  Tensor probs = Zeros({1, 3, 4, 4});
  EXPECT_THROW(Forward(qkv, 3, out, probs), Error);
}

// ---- flash-style

// log sum_s exp(score) per (b, h, t), in double, straight from the definition.
std::vector<float> NaiveLogSumExp(const std::vector<float>& qkv, int64_t batch, int64_t seq,
                                  int64_t channels, int64_t heads) {
  const int64_t dim = channels / heads;
  std::vector<float> lse(static_cast<size_t>(batch * heads * seq));
  const auto at = [&](int64_t b, int64_t t, int64_t col) {
    return static_cast<double>(qkv[(b * seq + t) * 3 * channels + col]);
  };
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t t = 0; t < seq; ++t) {
        double sum = 0.0;
        for (int64_t s = 0; s <= t; ++s) {
          double dot = 0.0;
          for (int64_t d = 0; d < dim; ++d) {
            dot += at(b, t, h * dim + d) * at(b, s, channels + h * dim + d);
          }
          sum += std::exp(dot / std::sqrt(static_cast<double>(dim)));
        }
        lse[static_cast<size_t>((b * heads + h) * seq + t)] = static_cast<float>(std::log(sum));
      }
    }
  }
  return lse;
}

struct FlashShape {
  int64_t batch, seq, channels, heads;
};

// T = 1; T below, at and across the 64-query block and the 256-key block, not multiples of
// them; many heads; a wide head.
constexpr FlashShape kFlashShapes[] = {
    {1, 1, 8, 2},     {2, 5, 8, 2},     {1, 64, 16, 2},  {2, 70, 12, 3},  {1, 130, 32, 8},
    {1, 200, 64, 16}, {1, 129, 128, 1}, {1, 256, 16, 2}, {2, 300, 16, 2}, {1, 577, 24, 3}};

std::string Describe(const FlashShape& s) {
  return fmt::format("B={} T={} C={} NH={}", s.batch, s.seq, s.channels, s.heads);
}

TEST_F(AttentionTest, FlashForwardMatchesNaiveSoftmaxAndLogSumExp) {
  for (const FlashShape& s : kFlashShapes) {
    SCOPED_TRACE(Describe(s));
    Tensor qkv = Random({s.batch, s.seq, 3 * s.channels}, 2.0f);
    Tensor out = Random({s.batch, s.seq, s.channels});  // stale values must be overwritten
    Tensor lse = Random({s.batch, s.heads, s.seq});
    backend().FlashAttentionForward(qkv, static_cast<int>(s.heads), out, lse);
    const std::vector<float> x = Floats(qkv);
    const Reference ref = NaiveAttention(x, s.batch, s.seq, s.channels, s.heads);
    EXPECT_LT(NormalisedError(Floats(out), ref.out), 1e-6);
    EXPECT_LT(NormalisedError(Floats(lse), NaiveLogSumExp(x, s.batch, s.seq, s.channels, s.heads)),
              1e-6);
  }
}

TEST_F(AttentionTest, FlashMatchesMaterializedForwardAndBackward) {
  for (const FlashShape& s : kFlashShapes) {
    SCOPED_TRACE(Describe(s));
    const int heads = static_cast<int>(s.heads);
    Tensor qkv = Random({s.batch, s.seq, 3 * s.channels}, 2.0f);
    Tensor dout = Random({s.batch, s.seq, s.channels});
    Tensor out = Zeros(dout.shape()), probs = Zeros({s.batch, s.heads, s.seq, s.seq});
    backend().AttentionForward(qkv, heads, out, probs);
    Tensor dqkv = Random(qkv.shape());  // both accumulate onto the same values
    Tensor flash_dqkv = Zeros(qkv.shape());
    backend().Copy(dqkv, flash_dqkv);
    backend().AttentionBackward(dout, qkv, probs, heads, dqkv);

    Tensor flash_out = Zeros(dout.shape()), lse = Zeros({s.batch, s.heads, s.seq});
    backend().FlashAttentionForward(qkv, heads, flash_out, lse);
    backend().FlashAttentionBackward(dout, qkv, flash_out, lse, heads, flash_dqkv);
    EXPECT_LT(NormalisedError(Floats(flash_out), Floats(out)), 1e-5);
    EXPECT_LT(NormalisedError(Floats(flash_dqkv), Floats(dqkv)), 1e-5);
  }
}

TEST_F(AttentionTest, FlashOutputAtPositionIgnoresLaterPositions) {
  const int64_t batch = 1, seq = 150, channels = 16, heads = 4, cut = 70;
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor out = Zeros({batch, seq, channels}), lse = Zeros({batch, heads, seq});
  backend().FlashAttentionForward(qkv, heads, out, lse);
  const std::vector<float> before = Floats(out);
  for (int64_t i = (cut + 1) * 3 * channels; i < qkv.numel(); ++i) qkv.data<float>()[i] += 1.0f;
  backend().FlashAttentionForward(qkv, heads, out, lse);
  const std::vector<float> after = Floats(out);
  for (int64_t i = 0; i < (cut + 1) * channels; ++i) EXPECT_EQ(after[i], before[i]) << i;
}

TEST_F(AttentionTest, FlashBackwardMatchesFiniteDifferences) {
  for (const FlashShape& s :
       {FlashShape{2, 5, 8, 2}, FlashShape{1, 70, 8, 2}, FlashShape{1, 270, 4, 1}}) {
    SCOPED_TRACE(Describe(s));
    const int heads = static_cast<int>(s.heads);
    Tensor qkv = Random({s.batch, s.seq, 3 * s.channels});
    Tensor dout = Random({s.batch, s.seq, s.channels});
    Tensor out = Zeros(dout.shape()), lse = Zeros({s.batch, s.heads, s.seq});
    const auto loss = [&] {
      backend().FlashAttentionForward(qkv, heads, out, lse);
      return ProjectedSum(out, dout);
    };
    loss();
    Tensor dqkv = Zeros(qkv.shape());
    backend().FlashAttentionBackward(dout, qkv, out, lse, heads, dqkv);
    ExpectGradient(qkv, loss, dqkv, 2e-3, 1e-3);
  }
}

// Flash and materialized attention with segments agree, and each document's outputs equal
// plain causal attention over that document alone; the flash run crosses query and key blocks.
TEST_F(AttentionTest, SegmentedFlashMatchesMaterializedAndEachDocumentAlone) {
  const int64_t batch = 2, seq = 300, channels = 8, heads = 2;
  const std::vector<std::vector<int32_t>> starts = {{0, 37, 38, 100, 290}, {0, 260}};
  const Tensor segments = SegmentStarts(backend().allocator(), seq, starts);
  Tensor qkv = Random({batch, seq, 3 * channels}, 2.0f);
  Tensor dout = Random({batch, seq, channels});
  Tensor out = Zeros(dout.shape()), probs = Zeros({batch, heads, seq, seq});
  backend().AttentionForward(qkv, segments, heads, out, probs);
  Tensor dqkv = Zeros(qkv.shape());
  backend().AttentionBackward(dout, qkv, segments, probs, heads, dqkv);
  Tensor flash_out = Zeros(dout.shape()), lse = Zeros({batch, heads, seq});
  backend().FlashAttentionForward(qkv, segments, heads, flash_out, lse);
  Tensor flash_dqkv = Zeros(qkv.shape());
  backend().FlashAttentionBackward(dout, qkv, segments, flash_out, lse, heads, flash_dqkv);
  EXPECT_LT(NormalisedError(Floats(flash_out), Floats(out)), 1e-5);
  EXPECT_LT(NormalisedError(Floats(flash_dqkv), Floats(dqkv)), 1e-5);

  for (int64_t b = 0; b < batch; ++b) {
    for (size_t d = 0; d < starts[b].size(); ++d) {
      const int64_t begin = starts[b][d];
      const int64_t end = d + 1 < starts[b].size() ? starts[b][d + 1] : seq;
      SCOPED_TRACE(::testing::Message() << "row " << b << " document " << begin << ".." << end);
      Tensor alone = Zeros({1, end - begin, 3 * channels});
      std::copy_n(qkv.data<float>() + (b * seq + begin) * 3 * channels,
                  (end - begin) * 3 * channels, alone.data<float>());
      Tensor alone_out = Zeros({1, end - begin, channels});
      Tensor alone_lse = Zeros({1, heads, end - begin});
      backend().FlashAttentionForward(alone, heads, alone_out, alone_lse);
      const float* packed = flash_out.data<float>() + (b * seq + begin) * channels;
      EXPECT_LT(NormalisedError(std::span<const float>(packed, (end - begin) * channels),
                                Floats(alone_out)),
                1e-5);
    }
  }
}

TEST_F(AttentionTest, SegmentedBackwardsMatchFiniteDifferences) {
  const int64_t batch = 2, seq = 70, channels = 8, heads = 2;
  const Tensor segments = SegmentStarts(backend().allocator(), seq, {{0, 3, 4, 66}, {0, 65}});
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor dout = Random({batch, seq, channels});
  Tensor out = Zeros(dout.shape()), lse = Zeros({batch, heads, seq});
  Tensor probs = Zeros({batch, heads, seq, seq});
  const auto flash_loss = [&] {
    backend().FlashAttentionForward(qkv, segments, heads, out, lse);
    return ProjectedSum(out, dout);
  };
  flash_loss();
  Tensor dqkv = Zeros(qkv.shape());
  backend().FlashAttentionBackward(dout, qkv, segments, out, lse, heads, dqkv);
  ExpectGradient(qkv, flash_loss, dqkv, 2e-3, 1e-3);

  const auto materialized_loss = [&] {
    backend().AttentionForward(qkv, segments, heads, out, probs);
    return ProjectedSum(out, dout);
  };
  materialized_loss();
  Tensor materialized_dqkv = Zeros(qkv.shape());
  backend().AttentionBackward(dout, qkv, segments, probs, heads, materialized_dqkv);
  ExpectGradient(qkv, materialized_loss, materialized_dqkv, 2e-3, 1e-3);
}

TEST_F(AttentionTest, SegmentStartsThatSkipBackwardsAreRefused) {
  const int64_t seq = 6, channels = 4;
  Tensor segments = SegmentStarts(backend().allocator(), seq, {{0, 3}});
  segments.data<int32_t>()[4] = 1;  // neither 4 nor the previous token's start
  Tensor qkv = Random({1, seq, 3 * channels});
  Tensor out = Zeros({1, seq, channels}), lse = Zeros({1, 1, seq});
  EXPECT_THROW(backend().FlashAttentionForward(qkv, segments, 1, out, lse), Error);
}

TEST_F(AttentionTest, FlashBackwardAccumulatesAndChecksShapes) {
  const int64_t batch = 2, seq = 9, channels = 12, heads = 3;
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor out = Zeros({batch, seq, channels}), lse = Zeros({batch, heads, seq});
  backend().FlashAttentionForward(qkv, heads, out, lse);
  Tensor dout = Random(out.shape());
  Tensor dqkv = Zeros(qkv.shape());
  backend().FlashAttentionBackward(dout, qkv, out, lse, heads, dqkv);
  const std::vector<float> once = Floats(dqkv);
  backend().FlashAttentionBackward(dout, qkv, out, lse, heads, dqkv);
  const std::vector<float> twice = Floats(dqkv);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_NEAR(twice[i], 2 * once[i], 1e-6) << i;

  Tensor wrong_lse = Zeros({batch, heads, seq + 1});
  EXPECT_THROW(backend().FlashAttentionForward(qkv, heads, out, wrong_lse), Error);
  EXPECT_THROW(backend().FlashAttentionBackward(dout, qkv, out, wrong_lse, heads, dqkv), Error);
  Tensor half_lse = Zeros({batch, heads, seq}, DType::kBF16);
  EXPECT_THROW(backend().FlashAttentionForward(qkv, heads, out, half_lse), Error);
}

// ---- with a key-value cache

class CachedAttentionTest : public CpuBackendTest {
 protected:
  // Rows [t0, t1) of every sequence of qkv (B,T,3C), as a new (B, t1 - t0, 3C) tensor.
  Tensor Rows(const Tensor& qkv, int64_t t0, int64_t t1) {
    const int64_t batch = qkv.size(0), seq = qkv.size(1), width = qkv.size(2);
    const std::vector<float> all = Floats(qkv);
    std::vector<float> part;
    for (int64_t b = 0; b < batch; ++b) {
      part.insert(part.end(), all.begin() + (b * seq + t0) * width,
                  all.begin() + (b * seq + t1) * width);
    }
    return Values({batch, t1 - t0, width}, part, qkv.dtype());
  }

  // Runs s's sequence through CachedAttentionForward in chunks ending at `cuts` (the last must be
  // T) and checks the outputs, stitched together, against FlashAttentionForward's, and the caches
  // against qkv's key and value columns, bit for bit. Cache rows past the keys hold NaN: reading
  // one would show.
  void CompareChunks(const FlashShape& s, DType dtype, const std::vector<int64_t>& cuts,
                     double tolerance) {
    const int heads = static_cast<int>(s.heads);
    const int64_t slots = s.seq + 3;
    Tensor qkv = Random({s.batch, s.seq, 3 * s.channels}, 2.0f, dtype);
    Tensor flash_out = Zeros({s.batch, s.seq, s.channels}, dtype);
    Tensor lse = Zeros({s.batch, s.heads, s.seq});
    backend().FlashAttentionForward(qkv, heads, flash_out, lse);
    const std::vector<float> nan(static_cast<size_t>(s.batch * slots * s.channels), NAN);
    Tensor k_cache = Values({s.batch, slots, s.channels}, nan, dtype);
    Tensor v_cache = Values({s.batch, slots, s.channels}, nan, dtype);
    std::vector<std::vector<float>> outs;  // per chunk, (B, chunk, C)
    int64_t past = 0;
    for (const int64_t cut : cuts) {
      const Tensor chunk = Rows(qkv, past, cut);
      Tensor out = Zeros({s.batch, cut - past, s.channels}, dtype);
      backend().CachedAttentionForward(chunk, heads, past, k_cache, v_cache, out);
      outs.push_back(Floats(out));
      past = cut;
    }
    ASSERT_EQ(past, s.seq);
    std::vector<float> stitched;  // (B,T,C)
    for (int64_t b = 0; b < s.batch; ++b) {
      int64_t t0 = 0;
      for (size_t i = 0; i < cuts.size(); ++i) {
        const int64_t rows = cuts[i] - t0;
        stitched.insert(stitched.end(), outs[i].begin() + b * rows * s.channels,
                        outs[i].begin() + (b + 1) * rows * s.channels);
        t0 = cuts[i];
      }
    }
    EXPECT_LT(NormalisedError(stitched, Floats(flash_out)), tolerance);
    const std::vector<float> x = Floats(qkv), keys = Floats(k_cache), values = Floats(v_cache);
    for (int64_t b = 0; b < s.batch; ++b) {
      for (int64_t t = 0; t < slots; ++t) {
        for (int64_t c = 0; c < s.channels; ++c) {
          const size_t cached = static_cast<size_t>((b * slots + t) * s.channels + c);
          if (t >= s.seq) {  // never written
            ASSERT_TRUE(std::isnan(keys[cached]) && std::isnan(values[cached]));
            continue;
          }
          const size_t column = static_cast<size_t>((b * s.seq + t) * 3 * s.channels + c);
          ASSERT_EQ(keys[cached], x[column + s.channels]) << b << " " << t << " " << c;
          ASSERT_EQ(values[cached], x[column + 2 * s.channels]) << b << " " << t << " " << c;
        }
      }
    }
  }
};

// Prefill then one token at a time; chunks that start inside a key block of 256 (position 250:
// the block from 256 is cut past some queries' diagonal), also with fewer than 4 queries (two at
// 255 and 256: dot-product loops, the first query seeing none of the second key block); single
// queries past the first key block; a single chunk (= the flash forward).
TEST_F(CachedAttentionTest, ChunksMatchTheFlashForwardAndFillTheCache) {
  struct Case {
    FlashShape shape;
    std::vector<int64_t> cuts;
  };
  const Case cases[] = {{{1, 1, 8, 2}, {1}},
                        {{2, 9, 12, 3}, {5, 6, 7, 8, 9}},
                        {{1, 70, 16, 4}, {70}},
                        {{2, 300, 16, 2}, {250, 251, 300}},
                        {{1, 300, 16, 2}, {255, 257, 300}},
                        {{1, 577, 24, 3}, {100, 300, 301, 576, 577}}};
  for (const Case& c : cases) {
    SCOPED_TRACE(Describe(c.shape));
    CompareChunks(c.shape, DType::kF32, c.cuts, 1e-5);
    // 16-bit: the caches hold qkv's bits; out is rounded once to bf16 on either side.
    CompareChunks(c.shape, DType::kBF16, c.cuts, 1e-2);
  }
}

TEST_F(CachedAttentionTest, ChecksTheCachesShapeDtypeAndRoom) {
  const int64_t batch = 1, seq = 4, channels = 8;
  const int heads = 2;
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor out = Zeros({batch, seq, channels});
  Tensor k_cache = Zeros({batch, 6, channels}), v_cache = Zeros({batch, 6, channels});
  backend().CachedAttentionForward(qkv, heads, 2, k_cache, v_cache, out);  // rows 2..5: fits
  EXPECT_THROW(backend().CachedAttentionForward(qkv, heads, 3, k_cache, v_cache, out), Error);
  EXPECT_THROW(backend().CachedAttentionForward(qkv, heads, -1, k_cache, v_cache, out), Error);
  Tensor half = Zeros({batch, 6, channels}, DType::kBF16);
  EXPECT_THROW(backend().CachedAttentionForward(qkv, heads, 0, half, v_cache, out), Error);
  Tensor narrow = Zeros({batch, 6, channels / 2});
  EXPECT_THROW(backend().CachedAttentionForward(qkv, heads, 0, k_cache, narrow, out), Error);
}

}  // namespace
}  // namespace baton::kernels_test
