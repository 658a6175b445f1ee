// The CPU backend's ThreadPool and ParallelFor: every index runs exactly once, on a valid slot,
// through nesting, concurrent callers and many back-to-back jobs.
#include "kernels/cpu/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/parallel.h"

namespace baton::cpu {
namespace {

TEST(ThreadPoolTest, RunsEveryIndexExactlyOnceOnAValidSlot) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> runs(10000);
  std::atomic<bool> bad_slot{false};
  pool.Run(10000, [&](int64_t i, int slot) {
    runs[static_cast<size_t>(i)].fetch_add(1);
    if (slot < 0 || slot >= 4) bad_slot = true;
  });
  for (size_t i = 0; i < runs.size(); ++i) ASSERT_EQ(runs[i].load(), 1) << i;
  EXPECT_FALSE(bad_slot);
}

TEST(ThreadPoolTest, OneThreadRunsOnTheCaller) {
  ThreadPool pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int count = 0;
  pool.Run(50, [&](int64_t, int slot) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(slot, 0);
    ++count;
  });
  EXPECT_EQ(count, 50);
}

TEST(ThreadPoolTest, NestedRunGoesInline) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  pool.Run(8, [&](int64_t outer, int) {
    pool.Run(100, [&](int64_t inner, int) { total += outer * 100 + inner; });
  });
  int64_t expected = 0;
  for (int64_t i = 0; i < 800; ++i) expected += i;
  EXPECT_EQ(total.load(), expected);
}

TEST(ThreadPoolTest, ManyBackToBackJobsAndConcurrentCallersAllComplete) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  const auto caller = [&] {
    for (int job = 0; job < 300; ++job) {
      pool.Run(1 + job % 17, [&](int64_t i, int) { total += i + 1; });
    }
  };
  std::thread other(caller);
  caller();
  other.join();
  int64_t expected = 0;
  for (int job = 0; job < 300; ++job) {
    const int64_t n = 1 + job % 17;
    expected += n * (n + 1) / 2;
  }
  EXPECT_EQ(total.load(), 2 * expected);
}

TEST(ThreadPoolTest, NeedsAtLeastOneThread) { EXPECT_THROW(ThreadPool(0), Error); }

TEST(ParallelForTest, CoversEveryItemOnceForSmallAndLargeWork) {
  ThreadPool pool(2);
  for (int64_t work : {int64_t{1}, int64_t{1} << 20}) {
    std::vector<std::atomic<int>> hits(1000);
    ParallelFor(1000, &pool, work, [&](int64_t i) { hits[static_cast<size_t>(i)]++; });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << i << " work " << work;
  }
  std::vector<int> chunks_seen(10, 0);
  ParallelChunks(95, 10, nullptr, [&](int64_t begin, int64_t end) {
    chunks_seen[static_cast<size_t>(begin / 10)] = static_cast<int>(end - begin);
  });
  EXPECT_EQ(chunks_seen, (std::vector<int>{10, 10, 10, 10, 10, 10, 10, 10, 10, 5}));
}

}  // namespace
}  // namespace baton::cpu
