// The caching allocator on a real GPU: cudaMalloc only on misses, reuse after free, the ledger at
// requested sizes, a clear error for an impossible request, and the backend's scratch returning
// to the cache (steady state: a repeated step allocates nothing new from the device).
#include <gmock/gmock.h>

#include "core/error.h"
#include "kernels/cuda/caching_allocator.h"
#include "kernels/cuda/cuda_test_util.h"

namespace baton::cuda_test {
namespace {

using cuda::CacheStats;
using cuda::CachingAllocator;

class CudaCachingAllocatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (cuda::CudaDeviceCount(&why) == 0) GTEST_SKIP() << "no CUDA device: " << why;
    allocator_ = std::make_unique<CachingAllocator>(ledger_, cuda::MakeCudaMemoryProvider(0));
  }
  MemoryLedger ledger_;
  std::unique_ptr<CachingAllocator> allocator_;
};

TEST_F(CudaCachingAllocatorTest, ReusesFreedDeviceBlocks) {
  void* a = allocator_->Allocate(3 << 20, MemCategory::kActivations);
  EXPECT_EQ(ledger_.current(MemCategory::kActivations), 3 << 20);
  allocator_->Deallocate(a, 3 << 20, MemCategory::kActivations);
  void* b = allocator_->Allocate((3 << 20) - 100, MemCategory::kActivations);
  EXPECT_EQ(a, b);
  const CacheStats stats = allocator_->Stats();
  EXPECT_EQ(stats.device_mallocs, 1);
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.fragmentation(), 100);
  allocator_->Deallocate(b, (3 << 20) - 100, MemCategory::kActivations);
  allocator_->EmptyCache();
  EXPECT_EQ(allocator_->Stats().reserved, 0);
}

TEST_F(CudaCachingAllocatorTest, ImpossibleRequestThrowsOutOfMemory) {
  try {
    allocator_->Allocate(size_t{1} << 50, MemCategory::kParams);  // 1 PiB
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("out of memory on cuda:0"));
  }
  EXPECT_EQ(ledger_.current(MemCategory::kParams), 0);
}

TEST_F(CudaVsCpuTest, BackendScratchComesBackToTheCache) {
  auto& allocator = static_cast<cuda::CudaBackend&>(gpu()).caching_allocator();
  const Tensor x = ToGpu(Random({512, 768}));
  const Tensor w = ToGpu(Random({768}));
  const Tensor dout = ToGpu(Random({512, 768}));
  Tensor mean = GpuZeros({512}), rstd = GpuZeros({512}), out = GpuZeros({512, 768});
  Tensor dx = GpuZeros({512, 768}), dw = GpuZeros({768}), db = GpuZeros({768});
  const auto step = [&] {
    gpu().LayerNormForward(x, w, w, out, mean, rstd);
    gpu().LayerNormBackward(dout, x, w, mean, rstd, dx, dw, db);
    gpu().Synchronize();
  };
  step();
  const int64_t workspace_after_first = gpu_ledger_.current(MemCategory::kWorkspace);
  const int64_t mallocs_after_first = allocator.Stats().device_mallocs;
  step();
  EXPECT_EQ(allocator.Stats().device_mallocs, mallocs_after_first);  // all from the cache
  EXPECT_EQ(gpu_ledger_.current(MemCategory::kWorkspace), workspace_after_first);
  EXPECT_GT(gpu_ledger_.peak(MemCategory::kWorkspace), workspace_after_first);  // scratch booked
}

}  // namespace
}  // namespace baton::cuda_test
