#include "cuvil/runtime/scratch_usage.h"

#include <cstdint>
#include <thread>

#include "../ukernels/thread_buffer.h"
#include "gtest/gtest.h"
#include "kernels.h"

namespace cuvil {
namespace {

TEST(ScratchUsageTest, HeapBlocksAreCountedUntilFreedAndThePeakKept) {
  ResetHeapPeak();
  const ScratchUsage before = ReadScratchUsage();
  void* a = cuvil_rt_alloc(100);  // Rounded to 128.
  void* b = cuvil_rt_alloc(64);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);
  EXPECT_EQ(ReadScratchUsage().heap_live_bytes - before.heap_live_bytes, 192);
  cuvil_rt_free(a);
  cuvil_rt_free(b);
  cuvil_rt_free(nullptr);
  const ScratchUsage after = ReadScratchUsage();
  EXPECT_EQ(after.heap_live_bytes, before.heap_live_bytes);
  EXPECT_EQ(after.heap_peak_bytes - before.heap_live_bytes, 192);
  ResetHeapPeak();
  EXPECT_EQ(ReadScratchUsage().heap_peak_bytes, after.heap_live_bytes);
}

TEST(ScratchUsageTest, ThreadBuffersCountWhatTheyHoldAndReleaseItWithTheirThread) {
  const int64_t before = ReadScratchUsage().thread_buffer_bytes;
  int64_t while_held = 0;
  std::thread([&] {
    uk::ThreadBuffer buffer;
    buffer.Get(10);    // Rounded to 16 floats.
    buffer.Get(8);     // Fits: no change.
    buffer.Get(1000);  // Grows to 1008 floats, the 16 released.
    while_held = ReadScratchUsage().thread_buffer_bytes;
  }).join();
  EXPECT_EQ(while_held - before, 1008 * 4);
  EXPECT_EQ(ReadScratchUsage().thread_buffer_bytes, before);
}

}  // namespace
}  // namespace cuvil
