#include "core/tensor.h"

#include <gtest/gtest.h>

namespace baton {
namespace {

TEST(TensorTest, ViewAndSliceShareStorage) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  Tensor t = Tensor::Zeros(allocator, {2, 3, 4}, DType::kF32, MemCategory::kActivations);
  EXPECT_TRUE(t.is_contiguous());
  Tensor flat = t.View({6, -1});
  EXPECT_EQ(flat.shape(), (Shape{6, 4}));
  Tensor rows = flat.Slice(0, 2, 4);
  rows.data<float>()[0] = 7.0f;
  EXPECT_EQ(t.data<float>()[8], 7.0f);
  EXPECT_TRUE(rows.is_contiguous());
  EXPECT_FALSE(t.Slice(2, 1, 3).is_contiguous());
  EXPECT_THROW(t.View({5, 5}), std::runtime_error);
  EXPECT_THROW(t.Slice(1, 2, 4), std::runtime_error);
  EXPECT_THROW(t.data<int32_t>(), std::runtime_error);
}

TEST(TensorTest, CopyHostConvertsFloatTypes) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  Tensor a = Tensor::Empty(allocator, {4}, DType::kF32, MemCategory::kWorkspace);
  for (int i = 0; i < 4; ++i) a.data<float>()[i] = 0.5f * static_cast<float>(i) - 1.0f;
  Tensor b = Tensor::Empty(allocator, {4}, DType::kBF16, MemCategory::kWorkspace);
  CopyHost(a, b);
  EXPECT_EQ(ToFloatVector(b), ToFloatVector(a));
  EXPECT_EQ(b.ToString(), "bf16(4) workspace");
}

TEST(TensorTest, ReleasedStorageIsBookedOffUntilRestored) {
  MemoryLedger ledger;
  CpuAllocator allocator(ledger);
  Tensor t = Tensor::Zeros(allocator, {4, 8}, DType::kF32, MemCategory::kGrads);
  const Tensor row = t.Slice(0, 1, 2);
  EXPECT_EQ(ledger.current(MemCategory::kGrads), 128);
  t.storage()->Release();
  EXPECT_EQ(ledger.current(MemCategory::kGrads), 0);
  EXPECT_FALSE(row.storage()->resident());
  EXPECT_THROW(row.data<float>(), std::runtime_error);  // every view sees it
  EXPECT_THROW(t.storage()->Release(), std::runtime_error);
  t.storage()->Restore();
  EXPECT_EQ(ledger.current(MemCategory::kGrads), 128);
  row.data<float>()[0] = 3.0f;
  EXPECT_EQ(t.data<float>()[8], 3.0f);
  EXPECT_THROW(t.storage()->Restore(), std::runtime_error);
  {
    Tensor u = Tensor::Empty(allocator, {2}, DType::kF32, MemCategory::kGrads);
    u.storage()->Release();
  }  // a released storage's last handle books nothing off twice
  EXPECT_EQ(ledger.current(MemCategory::kGrads), 128);
  float outside = 0;
  EXPECT_THROW(Tensor::Wrap(&outside, {1}, DType::kF32).storage()->Release(), std::runtime_error);
}

}  // namespace
}  // namespace baton
