#include "cuvil/runtime/thread_pool.h"

#include <atomic>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(ThreadPoolTest, RunsEveryTaskBeforeDestruction) {
  std::atomic<int> sum{0};
  {
    ThreadPool pool(3);
    for (int i = 1; i <= 100; ++i) ASSERT_TRUE(pool.Schedule([&sum, i] { sum += i; }));
  }
  EXPECT_EQ(sum.load(), 5050);
}

}  // namespace
}  // namespace cuvil
