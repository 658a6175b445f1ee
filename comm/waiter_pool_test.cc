// WaiterPool: a submitted task runs at once, also while every thread is blocked in another.
#include "comm/waiter_pool.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace baton {
namespace {

// Tasks that block until `n` of them run at once (or the test gives up).
class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n) {}
  void Arrive() {
    std::unique_lock lock(mutex_);
    ++arrived_;
    cv_.notify_all();
    cv_.wait(lock, [&] { return arrived_ >= n_ || give_up_; });
  }
  // How many had arrived when all had, or when `limit` ran out.
  int WaitForAll(std::chrono::seconds limit) {
    std::unique_lock lock(mutex_);
    cv_.wait_for(lock, limit, [&] { return arrived_ >= n_; });
    const int arrived = arrived_;
    give_up_ = true;  // releases the arrived ones when the others never come
    cv_.notify_all();
    return arrived;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  const int n_;
  int arrived_ = 0;
  bool give_up_ = false;
};

TEST(WaiterPoolTest, ATaskNeverQueuesBehindABlockedOne) {
  constexpr int kIdle = 4;
  constexpr auto kLimit = std::chrono::seconds(60);  // safety limit only
  // Declared before the pool, so they outlive its threads: a released task still returns
  // through its Rendezvous (re-locking its mutex) after WaitForAll has returned.
  Rendezvous warm(kIdle);
  Rendezvous all(kIdle + 1);
  WaiterPool pool;
  // kIdle threads, then all idle
  for (int i = 0; i < kIdle; ++i) pool.Submit([&] { warm.Arrive(); });
  ASSERT_EQ(warm.WaitForAll(kLimit), kIdle);
  const auto deadline = std::chrono::steady_clock::now() + kLimit;
  while (pool.idle() < kIdle && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
  ASSERT_EQ(pool.idle(), kIdle);
  // More tasks than idle threads, submitted before any woken thread has taken its task: each
  // must still run beside the others. Before, the last waited in the queue while every thread
  // was blocked in one of the others.
  for (int i = 0; i < kIdle + 1; ++i) pool.Submit([&] { all.Arrive(); });
  EXPECT_EQ(all.WaitForAll(kLimit), kIdle + 1)
      << "tasks ran at once; the others were queued behind them";
  EXPECT_GE(pool.threads(), kIdle + 1);
}

TEST(WaiterPoolTest, StopRunsTheQueuedTasksToTheEnd) {
  int ran = 0;
  std::mutex mutex;
  {
    WaiterPool pool;
    for (int i = 0; i < 8; ++i) {
      pool.Submit([&] {
        std::lock_guard lock(mutex);
        ++ran;
      });
    }
    pool.Stop();
  }
  EXPECT_EQ(ran, 8);
}

}  // namespace
}  // namespace baton
