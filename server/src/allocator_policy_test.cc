// Regression test for issue 8 item 2 (resident memory growing per load/unload cycle): counts the
// bytes malloc keeps in its arenas after threads that come and go (like a model's scheduler
// workers) each allocate and free a large scratch buffer. Deterministic: no RSS or time bounds.
#include "allocator_policy.h"

#include <barrier>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "cuvil/runtime/sanitizers.h"
#include "gtest/gtest.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cuvil {
namespace {

#if defined(__GLIBC__) && !defined(CUVIL_ASAN) && !defined(CUVIL_TSAN)

// Bytes malloc holds outside individual mappings, summed over all arenas.
size_t ArenaBytes() { return mallinfo2().arena; }

TEST(AllocatorPolicyTest, ScratchOfExitedThreadsIsReturned) {
  PinAllocatorThresholds();
  constexpr size_t kScratch = size_t{6} << 20;  // A resnet18 conv scratch buffer is ~5.4 MiB.
  constexpr int kWorkers = 3;
  // One load/unload cycle: workers start, each grows a scratch buffer the way the conv kernels'
  // thread buffers do and holds it while the others run, then frees it and exits.
  auto cycle = [] {
    std::barrier all_allocated(kWorkers);
    std::vector<std::thread> workers;
    for (int w = 0; w < kWorkers; ++w) {
      workers.emplace_back([&all_allocated] {
        void* p = nullptr;
        for (size_t size : {size_t{1} << 20, size_t{3} << 20, kScratch}) {
          std::free(p);
          p = std::aligned_alloc(64, size);
          if (p == nullptr) std::abort();
          std::memset(p, 1, size);  // Touch it, as a kernel would.
        }
        all_allocated.arrive_and_wait();
        std::free(p);
      });
    }
    for (std::thread& w : workers) w.join();
  };
  cycle();  // Arenas created on first use are part of the baseline.
  const size_t baseline_arena = ArenaBytes();
  const size_t baseline_mapped = mallinfo2().hblkhd;
  for (int i = 0; i < 20; ++i) cycle();
  // Unpinned, the first cycle's frees raise the mmap threshold and every later cycle's buffers
  // stay in the workers' arenas: kWorkers * kScratch more than the baseline.
  EXPECT_LT(ArenaBytes(), baseline_arena + kScratch);
  EXPECT_EQ(mallinfo2().hblkhd, baseline_mapped);  // Every large block was unmapped.
}

#endif

}  // namespace
}  // namespace cuvil
