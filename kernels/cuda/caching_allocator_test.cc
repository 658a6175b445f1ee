// CachingAllocator's bookkeeping on a fake device: the ledger sees requested sizes, frees go to
// the cache, the device is asked only on a miss, out-of-memory empties the cache and retries,
// and the reported figures (reserved, cached, peak, fragmentation) add up. Runs without a GPU.
#include "kernels/cuda/caching_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <set>

#include "core/error.h"
#include "core/tensor.h"

namespace baton::cuda {
namespace {

// Host memory standing in for a GPU of `capacity` bytes; counts calls. Owned by the allocator,
// observed by the test through `FakeDeviceState`.
struct FakeDeviceState {
  size_t capacity = size_t{1} << 30;
  size_t used = 0;
  int mallocs = 0;
  int frees = 0;
  int failed_mallocs = 0;
  std::set<void*> live;
};

class FakeDevice final : public DeviceMemoryProvider {
 public:
  explicit FakeDevice(FakeDeviceState& state) : state_(state) {}
  ~FakeDevice() override = default;
  Device device() const override { return Device::Cuda(3); }
  void* Malloc(size_t bytes) override {
    if (state_.used + bytes > state_.capacity) {
      ++state_.failed_mallocs;
      return nullptr;
    }
    void* p = std::malloc(bytes);
    state_.used += bytes;
    ++state_.mallocs;
    state_.live.insert(p);
    sizes_[p] = bytes;
    return p;
  }
  void Free(void* p) override {
    BATON_CHECK(state_.live.erase(p) == 1, "fake device: double free");
    state_.used -= sizes_.at(p);
    sizes_.erase(p);
    ++state_.frees;
    std::free(p);
  }

 private:
  FakeDeviceState& state_;
  std::unordered_map<void*, size_t> sizes_;
};

class CachingAllocatorTest : public ::testing::Test {
 protected:
  CachingAllocatorTest() : allocator_(ledger_, std::make_unique<FakeDevice>(device_)) {}

  FakeDeviceState device_;
  MemoryLedger ledger_;
  CachingAllocator allocator_;
};

TEST(CachingAllocatorBlockBytes, RoundsToSizeClasses) {
  EXPECT_EQ(CachingAllocator::BlockBytes(0), 512u);
  EXPECT_EQ(CachingAllocator::BlockBytes(1), 512u);
  EXPECT_EQ(CachingAllocator::BlockBytes(512), 512u);
  EXPECT_EQ(CachingAllocator::BlockBytes(513), 1024u);
  EXPECT_EQ(CachingAllocator::BlockBytes((1 << 20) - 1), size_t{1} << 20);
  EXPECT_EQ(CachingAllocator::BlockBytes(1 << 20), size_t{1} << 20);
  // Above 1 MiB: steps of 1/8 of the power of two below.
  EXPECT_EQ(CachingAllocator::BlockBytes((1 << 20) + 1), (size_t{1} << 20) + (1 << 17));
  EXPECT_EQ(CachingAllocator::BlockBytes(200'000'000), 201'326'592u);  // 12 x 16 MiB
  for (size_t bytes : {size_t{3} << 20, size_t{12345678}, size_t{1} << 33}) {
    const size_t block = CachingAllocator::BlockBytes(bytes);
    EXPECT_GE(block, bytes);
    EXPECT_LE(static_cast<double>(block), 1.125 * static_cast<double>(bytes)) << bytes;
  }
}

TEST_F(CachingAllocatorTest, LedgerBooksRequestedBytesNotBlockBytes) {
  void* p = allocator_.Allocate(1000, MemCategory::kActivations);
  EXPECT_EQ(ledger_.current(MemCategory::kActivations), 1000);
  const CacheStats stats = allocator_.Stats();
  EXPECT_EQ(stats.in_use, 1000);
  EXPECT_EQ(stats.reserved, 1024);
  EXPECT_EQ(stats.fragmentation(), 24);
  allocator_.Deallocate(p, 1000, MemCategory::kActivations);
  EXPECT_EQ(ledger_.current(MemCategory::kActivations), 0);
  EXPECT_EQ(ledger_.peak(MemCategory::kActivations), 1000);
}

TEST_F(CachingAllocatorTest, FreedBlockIsReusedWithoutAskingTheDevice) {
  void* first = allocator_.Allocate(4000, MemCategory::kWorkspace);
  allocator_.Deallocate(first, 4000, MemCategory::kWorkspace);
  EXPECT_EQ(device_.frees, 0);  // kept in the cache
  EXPECT_EQ(allocator_.Stats().cached, 4096);
  void* second = allocator_.Allocate(3900, MemCategory::kGrads);  // same size class
  EXPECT_EQ(second, first);
  EXPECT_EQ(device_.mallocs, 1);
  const CacheStats stats = allocator_.Stats();
  EXPECT_EQ(stats.cache_hits, 1);
  EXPECT_EQ(stats.device_mallocs, 1);
  EXPECT_EQ(stats.cached, 0);
  EXPECT_EQ(ledger_.current(MemCategory::kGrads), 3900);
  allocator_.Deallocate(second, 3900, MemCategory::kGrads);
}

TEST_F(CachingAllocatorTest, OtherSizeClassIsAMiss) {
  void* small = allocator_.Allocate(512, MemCategory::kParams);
  allocator_.Deallocate(small, 512, MemCategory::kParams);
  void* big = allocator_.Allocate(5000, MemCategory::kParams);
  EXPECT_NE(big, small);
  EXPECT_EQ(device_.mallocs, 2);
  const CacheStats stats = allocator_.Stats();
  EXPECT_EQ(stats.reserved, 512 + 5120);
  EXPECT_EQ(stats.cached, 512);
  EXPECT_EQ(stats.fragmentation(), 512 + 120);
  allocator_.Deallocate(big, 5000, MemCategory::kParams);
}

TEST_F(CachingAllocatorTest, ZeroBytesGivesADistinctNonNullPointer) {
  void* a = allocator_.Allocate(0, MemCategory::kWorkspace);
  void* b = allocator_.Allocate(0, MemCategory::kWorkspace);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(ledger_.current(MemCategory::kWorkspace), 0);
  allocator_.Deallocate(a, 0, MemCategory::kWorkspace);
  allocator_.Deallocate(b, 0, MemCategory::kWorkspace);
}

TEST_F(CachingAllocatorTest, PeakReservedAndResetPeak) {
  void* a = allocator_.Allocate(1 << 20, MemCategory::kActivations);
  void* b = allocator_.Allocate(1 << 20, MemCategory::kActivations);
  allocator_.Deallocate(a, 1 << 20, MemCategory::kActivations);
  EXPECT_EQ(allocator_.Stats().peak_reserved, 2 << 20);
  allocator_.EmptyCache();
  EXPECT_EQ(device_.frees, 1);
  EXPECT_EQ(allocator_.Stats().reserved, 1 << 20);
  EXPECT_EQ(allocator_.Stats().peak_reserved, 2 << 20);
  allocator_.ResetPeak();
  EXPECT_EQ(allocator_.Stats().peak_reserved, 1 << 20);
  allocator_.Deallocate(b, 1 << 20, MemCategory::kActivations);
}

TEST_F(CachingAllocatorTest, OutOfMemoryEmptiesTheCacheAndRetries) {
  device_.capacity = 3 << 20;
  void* a = allocator_.Allocate(1 << 20, MemCategory::kActivations);
  void* b = allocator_.Allocate(1 << 20, MemCategory::kActivations);
  allocator_.Deallocate(a, 1 << 20, MemCategory::kActivations);
  allocator_.Deallocate(b, 1 << 20, MemCategory::kActivations);
  // 2 MiB cached of 1 MiB blocks; a 2 MiB block does not fit next to them.
  void* c = allocator_.Allocate(2 << 20, MemCategory::kActivations);
  EXPECT_EQ(device_.failed_mallocs, 1);
  EXPECT_EQ(device_.frees, 2);
  const CacheStats stats = allocator_.Stats();
  EXPECT_EQ(stats.cached, 0);
  EXPECT_EQ(stats.reserved, 2 << 20);
  allocator_.Deallocate(c, 2 << 20, MemCategory::kActivations);
}

TEST_F(CachingAllocatorTest, OutOfMemoryWithNothingCachedThrowsWithTheFigures) {
  device_.capacity = 1 << 20;
  void* a = allocator_.Allocate(1 << 20, MemCategory::kParams);
  try {
    allocator_.Allocate(1 << 20, MemCategory::kActivations);
    FAIL() << "expected out of memory";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("out of memory on cuda:3"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("of activations"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("params 1.00 MiB"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("reserved 1.00 MiB"));
  }
  EXPECT_EQ(ledger_.current(MemCategory::kActivations), 0);  // nothing booked for the failure
  allocator_.Deallocate(a, 1 << 20, MemCategory::kParams);
}

TEST_F(CachingAllocatorTest, DeallocateWithWrongSizeOrUnknownPointerThrows) {
  void* a = allocator_.Allocate(100, MemCategory::kParams);
  EXPECT_THROW(allocator_.Deallocate(a, 99, MemCategory::kParams), Error);
  EXPECT_THROW(allocator_.Deallocate(a, 100, MemCategory::kGrads), Error);
  int not_ours = 0;
  EXPECT_THROW(allocator_.Deallocate(&not_ours, 4, MemCategory::kParams), Error);
  allocator_.Deallocate(a, 100, MemCategory::kParams);
}

TEST_F(CachingAllocatorTest, TensorsRoundTripThroughTheCache) {
  for (int i = 0; i < 5; ++i) {
    Tensor t = Tensor::Empty(allocator_, {256, 3}, DType::kF32, MemCategory::kActivations);
    EXPECT_EQ(t.device(), Device::Cuda(3));
    EXPECT_EQ(ledger_.current(MemCategory::kActivations), 256 * 3 * 4);
  }
  EXPECT_EQ(device_.mallocs, 1);
  EXPECT_EQ(allocator_.Stats().cache_hits, 4);
  EXPECT_EQ(ledger_.current(MemCategory::kActivations), 0);
}

TEST(CachingAllocatorLifetime, DestructionGivesEveryCachedBlockBack) {
  FakeDeviceState device;
  MemoryLedger ledger;
  {
    CachingAllocator allocator(ledger, std::make_unique<FakeDevice>(device));
    void* a = allocator.Allocate(10, MemCategory::kParams);
    void* b = allocator.Allocate(1 << 22, MemCategory::kParams);
    allocator.Deallocate(a, 10, MemCategory::kParams);
    allocator.Deallocate(b, 1 << 22, MemCategory::kParams);
  }
  EXPECT_EQ(device.mallocs, 2);
  EXPECT_EQ(device.frees, 2);
  EXPECT_TRUE(device.live.empty());
}

}  // namespace
}  // namespace baton::cuda
