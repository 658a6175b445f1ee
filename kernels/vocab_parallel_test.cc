// CPU backend vocab-parallel embedding and cross-entropy (tensor parallelism): a vocabulary of 11
// split over 1, 2 and 3 ranks, unevenly, every shard computed in one process. The shards' results
// put together must be the whole-vocabulary ops' results: bit for bit for the embedding, to
// rounding for the cross-entropy.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/kernels_test_util.h"

namespace baton::kernels_test {
namespace {

constexpr int64_t kVocab = 11;

// A split of the vocabulary: rank t holds rows [begin[t], begin[t] + rows[t]).
struct Split {
  std::vector<int64_t> rows;
  int64_t begin(size_t rank) const {
    int64_t b = 0;
    for (size_t t = 0; t < rank; ++t) b += rows[t];
    return b;
  }
};

const std::vector<Split> kSplits = {{{11}}, {{7, 4}}, {{3, 5, 3}}};
const std::vector<DType> kDTypes = {DType::kF32, DType::kBF16, DType::kF16};

std::string Describe(const Split& split, DType dtype) {
  std::string s = std::string(Name(dtype)) + ", shards";
  for (int64_t rows : split.rows) s += " " + std::to_string(rows);
  return s;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

class VocabParallelTest : public CpuBackendTest {
 protected:
  Tensor Columns(const Tensor& t, int64_t col0, int64_t cols) {
    return numeric_check::ColumnsOf(backend_->allocator(), t, col0, cols);
  }
  // Rows [row0, row0 + rows) of a (R, C) tensor.
  Tensor Rows(const Tensor& t, int64_t row0, int64_t rows) {
    const int64_t cols = t.size(1);
    const std::vector<float> all = Floats(t);
    return Values({rows, cols},
                  std::vector<float>(all.begin() + row0 * cols, all.begin() + (row0 + rows) * cols),
                  t.dtype());
  }
  // Two packed documents per row of (B, T): one starting at 0, one at T / 2.
  Tensor PackedStarts(int64_t batch, int64_t seq) {
    Tensor starts = Ids({batch, seq}, 1);
    for (int64_t i = 0; i < starts.numel(); ++i) {
      starts.data<int32_t>()[i] = i % seq < seq / 2 ? 0 : static_cast<int32_t>(seq / 2);
    }
    return starts;
  }
  // Targets (N) in [0, kVocab), with rows 1 and 5 ignored.
  Tensor TargetsWithIgnored(int64_t rows) {
    Tensor targets = Ids({rows}, kVocab);
    targets.data<int32_t>()[1] = kIgnoreTarget;
    targets.data<int32_t>()[5] = kIgnoreTarget;
    return targets;
  }
  // Every shard's CrossEntropyShardStats, stacked in rank order: (T, N, 3).
  Tensor AllStats(const Tensor& logits, const Tensor& targets, const Split& split) {
    const int64_t rows = targets.numel();
    std::vector<float> stacked;
    for (size_t t = 0; t < split.rows.size(); ++t) {
      Tensor stats = Zeros({rows, 3});
      backend().CrossEntropyShardStats(Columns(logits, split.begin(t), split.rows[t]), targets,
                                       split.begin(t), stats);
      const std::vector<float> values = Floats(stats);
      stacked.insert(stacked.end(), values.begin(), values.end());
    }
    return Values({static_cast<int64_t>(split.rows.size()), rows, 3}, stacked);
  }
};

// (a) Summing the ranks' outputs (in f32, rank order) gives EmbeddingForward's out: the rank
// holding a token adds its row, rank 0 the position's.
TEST_F(VocabParallelTest, EmbeddingShardsSumToEmbeddingForward) {
  const int64_t batch = 3, seq = 8, channels = 10;
  Tensor tokens = Ids({batch, seq}, kVocab);
  for (DType dtype : kDTypes) {
    Tensor wte = Random({kVocab, channels}, 1.0f, dtype);
    Tensor wpe = Random({seq, channels}, 1.0f, dtype);
    for (bool packed : {false, true}) {
      for (bool positions : {true, false}) {
        const Tensor starts = packed ? PackedStarts(batch, seq) : Tensor();
        const Tensor position_table = positions ? wpe : Tensor();
        Tensor whole = Zeros({batch, seq, channels}, dtype);
        backend().EmbeddingForward(tokens, starts, wte, position_table, whole);
        for (const Split& split : kSplits) {
          SCOPED_TRACE(Describe(split, dtype) + (packed ? ", packed" : "") +
                       (positions ? "" : ", no wpe"));
          std::vector<float> sum(whole.numel(), 0.0f);
          for (size_t t = 0; t < split.rows.size(); ++t) {
            Tensor out = Random({batch, seq, channels}, 1.0f, dtype);  // written, not accumulated
            backend().EmbeddingShardForward(tokens, starts, split.begin(t),
                                            Rows(wte, split.begin(t), split.rows[t]),
                                            t == 0 ? position_table : Tensor(), out);
            const std::vector<float> values = Floats(out);
            for (size_t i = 0; i < sum.size(); ++i) sum[i] += values[i];
          }
          const std::vector<float> expected = Floats(whole);
          // 16-bit: each rank rounds its own terms, so the sum may differ by an ulp of the out.
          const double tolerance = dtype == DType::kF32 ? 0.0 : dtype == DType::kBF16 ? 4e-2 : 5e-3;
          for (size_t i = 0; i < sum.size(); ++i) {
            if (dtype == DType::kF32) {
              ASSERT_TRUE(SameBits(sum[i], expected[i]))
                  << i << ": " << sum[i] << " vs " << expected[i];
            } else {
              ASSERT_NEAR(sum[i], expected[i], tolerance) << i;
            }
          }
        }
      }
    }
  }
}

// (b) The ranks' dwte side by side are EmbeddingBackward's dwte, bit for bit in every dtype (the
// same sums in the same order); dwpe on the rank given it is EmbeddingBackward's.
TEST_F(VocabParallelTest, EmbeddingShardGradientsConcatenateToEmbeddingBackward) {
  const int64_t batch = 3, seq = 8, channels = 10;
  Tensor tokens = Ids({batch, seq}, kVocab);  // 24 tokens over 11 ids: repeats accumulate
  for (DType dtype : kDTypes) {
    Tensor dout = Random({batch, seq, channels}, 1.0f, dtype);
    Tensor dwte_start = Random({kVocab, channels}, 1.0f, dtype);  // accumulated into
    Tensor dwpe_start = Random({seq, channels}, 1.0f, dtype);
    for (bool packed : {false, true}) {
      const Tensor starts = packed ? PackedStarts(batch, seq) : Tensor();
      Tensor dwte = Clone(dwte_start), dwpe = Clone(dwpe_start);
      backend().EmbeddingBackward(tokens, starts, dout, dwte, dwpe);
      for (const Split& split : kSplits) {
        SCOPED_TRACE(Describe(split, dtype) + (packed ? ", packed" : ""));
        std::vector<float> concatenated;
        for (size_t t = 0; t < split.rows.size(); ++t) {
          Tensor dwte_shard = Rows(dwte_start, split.begin(t), split.rows[t]);
          Tensor dwpe_shard = Clone(dwpe_start);
          Tensor none;
          backend().EmbeddingShardBackward(tokens, starts, split.begin(t), dout, dwte_shard,
                                           t == 0 ? dwpe_shard : none);
          const std::vector<float> values = Floats(dwte_shard);
          concatenated.insert(concatenated.end(), values.begin(), values.end());
          if (t == 0) {
            EXPECT_EQ(Floats(dwpe_shard), Floats(dwpe));
          } else {
            EXPECT_EQ(Floats(dwpe_shard), Floats(dwpe_start));  // not passed: untouched
          }
        }
        EXPECT_EQ(concatenated, Floats(dwte));
      }
    }
  }
}

// (c) Combining every rank's stats gives CrossEntropyForward's loss, to 1e-6 relative (bit for
// bit with one rank), with ignored rows not counted.
TEST_F(VocabParallelTest, CombinedShardStatsGiveCrossEntropyForwardLoss) {
  const int64_t rows = 12;
  Tensor targets = TargetsWithIgnored(rows);
  for (DType dtype : kDTypes) {
    Tensor logits = Random({rows, kVocab}, 3.0f, dtype);
    Tensor whole = Zeros({1});
    backend().CrossEntropyForward(logits, targets, whole);
    const float expected = whole.data<float>()[0];
    ASSERT_GT(expected, 0.0f);
    for (const Split& split : kSplits) {
      SCOPED_TRACE(Describe(split, dtype));
      Tensor row_stats = Zeros({rows, 2}), loss = Zeros({1});
      backend().CrossEntropyShardCombine(AllStats(logits, targets, split), targets, row_stats,
                                         loss);
      EXPECT_NEAR(loss.data<float>()[0], expected, 1e-6 * expected);
      if (split.rows.size() == 1) {
        EXPECT_TRUE(SameBits(loss.data<float>()[0], expected));
      }
      // {M, S}: the row's max, and its sum of exp(l - M).
      const std::vector<float> values = Floats(logits), stats = Floats(row_stats);
      for (int64_t r = 0; r < rows; ++r) {
        const auto row = values.begin() + r * kVocab;
        const float max = *std::max_element(row, row + kVocab);
        double sum = 0.0;
        for (int64_t v = 0; v < kVocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
        EXPECT_EQ(stats[2 * r], max) << r;
        EXPECT_NEAR(stats[2 * r + 1], sum, 1e-5 * sum) << r;
      }
    }
  }
}

TEST_F(VocabParallelTest, AllIgnoredRowsGiveZeroLossAndZeroGradient) {
  const int64_t rows = 4;
  Tensor logits = Random({rows, kVocab}, 3.0f);
  Tensor targets = Ids({rows}, 1);
  for (int64_t r = 0; r < rows; ++r) targets.data<int32_t>()[r] = kIgnoreTarget;
  for (const Split& split : kSplits) {
    SCOPED_TRACE(Describe(split, DType::kF32));
    Tensor all_stats = AllStats(logits, targets, split);
    for (int64_t i = 0; i < all_stats.numel() / 3; ++i) {
      EXPECT_EQ(all_stats.data<float>()[3 * i + 2], 0.0f);  // no target logit on ignored rows
    }
    Tensor row_stats = Zeros({rows, 2}), loss = Values({1}, {7.0f});
    backend().CrossEntropyShardCombine(all_stats, targets, row_stats, loss);
    EXPECT_EQ(loss.data<float>()[0], 0.0f);
    Tensor dlogits = Random({rows, split.rows[0]});
    backend().CrossEntropyShardBackward(Columns(logits, 0, split.rows[0]), targets, 0, row_stats,
                                        1.0f, dlogits);
    EXPECT_EQ(Floats(dlogits), std::vector<float>(dlogits.numel(), 0.0f));
  }
}

// (d) The ranks' dlogits side by side are CrossEntropyBackward's: to 1e-6 in f32; in 16 bits to
// an ulp of the output (the combined S may round differently from the row's own sum, and so
// flip a rounding), 2^-8 relative for bf16 and 2^-11 for f16 of values below 0.1. In place too.
TEST_F(VocabParallelTest, ShardGradientsConcatenateToCrossEntropyBackward) {
  const int64_t rows = 12;
  const float grad_scale = 0.75f;
  Tensor targets = TargetsWithIgnored(rows);
  for (DType dtype : kDTypes) {
    Tensor logits = Random({rows, kVocab}, 3.0f, dtype);
    Tensor whole = Random({rows, kVocab}, 1.0f, dtype);  // written, not accumulated
    backend().CrossEntropyBackward(logits, targets, grad_scale, whole);
    const double tolerance = dtype == DType::kF32 ? 1e-6 : dtype == DType::kBF16 ? 5e-4 : 6e-5;
    for (const Split& split : kSplits) {
      SCOPED_TRACE(Describe(split, dtype));
      Tensor row_stats = Zeros({rows, 2}), loss = Zeros({1});
      backend().CrossEntropyShardCombine(AllStats(logits, targets, split), targets, row_stats,
                                         loss);
      std::vector<std::vector<float>> shards(rows);
      for (size_t t = 0; t < split.rows.size(); ++t) {
        Tensor shard = Columns(logits, split.begin(t), split.rows[t]);
        Tensor dlogits = Random(shard.shape(), 1.0f, dtype);
        backend().CrossEntropyShardBackward(shard, targets, split.begin(t), row_stats, grad_scale,
                                            dlogits);
        Tensor in_place = Clone(shard);
        backend().CrossEntropyShardBackward(in_place, targets, split.begin(t), row_stats,
                                            grad_scale, in_place);
        EXPECT_EQ(Floats(in_place), Floats(dlogits));
        const std::vector<float> values = Floats(dlogits);
        for (int64_t r = 0; r < rows; ++r) {
          shards[r].insert(shards[r].end(), values.begin() + r * split.rows[t],
                           values.begin() + (r + 1) * split.rows[t]);
        }
      }
      const std::vector<float> expected = Floats(whole);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t v = 0; v < kVocab; ++v) {
          EXPECT_NEAR(shards[r][v], expected[r * kVocab + v], tolerance) << r << ", " << v;
        }
      }
    }
  }
}

// (e) Arguments are checked before anything runs.
TEST_F(VocabParallelTest, BadArgumentsThrow) {
  const int64_t batch = 2, seq = 3, channels = 4, rows = batch * seq;
  Tensor tokens = Ids({batch, seq}, kVocab);
  Tensor wte = Random({5, channels}), wpe = Random({seq, channels});
  Tensor out = Zeros({batch, seq, channels});
  EXPECT_THROW(backend().EmbeddingShardForward(tokens, Tensor(), -1, wte, wpe, out), Error);
  Tensor narrow_out = Zeros({batch, seq, channels + 1});
  EXPECT_THROW(backend().EmbeddingShardForward(tokens, Tensor(), 0, wte, wpe, narrow_out), Error);
  Tensor short_wpe = Random({seq - 1, channels});
  EXPECT_THROW(backend().EmbeddingShardForward(tokens, Tensor(), 0, wte, short_wpe, out), Error);
  Tensor negative = Clone(tokens);
  negative.data<int32_t>()[3] = -2;
  EXPECT_THROW(backend().EmbeddingShardForward(negative, Tensor(), 0, wte, wpe, out), Error);
  Tensor dwte = Zeros({5, channels}), dwpe = Zeros({seq, channels});
  EXPECT_THROW(backend().EmbeddingShardBackward(tokens, Tensor(), -1, out, dwte, dwpe), Error);
  Tensor wide_dwte = Zeros({5, channels + 1});
  EXPECT_THROW(backend().EmbeddingShardBackward(tokens, Tensor(), 0, out, wide_dwte, dwpe), Error);
  EXPECT_THROW(backend().EmbeddingShardBackward(negative, Tensor(), 0, out, dwte, dwpe), Error);
  // Ids of other ranks are fine for a shard, not for the whole table.
  Tensor big = Clone(tokens);
  big.data<int32_t>()[0] = 1000;
  backend().EmbeddingShardForward(big, Tensor(), 0, wte, wpe, out);
  EXPECT_THROW(backend().EmbeddingForward(big, wte, wpe, out), Error);

  Tensor logits = Random({rows, 5});
  Tensor targets = Ids({rows}, kVocab);
  Tensor stats = Zeros({rows, 3});
  EXPECT_THROW(backend().CrossEntropyShardStats(logits, targets, -1, stats), Error);
  Tensor stats2 = Zeros({rows, 2});
  EXPECT_THROW(backend().CrossEntropyShardStats(logits, targets, 0, stats2), Error);
  Tensor half_stats = Zeros({rows, 3}, DType::kBF16);
  EXPECT_THROW(backend().CrossEntropyShardStats(logits, targets, 0, half_stats), Error);
  Tensor bad_targets = Clone(targets);
  bad_targets.data<int32_t>()[2] = -5;
  EXPECT_THROW(backend().CrossEntropyShardStats(logits, bad_targets, 0, stats), Error);
  Tensor few_targets = Ids({rows - 1}, kVocab);
  EXPECT_THROW(backend().CrossEntropyShardStats(logits, few_targets, 0, stats), Error);

  Tensor row_stats = Zeros({rows, 2}), loss = Zeros({1});
  EXPECT_THROW(backend().CrossEntropyShardCombine(stats, targets, row_stats, loss), Error);  // 2-D
  Tensor all_stats = Zeros({2, rows, 3});
  Tensor all_stats2 = Zeros({2, rows, 2});
  EXPECT_THROW(backend().CrossEntropyShardCombine(all_stats2, targets, row_stats, loss), Error);
  Tensor row_stats3 = Zeros({rows, 3});
  EXPECT_THROW(backend().CrossEntropyShardCombine(all_stats, targets, row_stats3, loss), Error);
  EXPECT_THROW(backend().CrossEntropyShardCombine(all_stats, few_targets, row_stats, loss), Error);
  EXPECT_THROW(backend().CrossEntropyShardCombine(all_stats, bad_targets, row_stats, loss), Error);
  Tensor loss2 = Zeros({2});
  EXPECT_THROW(backend().CrossEntropyShardCombine(all_stats, targets, row_stats, loss2), Error);

  Tensor dlogits = Zeros({rows, 5});
  EXPECT_THROW(backend().CrossEntropyShardBackward(logits, targets, -1, row_stats, 1.0f, dlogits),
               Error);
  EXPECT_THROW(backend().CrossEntropyShardBackward(logits, targets, 0, row_stats3, 1.0f, dlogits),
               Error);
  Tensor wide = Zeros({rows, 6});
  EXPECT_THROW(backend().CrossEntropyShardBackward(logits, targets, 0, row_stats, 1.0f, wide),
               Error);
  EXPECT_THROW(
      backend().CrossEntropyShardBackward(logits, bad_targets, 0, row_stats, 1.0f, dlogits), Error);
}

// The meta backend checks the same arguments and books the same workspace as the CPU backend.
TEST(VocabParallelMetaTest, MetaBackendBooksTheCpuBackendsWorkspace) {
  const int64_t batch = 2, seq = 5, channels = 6, rows = batch * seq, shard = 4;
  const auto bookings = [&](bool meta) {
    MemoryLedger ledger;
    std::unique_ptr<Backend> backend =
        meta ? MakeCpuMetaBackend(ledger, 2) : MakeCpuBackend(ledger, 2);
    const auto make = [&](Shape shape, DType dtype) {
      return Tensor::Zeros(backend->allocator(), std::move(shape), dtype,
                           MemCategory::kActivations);
    };
    std::vector<int64_t> peaks;
    const auto peak_of = [&](const std::function<void()>& call) {
      const int64_t before = ledger.Current()[MemCategory::kWorkspace];
      ledger.ResetPeaks();
      call();
      peaks.push_back(ledger.peak(MemCategory::kWorkspace) - before);
    };
    Tensor tokens = make({batch, seq}, DType::kI32), targets = make({rows}, DType::kI32);
    Tensor wte = make({shard, channels}, DType::kBF16), wpe = make({seq, channels}, DType::kBF16);
    Tensor out = make({batch, seq, channels}, DType::kBF16);
    Tensor logits = make({rows, shard}, DType::kBF16), dlogits = make({rows, shard}, DType::kF16);
    Tensor stats = make({rows, 3}, DType::kF32), all_stats = make({2, rows, 3}, DType::kF32);
    Tensor row_stats = make({rows, 2}, DType::kF32), loss = make({1}, DType::kF32);
    peak_of([&] { backend->EmbeddingShardForward(tokens, Tensor(), 3, wte, wpe, out); });
    peak_of([&] { backend->EmbeddingShardBackward(tokens, Tensor(), 3, out, wte, wpe); });
    peak_of([&] { backend->CrossEntropyShardStats(logits, targets, 3, stats); });
    peak_of([&] { backend->CrossEntropyShardCombine(all_stats, targets, row_stats, loss); });
    peak_of(
        [&] { backend->CrossEntropyShardBackward(logits, targets, 3, row_stats, 1.0f, dlogits); });
    Tensor wrong = make({rows, 2}, DType::kF32);
    EXPECT_THROW(backend->CrossEntropyShardStats(logits, targets, 3, wrong), Error);
    EXPECT_THROW(backend->EmbeddingShardForward(tokens, Tensor(), -1, wte, wpe, out), Error);
    return peaks;
  };
  const std::vector<int64_t> real = bookings(false);
  EXPECT_EQ(bookings(true), real);
  for (int64_t peak : real) EXPECT_GT(peak, 0);  // every call stages 16-bit tensors
}

}  // namespace
}  // namespace baton::kernels_test
