// WaiterPool: threads that run tasks which block (GlooCommunicator's waits on Gloo's sends and
// receives), one task per thread at a time. A task never waits in a queue behind another that may
// block: an idle thread takes it, or the pool starts one more.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace baton {

class WaiterPool {
 public:
  WaiterPool() = default;
  WaiterPool(const WaiterPool&) = delete;
  WaiterPool& operator=(const WaiterPool&) = delete;
  ~WaiterPool() { Stop(); }

  void Submit(std::function<void()> task);

  // Runs the queued tasks to the end and joins; blocked tasks must have been released.
  void Stop();

  // Threads started so far, and those idle now (for tests).
  int threads() const;
  int idle() const;

 private:
  void Loop();

  mutable std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  std::vector<std::thread> threads_;
  // Threads waiting for a task. A woken one counts here until it takes its task, so a task
  // queued beside others needs its own idle thread: tasks_.size() > idle_ starts one more.
  int idle_ = 0;
  bool stopping_ = false;
};

}  // namespace baton
