#include "recycled_buffers.h"

#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(RecycledBuffersTest, ADroppedBufferServesTheNextRequestOfASimilarSize) {
  auto pool = std::make_shared<RecycledBuffers>(4, 1 << 20);
  uint8_t* first = nullptr;
  {
    RecycledBuffers::Buffer b = RecycledBuffers::Acquire(pool, 1000);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.get()) % 64, 0u);
    b.get()[999] = 5;  // The whole size is usable.
    first = b.get();
  }
  EXPECT_EQ(pool->idle_buffers(), 1u);
  EXPECT_EQ(pool->idle_bytes(), 1024u);
  RecycledBuffers::Buffer again = RecycledBuffers::Acquire(pool, 600);
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(pool->idle_buffers(), 0u);
  // Too small for 1024 bytes, or more than twice what 100 bytes need: a new buffer each.
  again.reset();
  RecycledBuffers::Buffer big = RecycledBuffers::Acquire(pool, 2000);
  RecycledBuffers::Buffer tiny = RecycledBuffers::Acquire(pool, 100);
  EXPECT_NE(big.get(), first);
  EXPECT_NE(tiny.get(), first);
  EXPECT_EQ(pool->idle_buffers(), 1u);
}

TEST(RecycledBuffersTest, IdleBuffersStayWithinTheirLimits) {
  auto pool = std::make_shared<RecycledBuffers>(2, 10000);
  {
    std::vector<RecycledBuffers::Buffer> held;
    for (int i = 0; i < 4; ++i) held.push_back(RecycledBuffers::Acquire(pool, 4096));
  }
  EXPECT_EQ(pool->idle_buffers(), 2u);  // The count limit.
  EXPECT_EQ(pool->idle_bytes(), 8192u);
  auto small = std::make_shared<RecycledBuffers>(8, 10000);
  {
    std::vector<RecycledBuffers::Buffer> held;
    for (int i = 0; i < 4; ++i) held.push_back(RecycledBuffers::Acquire(small, 4096));
  }
  EXPECT_EQ(small->idle_bytes(), 8192u);  // The byte limit: a third would pass 10000.
}

TEST(RecycledBuffersTest, BuffersOutliveTheirPool) {
  auto pool = std::make_shared<RecycledBuffers>(4, 1 << 20);
  RecycledBuffers::Buffer b = RecycledBuffers::Acquire(pool, 4096);
  pool.reset();
  b.get()[0] = 1;
  b.reset();  // Freed, not returned (ASan checks there is no leak or use after free).
}

TEST(RecycledBuffersTest, ConcurrentAcquireAndDrop) {
  auto pool = std::make_shared<RecycledBuffers>(3, 1 << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&pool, t] {
      for (int i = 0; i < 500; ++i) {
        RecycledBuffers::Buffer b = RecycledBuffers::Acquire(pool, 1000 + 300 * ((i + t) % 3));
        b.get()[0] = static_cast<uint8_t>(i);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(pool->idle_buffers(), 3u);
  EXPECT_GE(pool->idle_buffers(), 1u);
}

}  // namespace
}  // namespace cuvil
