// MeasureSgemmGflops: a usable figure for any thread count, and argument checks.
#include "kernels/cpu/gemm_peak.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace baton {
namespace {

TEST(GemmPeakTest, ReportsAFiniteRateForOneAndTwoThreads) {
  for (int threads : {1, 2}) {
    const double gflops = MeasureSgemmGflops(300, 64, 32, 2, threads);
    EXPECT_TRUE(std::isfinite(gflops)) << threads;
    EXPECT_GT(gflops, 0.0) << threads;
  }
}

TEST(GemmPeakTest, RejectsEmptySizesAndZeroRepeats) {
  EXPECT_THROW(MeasureSgemmGflops(0, 8, 8, 1), Error);
  EXPECT_THROW(MeasureSgemmGflops(8, 8, 8, 0), Error);
  EXPECT_THROW(MeasureSgemmGflops(8, 8, 8, 1, 0), Error);
}

}  // namespace
}  // namespace baton
