// The caching device allocator's bookkeeping (see caching_allocator.h). Plain C++: the device
// calls are behind DeviceMemoryProvider, so this logic is tested on any machine with a fake.
#include "kernels/cuda/caching_allocator.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <bit>

#include "core/error.h"
#include "core/units.h"

namespace baton::cuda {
namespace {

constexpr size_t kMinBlock = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;  // 1 MiB
constexpr int kClassesPerDoubling = 8;

size_t RoundUp(size_t value, size_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

}  // namespace

std::string CacheStats::ToString() const {
  return fmt::format(
      "reserved {} (peak {}), in use {}, cached {}, fragmentation {}; {} device mallocs, {} "
      "frees, {} cache hits",
      FormatBytes(reserved), FormatBytes(peak_reserved), FormatBytes(in_use), FormatBytes(cached),
      FormatBytes(fragmentation()), device_mallocs, device_frees, cache_hits);
}

size_t CachingAllocator::BlockBytes(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes < kSmallLimit) return RoundUp(bytes, kMinBlock);
  const size_t power = std::bit_floor(bytes);
  return RoundUp(bytes, power / kClassesPerDoubling);
}

CachingAllocator::CachingAllocator(MemoryLedger& ledger,
                                   std::unique_ptr<DeviceMemoryProvider> provider)
    : Allocator(ledger), provider_(std::move(provider)), device_(provider_->device()) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  if (!live_.empty()) {
    spdlog::warn("CachingAllocator on {} destroyed with {} blocks ({}) still in use; leaving them",
                 device_.ToString(), live_.size(), FormatBytes(stats_.in_use));
  }
  try {
    EmptyCacheLocked();
  } catch (const std::exception& e) {
    spdlog::error("CachingAllocator on {}: freeing the cache failed: {}", device_.ToString(),
                  e.what());
  }
}

void* CachingAllocator::Allocate(size_t bytes, MemCategory category) {
  const size_t block_bytes = BlockBytes(bytes);
  void* ptr = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto bucket = free_blocks_.find(block_bytes);
    if (bucket != free_blocks_.end() && !bucket->second.empty()) {
      ptr = bucket->second.back();
      bucket->second.pop_back();
      stats_.cached -= static_cast<int64_t>(block_bytes);
      ++stats_.cache_hits;
    } else {
      ptr = provider_->Malloc(block_bytes);
      if (ptr == nullptr && stats_.cached > 0) {  // out of memory: give the cache back, retry
        spdlog::warn("out of memory on {} allocating {}: emptying the cache ({}) and retrying",
                     device_.ToString(), FormatBytes(static_cast<int64_t>(bytes)),
                     FormatBytes(stats_.cached));
        EmptyCacheLocked();
        ptr = provider_->Malloc(block_bytes);
      }
      if (ptr == nullptr) {
        const MemoryFigures booked = ledger().Current();
        std::string by_category;
        for (MemCategory c : kAllMemCategories) {
          by_category += fmt::format(" {} {},", Name(c), FormatBytes(booked[c]));
        }
        BATON_FAIL("out of memory on {} allocating {} ({} block) of {}; booked:{} total {}; {}",
                   device_.ToString(), FormatBytes(static_cast<int64_t>(bytes)),
                   FormatBytes(static_cast<int64_t>(block_bytes)), Name(category), by_category,
                   FormatBytes(booked.total), stats_.ToString());
      }
      ++stats_.device_mallocs;
      stats_.reserved += static_cast<int64_t>(block_bytes);
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    }
    live_[ptr] = LiveBlock{block_bytes, bytes, category};
    stats_.in_use += static_cast<int64_t>(bytes);
  }
  ledger().Book(category, static_cast<int64_t>(bytes));
  return ptr;
}

void CachingAllocator::Deallocate(void* ptr, size_t bytes, MemCategory category) {
  {
    std::lock_guard lock(mutex_);
    auto it = live_.find(ptr);
    BATON_CHECK(it != live_.end(), "Deallocate of {} on {}: not allocated here", ptr,
                device_.ToString());
    const LiveBlock block = it->second;
    BATON_CHECK(block.requested == bytes && block.category == category,
                "Deallocate of {} as {} bytes of {}, but it was allocated as {} bytes of {}", ptr,
                bytes, Name(category), block.requested, Name(block.category));
    live_.erase(it);
    free_blocks_[block.block_bytes].push_back(ptr);
    stats_.cached += static_cast<int64_t>(block.block_bytes);
    stats_.in_use -= static_cast<int64_t>(bytes);
  }
  ledger().Release(category, static_cast<int64_t>(bytes));
}

CacheStats CachingAllocator::Stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::ResetPeak() {
  std::lock_guard lock(mutex_);
  stats_.peak_reserved = stats_.reserved;
}

void CachingAllocator::EmptyCache() {
  std::lock_guard lock(mutex_);
  EmptyCacheLocked();
}

void CachingAllocator::EmptyCacheLocked() {
  for (auto& [block_bytes, blocks] : free_blocks_) {
    while (!blocks.empty()) {
      provider_->Free(blocks.back());
      blocks.pop_back();
      stats_.cached -= static_cast<int64_t>(block_bytes);
      stats_.reserved -= static_cast<int64_t>(block_bytes);
      ++stats_.device_frees;
    }
  }
  free_blocks_.clear();
}

}  // namespace baton::cuda
