// ThreadPool: the CPU backend's worker threads, built to degrade gracefully on a busy machine.
//
// Run(count, task) hands out indices one at a time from an atomic counter to the calling thread
// and whichever workers are awake, and returns once every index has finished. Nobody waits for a
// worker to arrive: if the OS has not scheduled one (other processes, more pipeline stages than
// cores), the others simply take its share. Workers spin briefly for the next job, then sleep,
// so an idle pool costs nothing. A fork-join OpenMP loop with a static schedule, by contrast,
// waits at its barrier for every thread and spins while idle; on an oversubscribed machine that
// made each call take a scheduler time slice.
//
// Which thread runs an index must not change what the index computes (ParallelFor's rule), so
// results never depend on the thread count. Tasks must not throw.
//
// Ownership and thread safety: the pool owns its workers (joined by the destructor). Run may be
// called from any thread; a call made while another is in progress, or from inside a task, runs
// its indices inline on the calling thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace baton::cpu {

// A non-owning reference to a callable void(int64_t index, int slot), cheaper than std::function.
class TaskRef {
 public:
  template <typename F>
  TaskRef(const F& f)  // NOLINT: implicit, like std::function_ref
      : object_(&f),
        call_([](const void* o, int64_t i, int s) { (*static_cast<const F*>(o))(i, s); }) {}
  void operator()(int64_t index, int slot) const { call_(object_, index, slot); }

 private:
  const void* object_;
  void (*call_)(const void*, int64_t, int);
};

class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1; starts threads - 1 workers
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return threads_; }

  // Runs task(index, slot) for every index in [0, count) exactly once and returns when all have
  // finished. `slot` is in [0, threads()): 0 for the calling thread, distinct per worker, for
  // per-thread scratch.
  void Run(int64_t count, TaskRef task);

 private:
  // Claims and runs indices of job `generation` until none are left or the job has moved on.
  void Work(uint32_t generation, int slot);
  void WorkerLoop(int slot);

  const int threads_;
  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one job at a time

  // The current job. `claim_` packs (generation << 32 | next index) so that a worker still
  // holding an old generation can never claim an index of a newer job.
  std::atomic<uint64_t> claim_{0};
  std::atomic<int64_t> finished_{0};
  std::atomic<uint32_t> generation_{0};
  // Read by workers only through a claim that the generation check validates.
  std::atomic<const TaskRef*> task_{nullptr};
  std::atomic<int64_t> count_{0};

  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;  // guarded by sleep_mutex_
};

}  // namespace baton::cpu
