// CachingAllocator: core's Allocator for GPU memory, with a size-bucketed cache of free blocks.
//
// Every allocation is booked in the ledger at the size asked for (as Allocator requires); the
// block behind it is rounded up to a size class (BlockBytes) and comes from the cache when a free
// block of that class is there, from the device (DeviceMemoryProvider::Malloc, i.e. cudaMalloc)
// only on a miss. Deallocate returns the block to the cache; nothing goes back to the device
// until EmptyCache(), destruction, or an out-of-memory retry (a failed Malloc empties the cache
// and tries once more). What the ledger does not see, the allocator reports itself (CacheStats):
// reserved bytes (held from the device), cached bytes (free blocks), their peak, and
// fragmentation = reserved - in use (rounding plus cache).
//
// Reuse is safe without events because Baton queues all work on a device tensor on the owning
// backend's one compute stream: a block freed by the host and handed out again is only touched by
// work queued after the work that used it (PyTorch's caching allocator makes the same argument).
// Work on another stream (NCCL's) must keep the tensor alive until that work has completed on
// the device (the Communicator contract: its Work holds the storage until Wait()).
//
// Thread safety: all methods may be called from several threads. Tensors must not outlive the
// allocator (blocks still in use at destruction are reported and left allocated).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/memory.h"

namespace baton::cuda {

// Where the cache's blocks come from and go back to: CudaMemoryProvider on a GPU, a fake in tests.
class DeviceMemoryProvider {
 public:
  virtual ~DeviceMemoryProvider() = default;
  virtual Device device() const = 0;
  // `bytes` (> 0) of device memory, or nullptr when the device is out of memory. Other failures
  // throw baton::Error.
  virtual void* Malloc(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
};

// cudaMalloc / cudaFree on GPU `device_index` (made current around each call).
std::unique_ptr<DeviceMemoryProvider> MakeCudaMemoryProvider(int device_index);

struct CacheStats {
  int64_t reserved = 0;        // bytes of device blocks held (in use + cached), at block sizes
  int64_t in_use = 0;          // bytes handed out, at the sizes asked for (the ledger's total)
  int64_t cached = 0;          // bytes of free blocks waiting in the cache
  int64_t peak_reserved = 0;   // the largest `reserved` since construction or ResetPeak()
  int64_t device_mallocs = 0;  // blocks obtained from the device (cache misses)
  int64_t device_frees = 0;    // blocks given back to the device
  int64_t cache_hits = 0;      // allocations served from the cache
  // Held but not handed out: size-class rounding plus the cache.
  int64_t fragmentation() const { return reserved - in_use; }
  // "reserved 1.2 GiB (peak 1.5 GiB), in use 1.0 GiB, cached 0.1 GiB, fragmentation ..."
  std::string ToString() const;
};

class CachingAllocator final : public Allocator {
 public:
  CachingAllocator(MemoryLedger& ledger, std::unique_ptr<DeviceMemoryProvider> provider);
  ~CachingAllocator() override;

  Device device() const override { return device_; }
  // Throws baton::Error (with the ledger's and the cache's figures) when the device is out of
  // memory even after emptying the cache.
  void* Allocate(size_t bytes, MemCategory category) override;
  void Deallocate(void* ptr, size_t bytes, MemCategory category) override;

  CacheStats Stats() const;
  void ResetPeak();  // peak_reserved becomes the current reserved
  // Gives every cached block back to the device (cudaFree waits for the device to be idle).
  void EmptyCache();

  // The size class of an allocation of `bytes`: at least 512 bytes; multiples of 512 below
  // 1 MiB; above, 8 classes per power of two (at most 12.5% rounding).
  static size_t BlockBytes(size_t bytes);

 private:
  struct LiveBlock {
    size_t block_bytes = 0;
    size_t requested = 0;
    MemCategory category = MemCategory::kWorkspace;
  };
  void EmptyCacheLocked();

  std::unique_ptr<DeviceMemoryProvider> provider_;
  Device device_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_blocks_;  // size class -> free blocks (LIFO)
  std::unordered_map<void*, LiveBlock> live_;
  CacheStats stats_;
};

}  // namespace baton::cuda
