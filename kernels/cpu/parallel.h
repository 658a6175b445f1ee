// ParallelFor: the one way the CPU kernels use threads (OpenMP, static partition).
//
// Determinism rule: `body(i)` must compute item i the same way whichever thread runs it, and
// items must not write to the same memory. Reductions across items are then done by the caller in
// a fixed order, so results are bit-identical for any thread count. Bodies must not throw (an
// exception escaping an OpenMP region terminates the process): validate inputs before.
//
// Internal to kernels/cpu. Without OpenMP everything runs serially.
#pragma once

#include <cstdint>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace baton::cpu {

// Below this many elements of work a loop is not worth waking threads for.
inline constexpr int64_t kMinParallelWork = 1 << 15;

// Runs body(i) for i in [0, n) on up to `threads` threads. `work_per_item` (elements touched per
// item, roughly) decides whether threading pays off.
template <typename Body>
void ParallelFor(int64_t n, int threads, int64_t work_per_item, const Body& body) {
#ifdef _OPENMP
  if (threads > 1 && n > 1 && n * work_per_item >= kMinParallelWork) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#else
  (void)threads;
  (void)work_per_item;
#endif
  for (int64_t i = 0; i < n; ++i) body(i);
}

// As ParallelFor, but body(i, slot) also gets the running thread's slot in [0, threads), for
// per-thread scratch. The result must not depend on the slot.
template <typename Body>
void ParallelForWithSlot(int64_t n, int threads, int64_t work_per_item, const Body& body) {
#ifdef _OPENMP
  if (threads > 1 && n > 1 && n * work_per_item >= kMinParallelWork) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; ++i) body(i, omp_get_thread_num());
    return;
  }
#else
  (void)threads;
  (void)work_per_item;
#endif
  for (int64_t i = 0; i < n; ++i) body(i, 0);
}

// Splits [0, n) into fixed-size chunks (independent of the thread count) and runs
// body(begin, end) for each in parallel.
template <typename Body>
void ParallelChunks(int64_t n, int64_t chunk, int threads, const Body& body) {
  const int64_t num_chunks = (n + chunk - 1) / chunk;
  ParallelFor(num_chunks, threads, chunk, [&](int64_t c) {
    const int64_t begin = c * chunk;
    const int64_t end = begin + chunk < n ? begin + chunk : n;
    body(begin, end);
  });
}

}  // namespace baton::cpu
