#include "cuvil/runtime/scratch_usage.h"

#include <cstdint>
#include <thread>

#include "../ukernels/thread_buffer.h"
#include "cuvil/runtime/sanitizers.h"
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

// A thread hands the blocks it freed out again (the smallest that fits), so a warm execution
// allocates nothing; they count as cached while kept and go back with their thread.
TEST(ScratchUsageTest, FreedBlocksAreReusedByTheirThreadAndReleasedWithIt) {
#if defined(CUVIL_ASAN)
  GTEST_SKIP() << "AddressSanitizer builds free every block at once (heap.cc)";
#endif
  const int64_t before = ReadScratchUsage().heap_cached_bytes;
  std::thread([&] {
    void* small = cuvil_rt_alloc(100);  // 128
    void* big = cuvil_rt_alloc(1000);   // 1024
    cuvil_rt_free(small);
    cuvil_rt_free(big);
    EXPECT_EQ(ReadScratchUsage().heap_cached_bytes - before, 128 + 1024);
    void* again = cuvil_rt_alloc(900);  // The 1024 block, not a new one.
    EXPECT_EQ(again, big);
    EXPECT_EQ(ReadScratchUsage().heap_cached_bytes - before, 128);
    void* larger = cuvil_rt_alloc(2000);  // Nothing kept fits: a new block.
    EXPECT_NE(larger, small);
    EXPECT_NE(larger, big);
    void* tiny = cuvil_rt_alloc(1);  // The 128 block.
    EXPECT_EQ(tiny, small);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(tiny) % 64, 0u);
    for (void* p : {again, larger, tiny}) cuvil_rt_free(p);
    EXPECT_EQ(ReadScratchUsage().heap_cached_bytes - before, 128 + 1024 + 2048);
    // A thread keeps at most 16 MiB: of two 10 MiB blocks one is kept (the small ones make room
    // for it), and a 20 MiB block is not kept at all.
    const int64_t mib = int64_t{1} << 20;
    void* first = cuvil_rt_alloc(10 * mib);
    void* second = cuvil_rt_alloc(10 * mib);
    cuvil_rt_free(first);
    cuvil_rt_free(second);
    EXPECT_EQ(ReadScratchUsage().heap_cached_bytes - before, 10 * mib);
    void* huge = cuvil_rt_alloc(20 * mib);
    cuvil_rt_free(huge);
    EXPECT_EQ(ReadScratchUsage().heap_cached_bytes - before, 10 * mib);
  }).join();
  EXPECT_EQ(ReadScratchUsage().heap_cached_bytes, before);
}

TEST(ScratchUsageTest, ThreadBuffersCountWhatTheyHoldAndReleaseItWithTheirThread) {
  const int64_t before = ReadScratchUsage().thread_buffer_bytes;
  int64_t while_held = 0;
  std::thread([&] {
    thread_local uk::ThreadBuffer buffer;  // ThreadBuffers live as long as their thread
    buffer.Get(10);                        // Rounded to 16 floats.
    buffer.Get(8);                         // Fits: no change.
    buffer.Get(1000);                      // Grows to 1008 floats, the 16 released.
    while_held = ReadScratchUsage().thread_buffer_bytes;
  }).join();
  EXPECT_EQ(while_held - before, 1008 * 4);
  EXPECT_EQ(ReadScratchUsage().thread_buffer_bytes, before);
}

}  // namespace
}  // namespace cuvil
