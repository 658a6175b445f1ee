#include "comm/waiter_pool.h"

namespace baton {

void WaiterPool::Submit(std::function<void()> task) {
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back(std::move(task));
    // Each queued task needs an idle thread of its own: a thread notified but not yet running
    // is still counted idle, and with more tasks than that a task would wait behind one that
    // blocks (a receive posted after a send that waits for it hung so, 1 run in 6 under load).
    if (static_cast<int>(tasks_.size()) > idle_) {
      threads_.emplace_back([this] { Loop(); });
      return;
    }
  }
  // Outside the lock: the woken waiter does not run only to block on the mutex its poster still
  // holds (two more context switches per message on a busy core).
  cv_.notify_one();
}

void WaiterPool::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& thread : threads_) thread.join();
  threads_.clear();
}

int WaiterPool::threads() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(threads_.size());
}

int WaiterPool::idle() const {
  std::lock_guard lock(mutex_);
  return idle_;
}

void WaiterPool::Loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    ++idle_;
    cv_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (tasks_.empty()) return;  // stopping
    std::function<void()> task = std::move(tasks_.front());
    tasks_.pop_front();
    lock.unlock();
    task();
    lock.lock();
  }
}

}  // namespace baton
