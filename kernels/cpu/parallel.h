// ParallelFor: the one way the CPU kernels use threads (a ThreadPool; see thread_pool.h).
//
// Determinism rule: `body(i)` must compute item i the same way whichever thread runs it, and
// items must not write to the same memory. Reductions across items are then done by the caller in
// a fixed order, so results are bit-identical for any thread count. Bodies must not throw:
// validate inputs before. Internal to kernels/cpu.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/thread_pool.h"

namespace baton::cpu {

// Below this many elements of work a loop is not worth waking threads for.
inline constexpr int64_t kMinParallelWork = 1 << 15;

// Runs body(i, slot) for i in [0, n), slot in [0, pool threads) naming the running thread (for
// per-thread scratch; the result must not depend on it). `pool` may be null (serial).
// `work_per_item` (elements touched per item, roughly) decides whether threading pays off.
template <typename Body>
void ParallelForWithSlot(int64_t n, ThreadPool* pool, int64_t work_per_item, const Body& body) {
  if (pool == nullptr || pool->threads() == 1 || n < 2 || n * work_per_item < kMinParallelWork) {
    for (int64_t i = 0; i < n; ++i) body(i, 0);
    return;
  }
  // Contiguous ranges of items, a few per thread so that late threads just do fewer.
  const int64_t tasks = std::min<int64_t>(n, 8 * pool->threads());
  const auto run_range = [&](int64_t task, int slot) {
    const int64_t begin = n * task / tasks;
    const int64_t end = n * (task + 1) / tasks;
    for (int64_t i = begin; i < end; ++i) body(i, slot);
  };
  pool->Run(tasks, run_range);
}

// As ParallelForWithSlot, for bodies that need no slot: body(i).
template <typename Body>
void ParallelFor(int64_t n, ThreadPool* pool, int64_t work_per_item, const Body& body) {
  ParallelForWithSlot(n, pool, work_per_item, [&](int64_t i, int) { body(i); });
}

// Splits [0, n) into fixed-size chunks (independent of the thread count) and runs
// body(begin, end) for each in parallel.
template <typename Body>
void ParallelChunks(int64_t n, int64_t chunk, ThreadPool* pool, const Body& body) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  ParallelFor(num_chunks, pool, chunk, [&](int64_t c) {
    const int64_t begin = c * chunk;
    body(begin, std::min(n, begin + chunk));
  });
}

}  // namespace baton::cpu
