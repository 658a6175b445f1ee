// The memory ledger and the allocator interface that books into it.
//
// Every byte of tensor memory in Baton is allocated through an Allocator, and every Allocator
// books each allocation in a MemoryLedger under one category. The ledger keeps current and peak
// bytes per category and in total, exact to the byte: the sizes booked are the sizes asked for
// (an allocator's own rounding or caching is reported separately by that allocator).
//
// Thread safety: MemoryLedger and the allocators are safe to call from several threads.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/device.h"

namespace baton {

// kCheckpoint: the host copy of a rank's state that a background checkpoint writes from
// (output.async_checkpoint; checkpoint/checkpoint_snapshot.h), host memory even on a GPU, as the
// host staging booked as comm is.
enum class MemCategory : uint8_t {
  kParams,
  kGrads,
  kOptimizer,
  kActivations,
  kComm,
  kWorkspace,
  kCheckpoint
};
inline constexpr int kNumMemCategories = 7;
inline constexpr std::array<MemCategory, kNumMemCategories> kAllMemCategories = {
    MemCategory::kParams,      MemCategory::kGrads, MemCategory::kOptimizer,
    MemCategory::kActivations, MemCategory::kComm,  MemCategory::kWorkspace,
    MemCategory::kCheckpoint};

// "params", "grads", "optimizer", "activations", "comm", "workspace", "checkpoint": the
// report's key names.
std::string_view Name(MemCategory category);

// Bytes per category plus a total. For peaks, `total` is the peak of the sum (what the device
// must hold at once), which is at most the sum of the category peaks.
struct MemoryFigures {
  std::array<int64_t, kNumMemCategories> bytes{};
  int64_t total = 0;
  int64_t operator[](MemCategory c) const { return bytes[static_cast<int>(c)]; }
  bool operator==(const MemoryFigures&) const = default;
};

// (name, bytes) per category in kAllMemCategories order, then ("total", total): the key names
// of the report's memory objects and of the coordinator's heartbeat peaks.
std::vector<std::pair<std::string, int64_t>> MemoryEntries(const MemoryFigures& figures);

class MemoryLedger {
 public:
  MemoryLedger() = default;
  MemoryLedger(const MemoryLedger&) = delete;
  MemoryLedger& operator=(const MemoryLedger&) = delete;

  void Book(MemCategory category, int64_t bytes);
  void Release(MemCategory category, int64_t bytes);

  MemoryFigures Current() const;
  MemoryFigures Peak() const;
  int64_t current(MemCategory category) const;
  int64_t peak(MemCategory category) const;
  // Starts a new measurement window: peaks become the current values.
  void ResetPeaks();

 private:
  mutable std::mutex mutex_;
  MemoryFigures current_;
  MemoryFigures peak_;
};

// Hands out raw memory on one device, booked in a ledger the allocator does not own (the ledger
// must outlive it). Deallocate must get the same size and category as the Allocate it undoes.
class Allocator {
 public:
  explicit Allocator(MemoryLedger& ledger) : ledger_(ledger) {}
  virtual ~Allocator() = default;
  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  virtual Device device() const = 0;
  // True for a MetaAllocator: the memory it hands out must never be touched.
  virtual bool is_meta() const { return false; }
  // Never returns null: throws baton::Error when memory runs out. Zero bytes is allowed.
  virtual void* Allocate(size_t bytes, MemCategory category) = 0;
  virtual void Deallocate(void* ptr, size_t bytes, MemCategory category) = 0;

  MemoryLedger& ledger() const { return ledger_; }

 private:
  MemoryLedger& ledger_;
};

// Host memory, 64-byte aligned (cache lines, AVX-512 loads).
class CpuAllocator final : public Allocator {
 public:
  using Allocator::Allocator;
  Device device() const override { return Device::Cpu(); }
  void* Allocate(size_t bytes, MemCategory category) override;
  void Deallocate(void* ptr, size_t bytes, MemCategory category) override;
};

// Books like any allocator but hands out no memory, for the memory planner's meta tensors (a
// shape, a dtype and a ledger booking, no storage; kernels/backend.h, MakeMetaBackend). Each
// allocation gets its own address, never reused, in a range the processor refuses to access
// (non-canonical on x86-64), so code that touches a meta tensor's memory faults at once.
class MetaAllocator final : public Allocator {
 public:
  // `device`: the device whose allocations this stands for.
  MetaAllocator(MemoryLedger& ledger, Device device) : Allocator(ledger), device_(device) {}
  Device device() const override { return device_; }
  bool is_meta() const override { return true; }
  void* Allocate(size_t bytes, MemCategory category) override;
  void Deallocate(void* ptr, size_t bytes, MemCategory category) override;

 private:
  Device device_;
  std::mutex mutex_;
  uint64_t next_ = 0;  // offset of the next address
};

}  // namespace baton
