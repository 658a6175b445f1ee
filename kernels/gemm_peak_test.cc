// MeasureGemmGflops: a usable figure for any thread count, and argument checks.
#include "kernels/cpu/gemm_peak.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace baton {
namespace {

TEST(GemmPeakTest, ReportsAFiniteRateForOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    const double gflops = MeasureGemmGflops(300, 64, 32, 2, threads);
    EXPECT_TRUE(std::isfinite(gflops)) << threads;
    EXPECT_GT(gflops, 0.0) << threads;
  }
  // bf16 operands, however this CPU multiplies them (gemm.h's Bf16GemmSupported).
  const double bf16 = MeasureGemmGflops(128, 64, 32, 2, 1, DType::kBF16);
  EXPECT_TRUE(std::isfinite(bf16));
  EXPECT_GT(bf16, 0.0);
}

TEST(GemmPeakTest, RejectsEmptySizesAndZeroRepeats) {
  EXPECT_THROW(MeasureGemmGflops(0, 8, 8, 1), Error);
  EXPECT_THROW(MeasureGemmGflops(8, 8, 8, 0), Error);
  EXPECT_THROW(MeasureGemmGflops(8, 8, 8, 1, 0), Error);
  EXPECT_THROW(MeasureGemmGflops(8, 8, 8, 1, 1, DType::kF16), Error);
}

}  // namespace
}  // namespace baton
