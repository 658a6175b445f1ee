// The CPU backend's results do not depend on its thread count: every kernel, run by a 1-thread
// and a 2-thread backend on the same inputs, gives bit-identical outputs. Shapes are large enough
// that the 2-thread backend really splits the work (parallel.h's kMinParallelWork, gemm.h's
// blocks).
#include <cstring>
#include <functional>

#include "kernels/kernels_test_util.h"
#include "kernels/quantize.h"

namespace baton::kernels_test {
namespace {

class DeterminismTest : public CpuBackendTest {
 protected:
  DeterminismTest() : CpuBackendTest(/*threads=*/2), serial_(MakeCpuBackend(ledger_, 1)) {}

  // Runs `kernel` on both backends and expects the tensors it returns to match bit for bit.
  void ExpectSameBits(const std::function<std::vector<Tensor>(Backend&)>& kernel) {
    const std::vector<Tensor> serial = kernel(*serial_);
    const std::vector<Tensor> parallel = kernel(backend());
    ASSERT_EQ(serial.size(), parallel.size());
    for (size_t i = 0; i < serial.size(); ++i) {
      ASSERT_EQ(serial[i].nbytes(), parallel[i].nbytes());
      EXPECT_EQ(std::memcmp(serial[i].raw(), parallel[i].raw(), serial[i].nbytes()), 0)
          << "output " << i << " differs between 1 and 2 threads";
    }
  }

  std::unique_ptr<Backend> serial_;
};

TEST_F(DeterminismTest, MatmulForEveryTransposeWithBiasAndBiasBackward) {
  for (bool trans_a : {false, true}) {
    for (bool trans_b : {false, true}) {
      Tensor a = Random(trans_a ? Shape{150, 301} : Shape{301, 150});
      Tensor b = Random(trans_b ? Shape{203, 150} : Shape{150, 203});
      Tensor bias = Random({203});
      Tensor initial = Random({301, 203});
      ExpectSameBits([&](Backend& be) {
        Tensor out = Zeros({301, 203});
        be.Matmul(a, trans_a, b, trans_b, out, false, &bias);
        Tensor accumulated = Clone(initial);
        be.Matmul(a, trans_a, b, trans_b, accumulated, true);
        Tensor dbias = Zeros({203});
        be.BiasBackward(initial, dbias);
        return std::vector<Tensor>{out, accumulated, dbias};
      });
    }
  }
}

TEST_F(DeterminismTest, MatmulWiderThanTall) {
  Tensor a = Random({150, 64});
  Tensor b = Random({64, 1100});
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros({150, 1100});
    be.Matmul(a, false, b, false, out, false);
    return std::vector<Tensor>{out};
  });
}

TEST_F(DeterminismTest, EmbeddingForwardAndBackward) {
  Tensor tokens = Ids({4, 100}, 50);
  Tensor wte = Random({50, 128});
  Tensor wpe = Random({120, 128});
  Tensor dout = Random({4, 100, 128});
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros({4, 100, 128});
    be.EmbeddingForward(tokens, wte, wpe, out);
    Tensor dwte = Zeros(wte.shape());
    Tensor dwpe = Zeros(wpe.shape());
    be.EmbeddingBackward(tokens, dout, dwte, dwpe);
    return std::vector<Tensor>{out, dwte, dwpe};
  });
}

// One rank's shard of a vocabulary of 50: rows [20, 37).
TEST_F(DeterminismTest, EmbeddingShardForwardAndBackward) {
  Tensor tokens = Ids({4, 100}, 50);
  Tensor wte = Random({17, 128});
  Tensor wpe = Random({120, 128});
  Tensor dout = Random({4, 100, 128});
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros({4, 100, 128});
    be.EmbeddingShardForward(tokens, Tensor(), 20, wte, wpe, out);
    Tensor dwte = Zeros(wte.shape());
    Tensor dwpe = Zeros(wpe.shape());
    be.EmbeddingShardBackward(tokens, Tensor(), 20, dout, dwte, dwpe);
    return std::vector<Tensor>{out, dwte, dwpe};
  });
}

TEST_F(DeterminismTest, LayerNormForwardAndBackward) {
  Tensor x = Random({300, 200}, 2.0f);
  Tensor weight = Random({200});
  Tensor bias = Random({200});
  Tensor dout = Random({300, 200});
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros(x.shape()), mean = Zeros({300}), rstd = Zeros({300});
    be.LayerNormForward(x, weight, bias, out, mean, rstd);
    Tensor dx = Zeros(x.shape()), dweight = Zeros({200}), dbias = Zeros({200});
    be.LayerNormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
    return std::vector<Tensor>{out, mean, rstd, dx, dweight, dbias};
  });
}

TEST_F(DeterminismTest, GeluForwardAndBackward) {
  Tensor x = Random({100, 1000}, 2.0f);
  Tensor dout = Random(x.shape());
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros(x.shape());
    be.GeluForward(x, out);
    Tensor dx = Zeros(x.shape());
    be.GeluBackward(x, dout, dx);
    return std::vector<Tensor>{out, dx};
  });
}

TEST_F(DeterminismTest, AttentionForwardAndBackward) {
  const int64_t batch = 2, seq = 200, channels = 64, heads = 4;
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor dout = Random({batch, seq, channels});
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros({batch, seq, channels});
    Tensor probs = Zeros({batch, heads, seq, seq});
    be.AttentionForward(qkv, heads, out, probs);
    Tensor dqkv = Zeros(qkv.shape());
    be.AttentionBackward(dout, qkv, probs, heads, dqkv);
    return std::vector<Tensor>{out, probs, dqkv};
  });
}

TEST_F(DeterminismTest, FlashAttentionForwardAndBackward) {
  const int64_t batch = 2, seq = 300, channels = 64, heads = 4;  // two key blocks
  Tensor qkv = Random({batch, seq, 3 * channels});
  Tensor dout = Random({batch, seq, channels});
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros({batch, seq, channels});
    Tensor lse = Zeros({batch, heads, seq});
    be.FlashAttentionForward(qkv, heads, out, lse);
    Tensor dqkv = Zeros(qkv.shape());
    be.FlashAttentionBackward(dout, qkv, out, lse, heads, dqkv);
    return std::vector<Tensor>{out, lse, dqkv};
  });
}

TEST_F(DeterminismTest, AdamW8bit) {
  const int64_t n = 3 * 4096 + 300;  // several chunks, a short last block
  Tensor start = Random({n});
  Tensor grad = Random({n});
  ExpectSameBits([&](Backend& be) {
    Tensor p = Zeros({n}), m = Zeros({n}, DType::kU8), v = Zeros({n}, DType::kU8);
    Tensor am = Zeros({QuantBlocks(n)}), av = Zeros({QuantBlocks(n)});
    be.Copy(start, p);
    AdamWConfig config;
    for (int64_t step = 1; step <= 3; ++step) {
      config.step = step;
      be.AdamW8bit(p, grad, m, am, v, av, config, 0.5f);
    }
    return std::vector<Tensor>{p, m, am, v, av};
  });
}

TEST_F(DeterminismTest, CrossEntropyForwardAndBackward) {
  Tensor logits = Random({64, 1000}, 3.0f);
  Tensor targets = Ids({64}, 1000);
  ExpectSameBits([&](Backend& be) {
    Tensor loss = Zeros({1});
    be.CrossEntropyForward(logits, targets, loss);
    Tensor dlogits = Zeros(logits.shape());
    be.CrossEntropyBackward(logits, targets, 0.5f, dlogits);
    return std::vector<Tensor>{loss, dlogits};
  });
}

// Two ranks' columns, [0, 300) and [300, 700), of a vocabulary of 1000: their stats, combined,
// and the second's gradient.
TEST_F(DeterminismTest, CrossEntropyShardStatsCombineAndBackward) {
  Tensor first = Random({64, 300}, 3.0f);
  Tensor second = Random({64, 400}, 3.0f);
  Tensor targets = Ids({64}, 1000);
  ExpectSameBits([&](Backend& be) {
    Tensor first_stats = Zeros({64, 3}), second_stats = Zeros({64, 3});
    be.CrossEntropyShardStats(first, targets, 0, first_stats);
    be.CrossEntropyShardStats(second, targets, 300, second_stats);
    std::vector<float> both = Floats(first_stats);
    const std::vector<float> theirs = Floats(second_stats);
    both.insert(both.end(), theirs.begin(), theirs.end());
    Tensor row_stats = Zeros({64, 2}), loss = Zeros({1});
    be.CrossEntropyShardCombine(Values({2, 64, 3}, both), targets, row_stats, loss);
    Tensor dlogits = Zeros(second.shape());
    be.CrossEntropyShardBackward(second, targets, 300, row_stats, 0.5f, dlogits);
    return std::vector<Tensor>{second_stats, row_stats, loss, dlogits};
  });
}

TEST_F(DeterminismTest, ElementwiseReductionsAndAdamW) {
  Tensor a = Random({100000});
  Tensor b = Random({100000});
  Tensor half = Random({100000}, 1.0f, DType::kBF16);
  Tensor param = Random({100000});
  ExpectSameBits([&](Backend& be) {
    Tensor sum = Zeros(a.shape());
    be.Add(a, b, sum);
    be.Accumulate(half, sum);
    be.Scale(sum, 0.3f);
    Tensor squares = Zeros({2});  // the double, stored as two floats' worth of bytes
    const double sum_of_squares = be.SumOfSquares(sum) + be.SumOfSquares(half);
    std::memcpy(squares.raw(), &sum_of_squares, sizeof(double));
    Tensor p = Clone(param), m = Zeros(param.shape()), v = Zeros(param.shape());
    AdamWConfig config;
    config.weight_decay = 0.1f;
    be.AdamW(p, sum, m, v, config, 0.5f);
    Tensor converted = Zeros(a.shape(), DType::kF16);
    be.Copy(sum, converted);
    return std::vector<Tensor>{sum, squares, p, m, v, converted};
  });
}

TEST_F(DeterminismTest, SixteenBitStagingPaths) {
  Tensor x = Random({300, 200}, 1.0f, DType::kBF16);
  Tensor w = Random({200, 150}, 0.1f, DType::kBF16);
  Tensor weight = Random({200}, 1.0f, DType::kBF16);
  Tensor bias = Random({200}, 1.0f, DType::kBF16);
  ExpectSameBits([&](Backend& be) {
    Tensor out = Zeros({300, 150}, DType::kBF16);
    be.Matmul(x, false, w, false, out, false);
    Tensor ln = Zeros(x.shape(), DType::kBF16), mean = Zeros({300}), rstd = Zeros({300});
    be.LayerNormForward(x, weight, bias, ln, mean, rstd);
    return std::vector<Tensor>{out, ln, mean, rstd};
  });
}

}  // namespace
}  // namespace baton::kernels_test
