// ThreadPool: index-claiming workers that never make the caller wait for a late thread (see
// thread_pool.h).
#include "kernels/cpu/thread_pool.h"

#include "core/error.h"

namespace baton::cpu {
namespace {

// Set while this thread runs a task: a nested Run goes inline.
thread_local bool in_task = false;

// How long an idle worker polls for the next job before sleeping (~0.1 ms): long enough to catch
// the next kernel of a layer, short enough not to steal a busy machine's cores for long.
constexpr int kIdleSpins = 2000;

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int threads) : threads_(threads) {
  BATON_CHECK(threads >= 1, "a thread pool needs at least one thread, got {}", threads);
  for (int slot = 1; slot < threads; ++slot)
    workers_.emplace_back([this, slot] { WorkerLoop(slot); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(sleep_mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::Run(int64_t count, TaskRef task) {
  if (count <= 0) return;
  std::unique_lock run_lock(run_mutex_, std::defer_lock);
  if (threads_ == 1 || count == 1 || in_task || !run_lock.try_lock()) {
    const bool was_in_task = in_task;
    in_task = true;
    for (int64_t i = 0; i < count; ++i) task(i, 0);
    in_task = was_in_task;
    return;
  }
  BATON_CHECK(count < (int64_t{1} << 32), "{} tasks in one ThreadPool::Run", count);
  const uint32_t generation = generation_.load(std::memory_order_relaxed) + 1;
  // Close the previous job's claims first: a worker still in it may hold a stale (old
  // generation, index) claim, and once count_ and task_ describe this job it must not win a
  // compare-exchange on the old generation and run this job's task on a stale index.
  claim_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_seq_cst);
  task_.store(&task, std::memory_order_relaxed);
  finished_.store(0, std::memory_order_relaxed);
  // Release: a worker that reads this count also sees the closed claims above (acquire below).
  count_.store(count, std::memory_order_release);
  {
    std::lock_guard lock(sleep_mutex_);  // a worker about to sleep sees the new generation
    generation_.store(generation, std::memory_order_release);
  }
  wake_.notify_all();
  in_task = true;
  Work(generation, /*slot=*/0);
  in_task = false;
  // Only indices already claimed by a worker can still be running.
  while (finished_.load(std::memory_order_acquire) < count) std::this_thread::yield();
}

void ThreadPool::Work(uint32_t generation, int slot) {
  uint64_t claim = claim_.load(std::memory_order_acquire);
  while (true) {
    if (static_cast<uint32_t>(claim >> 32) != generation) return;  // a newer job: not ours
    const auto index = static_cast<int64_t>(claim & 0xffffffffu);
    // count_ may already be a newer job's; then the exchange below fails on the generation.
    if (index >= count_.load(std::memory_order_acquire)) return;
    if (!claim_.compare_exchange_weak(claim, claim + 1, std::memory_order_acq_rel)) continue;
    // A claimed index keeps its job (and task) alive until it finishes.
    (*task_.load(std::memory_order_relaxed))(index, slot);
    finished_.fetch_add(1, std::memory_order_acq_rel);
    claim = claim_.load(std::memory_order_acquire);
  }
}

void ThreadPool::WorkerLoop(int slot) {
  uint32_t seen = 0;
  while (true) {
    uint32_t generation = generation_.load(std::memory_order_acquire);
    for (int spin = 0; generation == seen && spin < kIdleSpins; ++spin) {
      CpuRelax();
      generation = generation_.load(std::memory_order_acquire);
    }
    if (generation == seen) {
      std::unique_lock lock(sleep_mutex_);
      wake_.wait(lock,
                 [&] { return stop_ || generation_.load(std::memory_order_acquire) != seen; });
      if (stop_) return;
      generation = generation_.load(std::memory_order_acquire);
    }
    seen = generation;
    in_task = true;
    Work(generation, slot);
    in_task = false;
  }
}

}  // namespace baton::cpu
