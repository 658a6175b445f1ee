// kernels_bench: CPU backend throughput at gpt-small-cpu shapes (rows N = B*T = 1024, C = 256,
// 8 heads, T = 256, vocab 256), for 1 and 2 threads. Every benchmark checks its result once
// before timing and fails (SkipWithError) if it is wrong. Times are wall-clock (the kernels
// use several threads); the counters (GFLOP/s, GB/s) are defined in bench/kernels.md.
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <numbers>
#include <string>

#include "core/random.h"
#include "core/tensor.h"
#include "kernels/backend.h"
#include "kernels/cpu/gemm.h"
#include "kernels/quantize.h"
#include "kernels/testing/numeric_check.h"

namespace baton {
namespace {

constexpr int64_t kRows = 1024;  // B*T
constexpr int64_t kBatch = 4;
constexpr int64_t kSeq = 256;
constexpr int64_t kChannels = 256;
constexpr int64_t kHeads = 8;
constexpr int64_t kVocab = 256;

// One benchmark's backend and tensors; everything is freed before the ledger goes.
struct Bench {
  explicit Bench(int threads) : backend(MakeCpuBackend(ledger, threads)) {}
  Tensor Random(const Shape& shape, float stddev = 1.0f) {
    return numeric_check::RandomNormal(backend->allocator(), shape, rng, stddev);
  }
  Tensor Zeros(const Shape& shape) {
    return Tensor::Zeros(backend->allocator(), shape, DType::kF32, MemCategory::kActivations);
  }
  MemoryLedger ledger;
  std::unique_ptr<Backend> backend;
  Rng rng{42};
};

void SetCounters(benchmark::State& state, double flops, double bytes) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GB/s"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// The GEMM engines, in the header above the figures.
const bool kGemmContext = [] {
  benchmark::AddCustomContext("cpu_gemms", cpu::GemmEnginesSummary());
  return true;
}();

int Threads(const benchmark::State& state) { return static_cast<int>(state.range(0)); }

// ---- GEMM: out (M,N) = op(a) op(b); args: threads, M, K, N, trans_a, trans_b.
void BM_Matmul(benchmark::State& state) {
  Bench bench(Threads(state));
  const int64_t m = state.range(1), k = state.range(2), n = state.range(3);
  const bool trans_a = state.range(4) != 0, trans_b = state.range(5) != 0;
  Tensor a = bench.Random(trans_a ? Shape{k, m} : Shape{m, k});
  Tensor b = bench.Random(trans_b ? Shape{n, k} : Shape{k, n});
  Tensor out = bench.Zeros({m, n});
  bench.backend->Matmul(a, trans_a, b, trans_b, out, false);
  // Check: a few entries against a double-precision dot product.
  for (int probe = 0; probe < 16; ++probe) {
    const int64_t i = (probe * 37) % m, j = (probe * 101) % n;
    double dot = 0.0;
    for (int64_t p = 0; p < k; ++p) {
      const float av = trans_a ? a.data<float>()[p * m + i] : a.data<float>()[i * k + p];
      const float bv = trans_b ? b.data<float>()[j * k + p] : b.data<float>()[p * n + j];
      dot += static_cast<double>(av) * bv;
    }
    if (std::abs(out.data<float>()[i * n + j] - dot) > 1e-4 * std::sqrt(static_cast<double>(k))) {
      state.SkipWithError("Matmul result differs from the reference dot product");
      return;
    }
  }
  for (auto _ : state) bench.backend->Matmul(a, trans_a, b, trans_b, out, false);
  SetCounters(state, 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n));
}

// ---- attention, B=4, T=256, C=256, NH=8: causal flops count only the T(T+1)/2 live scores.
double AttentionForwardFlops() {
  const double live = kSeq * (kSeq + 1) / 2.0;
  return 2.0 * 2.0 * kBatch * kHeads * live * (kChannels / kHeads);  // Q K^T and P V
}

void BM_AttentionForward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor qkv = bench.Random({kBatch, kSeq, 3 * kChannels});
  Tensor out = bench.Zeros({kBatch, kSeq, kChannels});
  Tensor probs = bench.Zeros({kBatch, kHeads, kSeq, kSeq});
  bench.backend->AttentionForward(qkv, kHeads, out, probs);
  // Check: position 0 attends only to itself, so its output is its own v.
  for (int64_t b = 0; b < kBatch; ++b) {
    for (int64_t c = 0; c < kChannels; ++c) {
      const float v = qkv.data<float>()[b * kSeq * 3 * kChannels + 2 * kChannels + c];
      if (std::abs(out.data<float>()[b * kSeq * kChannels + c] - v) > 1e-6f) {
        state.SkipWithError("attention output at t=0 is not v at t=0");
        return;
      }
    }
  }
  for (auto _ : state) bench.backend->AttentionForward(qkv, kHeads, out, probs);
  SetCounters(state, AttentionForwardFlops(), 4.0 * (qkv.numel() + out.numel() + probs.numel()));
}

void BM_AttentionBackward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor qkv = bench.Random({kBatch, kSeq, 3 * kChannels});
  Tensor out = bench.Zeros({kBatch, kSeq, kChannels});
  Tensor probs = bench.Zeros({kBatch, kHeads, kSeq, kSeq});
  bench.backend->AttentionForward(qkv, kHeads, out, probs);
  Tensor dout = bench.Random(out.shape());
  Tensor dqkv = bench.Zeros(qkv.shape());
  bench.backend->AttentionBackward(dout, qkv, probs, kHeads, dqkv);
  // Check: the query at t=0 sees one key, so its softmax has no gradient.
  bool ok = bench.backend->AllFinite(dqkv);
  for (int64_t c = 0; c < kChannels; ++c) ok = ok && dqkv.data<float>()[c] == 0.0f;
  if (!ok) {
    state.SkipWithError("attention backward: dq at t=0 is not zero");
    return;
  }
  for (auto _ : state) bench.backend->AttentionBackward(dout, qkv, probs, kHeads, dqkv);
  SetCounters(state, 2.0 * AttentionForwardFlops(),
              4.0 * (2 * qkv.numel() + dout.numel() + probs.numel()));
}

// ---- attention's forward + backward at length T, materialized vs flash; args: flash, T.
// One sequence, C = 512, 8 heads of D = 64 (GPT-2's head size), one thread. Counters: the
// GFLOP/s of the causal products (forward + backward as AttentionForward/Backward count them),
// held_MiB = what the forward keeps for the backward (probs, or lse), peak_MiB = the ledger's
// peak above the inputs and outputs (held + workspace).
void BM_AttentionStep(benchmark::State& state) {
  constexpr int64_t kStepChannels = 512, kStepHeads = 8;
  const bool flash = state.range(0) != 0;
  const int64_t seq = state.range(1);
  Bench bench(1);
  Tensor qkv = bench.Random({1, seq, 3 * kStepChannels});
  Tensor dout = bench.Random({1, seq, kStepChannels});
  Tensor out = bench.Zeros(dout.shape()), dqkv = bench.Zeros(qkv.shape());
  const int64_t base = bench.ledger.Current().total;
  bench.ledger.ResetPeaks();
  const auto step = [&] {
    if (flash) {
      Tensor lse = bench.Zeros({1, kStepHeads, seq});
      bench.backend->FlashAttentionForward(qkv, kStepHeads, out, lse);
      bench.backend->FlashAttentionBackward(dout, qkv, out, lse, kStepHeads, dqkv);
      return lse.nbytes();
    }
    Tensor probs = bench.Zeros({1, kStepHeads, seq, seq});
    bench.backend->AttentionForward(qkv, kStepHeads, out, probs);
    bench.backend->AttentionBackward(dout, qkv, probs, kStepHeads, dqkv);
    return probs.nbytes();
  };
  const int64_t held = step();
  const int64_t peak = bench.ledger.Peak().total - base;
  // Check: the query at t=0 sees one key, so its output is its v and its dq is zero (up to
  // rounding in flash's rowsum(dO O) - dO v).
  bool ok = bench.backend->AllFinite(dqkv);
  for (int64_t c = 0; c < kStepChannels; ++c) {
    ok = ok && std::abs(dqkv.data<float>()[c]) <= 1e-5f &&
         std::abs(out.data<float>()[c] - qkv.data<float>()[2 * kStepChannels + c]) <= 1e-6f;
  }
  if (!ok) {
    state.SkipWithError("attention at t=0: out is not v, or dq is not zero");
    return;
  }
  for (auto _ : state) step();
  const double live = seq * (seq + 1) / 2.0;
  SetCounters(state, 3.0 * 2.0 * 2.0 * live * kStepChannels, 0.0);
  state.counters.erase("GB/s");
  state.counters["held_MiB"] = static_cast<double>(held) / (1 << 20);
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.SetLabel(flash ? "flash" : "materialized");
}

// ---- LayerNorm (N,C): nominal 8 flops per element forward, 14 backward (README).
void BM_LayerNormForward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor x = bench.Random({kRows, kChannels}, 3.0f);
  Tensor weight = bench.Zeros({kChannels}), bias = bench.Zeros({kChannels});
  for (int64_t c = 0; c < kChannels; ++c) weight.data<float>()[c] = 1.0f;
  Tensor out = bench.Zeros(x.shape()), mean = bench.Zeros({kRows}), rstd = bench.Zeros({kRows});
  bench.backend->LayerNormForward(x, weight, bias, out, mean, rstd);
  // Check: with unit weight and zero bias every row has mean 0 and variance ~1.
  double sum = 0.0, squares = 0.0;
  for (int64_t c = 0; c < kChannels; ++c) {
    sum += out.data<float>()[c];
    squares += static_cast<double>(out.data<float>()[c]) * out.data<float>()[c];
  }
  if (std::abs(sum / kChannels) > 1e-5 || std::abs(squares / kChannels - 1.0) > 1e-3) {
    state.SkipWithError("LayerNorm row is not normalised");
    return;
  }
  for (auto _ : state) bench.backend->LayerNormForward(x, weight, bias, out, mean, rstd);
  SetCounters(state, 8.0 * x.numel(), 4.0 * (2 * x.numel() + 2 * kChannels + 2 * kRows));
}

void BM_LayerNormBackward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor x = bench.Random({kRows, kChannels}, 3.0f);
  Tensor weight = bench.Zeros({kChannels}), bias = bench.Zeros({kChannels});
  for (int64_t c = 0; c < kChannels; ++c) weight.data<float>()[c] = 1.0f;
  Tensor out = bench.Zeros(x.shape()), mean = bench.Zeros({kRows}), rstd = bench.Zeros({kRows});
  bench.backend->LayerNormForward(x, weight, bias, out, mean, rstd);
  Tensor dout = bench.Random(x.shape());
  Tensor dx = bench.Zeros(x.shape()), dweight = bench.Zeros({kChannels});
  Tensor dbias = bench.Zeros({kChannels});
  bench.backend->LayerNormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
  // Check: with a constant weight each row of dx sums to zero.
  double row_sum = 0.0, magnitude = 0.0;
  for (int64_t c = 0; c < kChannels; ++c) {
    row_sum += dx.data<float>()[c];
    magnitude += std::abs(dx.data<float>()[c]);
  }
  if (std::abs(row_sum) > 1e-5 * magnitude) {
    state.SkipWithError("LayerNorm dx row does not sum to zero");
    return;
  }
  for (auto _ : state) {
    bench.backend->LayerNormBackward(dout, x, weight, mean, rstd, dx, dweight, dbias);
  }
  SetCounters(state, 14.0 * x.numel(), 4.0 * (4 * x.numel() + 4 * kChannels + 2 * kRows));
}

// ---- GELU on the MLP's (N, 4C): nominal 10 flops per element forward, 16 backward (README).
double GeluReference(double x) {
  return 0.5 * x *
         (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

void BM_GeluForward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor x = bench.Random({kRows, 4 * kChannels}, 2.0f);
  Tensor out = bench.Zeros(x.shape());
  bench.backend->GeluForward(x, out);
  for (int64_t i = 0; i < x.numel(); i += 997) {
    const double expected = GeluReference(x.data<float>()[i]);
    if (std::abs(out.data<float>()[i] - expected) > 1e-5 * (1.0 + std::abs(expected))) {
      state.SkipWithError("GELU differs from the tanh formula");
      return;
    }
  }
  for (auto _ : state) bench.backend->GeluForward(x, out);
  SetCounters(state, 10.0 * x.numel(), 8.0 * x.numel());
}

void BM_GeluBackward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor x = bench.Random({kRows, 4 * kChannels}, 2.0f);
  Tensor dout = bench.Random(x.shape());
  Tensor dx = bench.Zeros(x.shape());
  bench.backend->GeluBackward(x, dout, dx);
  for (int64_t i = 0; i < x.numel(); i += 997) {  // central difference of the reference
    const double v = x.data<float>()[i], h = 1e-4;
    const double slope = (GeluReference(v + h) - GeluReference(v - h)) / (2 * h);
    if (std::abs(dx.data<float>()[i] - slope * dout.data<float>()[i]) > 1e-4) {
      state.SkipWithError("GELU backward differs from the reference slope");
      return;
    }
  }
  for (auto _ : state) bench.backend->GeluBackward(x, dout, dx);
  SetCounters(state, 16.0 * x.numel(), 16.0 * x.numel());
}

// ---- cross-entropy backward on (N, V): nominal 5 flops per logit (README).
void BM_CrossEntropyBackward(benchmark::State& state) {
  Bench bench(Threads(state));
  Tensor logits = bench.Random({kRows, kVocab}, 2.0f);
  Tensor targets =
      Tensor::Empty(bench.backend->allocator(), {kRows}, DType::kI32, MemCategory::kActivations);
  for (int64_t r = 0; r < kRows; ++r) targets.data<int32_t>()[r] = static_cast<int32_t>(r % kVocab);
  Tensor dlogits = bench.Zeros(logits.shape());
  bench.backend->CrossEntropyBackward(logits, targets, 1.0f, dlogits);
  double row_sum = 0.0;  // softmax minus one-hot sums to zero
  for (int64_t v = 0; v < kVocab; ++v) row_sum += dlogits.data<float>()[v];
  if (std::abs(row_sum) > 1e-8) {
    state.SkipWithError("cross-entropy gradient row does not sum to zero");
    return;
  }
  for (auto _ : state) bench.backend->CrossEntropyBackward(logits, targets, 1.0f, dlogits);
  SetCounters(state, 5.0 * logits.numel(), 8.0 * logits.numel());
}

// ---- AdamW on one MLP matrix (C x 4C = 262144 parameters), f32 state (arg 0) or 8-bit (arg 1):
// the optimizer step of optimizer.state f32 and int8. GB/s counts the bytes each reads and writes
// (param and grad f32 both ways; m and v f32, or u8 codes plus one f32 absmax per 256).
void BM_AdamW(benchmark::State& state) {
  Bench bench(Threads(state));
  const bool eight_bit = state.range(1) == 1;
  const int64_t n = state.range(2);  // one MLP matrix (in cache), or a model's worth (not)
  Tensor param = bench.Random({n}, 0.02f);
  Tensor grad = bench.Random({n}, 1e-3f);
  const auto state_tensor = [&](int64_t count, DType dtype) {
    return Tensor::Zeros(bench.backend->allocator(), {count}, dtype, MemCategory::kOptimizer);
  };
  const DType code = eight_bit ? DType::kU8 : DType::kF32;
  Tensor m = state_tensor(n, code), v = state_tensor(n, code);
  Tensor m_absmax = state_tensor(QuantBlocks(n), DType::kF32);
  Tensor v_absmax = state_tensor(QuantBlocks(n), DType::kF32);
  AdamWConfig config;
  const auto step = [&] {
    if (eight_bit) {
      bench.backend->AdamW8bit(param, grad, m, m_absmax, v, v_absmax, config, 1.0f);
    } else {
      bench.backend->AdamW(param, grad, m, v, config, 1.0f);
    }
    ++config.step;
  };
  step();
  if (!std::isfinite(param.data<float>()[0]) || param.data<float>()[0] == 0.0f) {
    state.SkipWithError("AdamW left a non-finite or zero parameter");
    return;
  }
  for (auto _ : state) step();
  const double state_bytes = eight_bit ? 2.0 * (2.0 * n + 8.0 * QuantBlocks(n)) : 16.0 * n;
  SetCounters(state, 0.0, 16.0 * n + state_bytes);
  state.SetLabel(eight_bit ? "int8 state" : "f32 state");
}

// GEMMs of one transformer block at N=1024, C=256: forward qkv, attention projection, MLP up
// and down; the backward's weight gradient (a^T b) and input gradient (a b^T) of the MLP up.
void GemmArgs(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({threads, kRows, kChannels, 3 * kChannels, 0, 0});
    b->Args({threads, kRows, kChannels, kChannels, 0, 0});
    b->Args({threads, kRows, kChannels, 4 * kChannels, 0, 0});
    b->Args({threads, kRows, 4 * kChannels, kChannels, 0, 0});
    b->Args({threads, kChannels, kRows, 4 * kChannels, 1, 0});
    b->Args({threads, kRows, 4 * kChannels, kChannels, 0, 1});
  }
  b->ArgNames({"threads", "M", "K", "N", "ta", "tb"});
}

BENCHMARK(BM_Matmul)->Apply(GemmArgs)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_AttentionForward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionBackward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AttentionStep)
    ->ArgNames({"flash", "T"})
    ->ArgsProduct({{0, 1}, {256, 1024, 2048}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_LayerNormForward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_LayerNormBackward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_GeluForward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_GeluBackward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_AdamW)
    ->ArgsProduct({{1, 2}, {0, 1}, {kChannels * 4 * kChannels, int64_t{8} << 20}})
    ->ArgNames({"threads", "int8", "n"})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_CrossEntropyBackward)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace baton
