#include "core/memory.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"

namespace baton {

std::vector<std::pair<std::string, int64_t>> MemoryEntries(const MemoryFigures& figures) {
  std::vector<std::pair<std::string, int64_t>> entries;
  for (MemCategory c : kAllMemCategories) entries.emplace_back(std::string(Name(c)), figures[c]);
  entries.emplace_back("total", figures.total);
  return entries;
}

std::string_view Name(MemCategory category) {
  switch (category) {
    case MemCategory::kParams:
      return "params";
    case MemCategory::kGrads:
      return "grads";
    case MemCategory::kOptimizer:
      return "optimizer";
    case MemCategory::kActivations:
      return "activations";
    case MemCategory::kComm:
      return "comm";
    case MemCategory::kWorkspace:
      return "workspace";
    case MemCategory::kCheckpoint:
      return "checkpoint";
  }
  BATON_FAIL("unknown memory category {}", static_cast<int>(category));
}

void MemoryLedger::Book(MemCategory category, int64_t bytes) {
  const int c = static_cast<int>(category);
  std::lock_guard lock(mutex_);
  current_.bytes[c] += bytes;
  current_.total += bytes;
  peak_.bytes[c] = std::max(peak_.bytes[c], current_.bytes[c]);
  peak_.total = std::max(peak_.total, current_.total);
}

void MemoryLedger::Release(MemCategory category, int64_t bytes) {
  const int c = static_cast<int>(category);
  std::lock_guard lock(mutex_);
  BATON_CHECK(current_.bytes[c] >= bytes, "releasing {} bytes of {} but only {} are booked", bytes,
              Name(category), current_.bytes[c]);
  current_.bytes[c] -= bytes;
  current_.total -= bytes;
}

MemoryFigures MemoryLedger::Current() const {
  std::lock_guard lock(mutex_);
  return current_;
}

MemoryFigures MemoryLedger::Peak() const {
  std::lock_guard lock(mutex_);
  return peak_;
}

int64_t MemoryLedger::current(MemCategory category) const { return Current()[category]; }
int64_t MemoryLedger::peak(MemCategory category) const { return Peak()[category]; }

void MemoryLedger::ResetPeaks() {
  std::lock_guard lock(mutex_);
  peak_ = current_;
}

void* CpuAllocator::Allocate(size_t bytes, MemCategory category) {
  constexpr size_t kAlignment = 64;
  const size_t rounded =
      std::max<size_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  void* ptr = std::aligned_alloc(kAlignment, rounded);
  BATON_CHECK(ptr != nullptr, "out of host memory allocating {} bytes of {}", bytes,
              Name(category));
  ledger().Book(category, static_cast<int64_t>(bytes));
  return ptr;
}

void CpuAllocator::Deallocate(void* ptr, size_t bytes, MemCategory category) {
  std::free(ptr);
  ledger().Release(category, static_cast<int64_t>(bytes));
}

void* MetaAllocator::Allocate(size_t bytes, MemCategory category) {
  // Bit 62 set: non-canonical under 4- and 5-level paging alike.
  constexpr uint64_t kBase = uint64_t{1} << 62;
  constexpr uint64_t kAlignment = 64;
  uint64_t offset = 0;
  {
    std::lock_guard lock(mutex_);
    offset = next_;
    next_ += std::max<uint64_t>(kAlignment, (bytes + kAlignment - 1) / kAlignment * kAlignment);
  }
  ledger().Book(category, static_cast<int64_t>(bytes));
  return reinterpret_cast<void*>(kBase + offset);
}

void MetaAllocator::Deallocate(void* /*ptr*/, size_t bytes, MemCategory category) {
  ledger().Release(category, static_cast<int64_t>(bytes));
}

}  // namespace baton
