#include "parallel_tasks.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil::uk {
namespace {

TEST(TaskRangesTest, OwnersTakeTheFrontAndThievesTheBack) {
  TaskRanges ranges(/*tasks=*/10, /*ranges=*/2);  // [0, 5) and [5, 10)
  int64_t b = 0, e = 0;
  ASSERT_TRUE(ranges.ClaimFront(1, 2, &b, &e));
  EXPECT_EQ(b, 5);
  EXPECT_EQ(e, 7);
  ASSERT_TRUE(ranges.ClaimBack(1, 2, &b, &e));
  EXPECT_EQ(b, 8);
  EXPECT_EQ(e, 10);
  ASSERT_TRUE(ranges.ClaimBack(1, 2, &b, &e));  // only task 7 is left
  EXPECT_EQ(b, 7);
  EXPECT_EQ(e, 8);
  EXPECT_FALSE(ranges.ClaimFront(1, 2, &b, &e));
  EXPECT_FALSE(ranges.ClaimBack(1, 2, &b, &e));
  ASSERT_TRUE(ranges.ClaimFront(0, 9, &b, &e));
  EXPECT_EQ(b, 0);
  EXPECT_EQ(e, 5);
}

TEST(TaskRangesTest, ConcurrentClaimsHandOutEveryTaskOnce) {
  constexpr int64_t kTasks = 100003, kRanges = 4;
  TaskRanges ranges(kTasks, kRanges);
  std::vector<std::atomic<int>> hits(kTasks);
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < kRanges; ++t) {
    threads.emplace_back([&, t] {
      int64_t b, e;
      while (ranges.ClaimFront(t, 3, &b, &e))
        for (int64_t i = b; i < e; ++i) hits[i]++;
      for (int64_t v = 0; v < kRanges; ++v)
        while (ranges.ClaimBack(v, 5, &b, &e))
          for (int64_t i = b; i < e; ++i) hits[i]++;
    });
  }
  for (auto& t : threads) t.join();
  int wrong = 0;
  for (auto& h : hits) wrong += h.load() != 1;
  EXPECT_EQ(wrong, 0);
}

TEST(ParallelTasksTest, EveryTaskRunsOnceAtAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    SetIntraOpThreads(threads);
    for (int64_t tasks : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(tasks);
      ParallelTasks(tasks, kMinWorkPerThread, [&](auto& next) {
        for (int64_t i = next(); i >= 0; i = next()) hits[i]++;
      });
      for (int64_t i = 0; i < tasks; ++i)
        ASSERT_EQ(hits[i].load(), 1) << threads << " threads, " << tasks << " tasks, task " << i;
    }
  }
  SetIntraOpThreads(1);
}

// Each thread's first task waits (up to 5 s) until the other thread has started one, so both run:
// then the calling thread starts at task 0 and the pool thread at the front of the second half,
// call after call (the same rows of each layer stay on the same core).
TEST(ParallelTasksTest, EachThreadStartsOnItsOwnHalfEveryCall) {
  SetIntraOpThreads(2);
  constexpr int64_t kTasks = 64;
  for (int call = 0; call < 20; ++call) {
    std::atomic<int> started{0};
    std::vector<std::thread::id> ran_on(kTasks);
    ParallelTasks(kTasks, kMinWorkPerThread, [&](auto& next) {
      bool first = true;
      for (int64_t i = next(); i >= 0; i = next()) {
        if (first) {
          first = false;
          started++;
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
          while (started.load() < 2 && std::chrono::steady_clock::now() < deadline)
            std::this_thread::yield();
        }
        ran_on[i] = std::this_thread::get_id();
      }
    });
    ASSERT_EQ(started.load(), 2) << "call " << call << ": the pool thread never joined";
    EXPECT_EQ(ran_on[0], std::this_thread::get_id()) << "call " << call;
    EXPECT_NE(ran_on[kTasks / 2], std::this_thread::get_id()) << "call " << call;
  }
  SetIntraOpThreads(1);
}

}  // namespace
}  // namespace cuvil::uk
