#include "core/memory.h"

#include <gtest/gtest.h>

#include "core/tensor.h"

namespace baton {
namespace {

TEST(MemoryLedgerTest, TracksCurrentAndPeakPerCategoryAndTotal) {
  MemoryLedger ledger;
  ledger.Book(MemCategory::kParams, 100);
  ledger.Book(MemCategory::kActivations, 50);
  ledger.Release(MemCategory::kActivations, 50);
  ledger.Book(MemCategory::kGrads, 30);
  EXPECT_EQ(ledger.current(MemCategory::kParams), 100);
  EXPECT_EQ(ledger.current(MemCategory::kActivations), 0);
  EXPECT_EQ(ledger.peak(MemCategory::kActivations), 50);
  EXPECT_EQ(ledger.Current().total, 130);
  // The total peak is the peak of the sum (150), not the sum of the peaks (180).
  EXPECT_EQ(ledger.Peak().total, 150);
}

TEST(MemoryLedgerTest, ReleasingMoreThanBookedIsAnError) {
  MemoryLedger ledger;
  ledger.Book(MemCategory::kComm, 8);
  EXPECT_THROW(ledger.Release(MemCategory::kComm, 9), std::runtime_error);
}

TEST(MemoryLedgerTest, ResetPeaksStartsANewWindow) {
  MemoryLedger ledger;
  ledger.Book(MemCategory::kWorkspace, 64);
  ledger.Release(MemCategory::kWorkspace, 64);
  ledger.ResetPeaks();
  EXPECT_EQ(ledger.peak(MemCategory::kWorkspace), 0);
}

TEST(CpuAllocatorTest, TensorsBookExactBytesAndReleaseOnLastHandle) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  {
    Tensor t = Tensor::Empty(allocator, {3, 5}, DType::kBF16, MemCategory::kOptimizer);
    EXPECT_EQ(ledger.current(MemCategory::kOptimizer), 30);
    Tensor view = t.Slice(0, 1, 2);
    t = Tensor();
    EXPECT_EQ(ledger.current(MemCategory::kOptimizer), 30);  // the view keeps it alive
    EXPECT_EQ(reinterpret_cast<uintptr_t>(view.raw()) % 2, 0u);
  }
  EXPECT_EQ(ledger.current(MemCategory::kOptimizer), 0);
  EXPECT_EQ(ledger.peak(MemCategory::kOptimizer), 30);
}

}  // namespace
}  // namespace baton
