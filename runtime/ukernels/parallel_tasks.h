// Private: how the convolution drivers (conv.cc, winograd.cc) share one layer's work among the
// calling thread's intra-op threads. Each thread claims work as it goes, so one that starts late
// (pool wake-up) or shares its core with another process takes less, and none waits for a fixed
// share of another's.
#ifndef CUVIL_RUNTIME_UKERNELS_PARALLEL_TASKS_H_
#define CUVIL_RUNTIME_UKERNELS_PARALLEL_TASKS_H_

#include <algorithm>
#include <atomic>
#include <cstdint>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cuvil/runtime/parallel.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// Multiply-adds below which a second thread does not pay: waking a pool thread costs tens of
// microseconds here, far above the runtime's generic kMinParallelWork. 2M (~100 us on one Zen 3
// core) splits MobileNet's 7x7 and 14x14 layers too (1.3-1.7x each at 2 threads), and a pool
// thread that serves kernel after kernel keeps spinning instead of being woken for each.
constexpr int64_t kMinWorkPerThread = int64_t{1} << 21;
inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// The tasks [0, tasks) cut into one contiguous range per thread, each claimed from both ends
// (front: its owner; back: threads whose own range is empty). Thread-safe.
class TaskRanges {
 public:
  static constexpr int64_t kMaxRanges = 64;
  // `ranges` in [1, kMaxRanges]; `tasks` below 2^31.
  TaskRanges(int64_t tasks, int64_t ranges) {
    for (int64_t r = 0; r < ranges; ++r) {
      range_[r].v.store(Pack(tasks * r / ranges, tasks * (r + 1) / ranges),
                        std::memory_order_relaxed);
    }
  }
  // Takes up to `grain` tasks from the front of range `r` into [*begin, *end); false when empty.
  bool ClaimFront(int64_t r, int64_t grain, int64_t* begin, int64_t* end) {
    return Claim(r, grain, /*front=*/true, begin, end);
  }
  // The same from the back.
  bool ClaimBack(int64_t r, int64_t grain, int64_t* begin, int64_t* end) {
    return Claim(r, grain, /*front=*/false, begin, end);
  }

 private:
  static uint64_t Pack(int64_t lo, int64_t hi) {
    return static_cast<uint64_t>(lo) << 32 | static_cast<uint64_t>(hi);
  }
  bool Claim(int64_t r, int64_t grain, bool front, int64_t* begin, int64_t* end) {
    std::atomic<uint64_t>& word = range_[r].v;
    uint64_t seen = word.load(std::memory_order_relaxed);
    while (true) {
      const int64_t lo = static_cast<int64_t>(seen >> 32);
      const int64_t hi = static_cast<int64_t>(seen & 0xffffffffu);
      if (lo >= hi) return false;
      const int64_t n = std::min(grain, hi - lo);
      const uint64_t want = front ? Pack(lo + n, hi) : Pack(lo, hi - n);
      if (word.compare_exchange_weak(seen, want, std::memory_order_relaxed)) {
        *begin = front ? lo : hi - n;
        *end = front ? lo + n : hi;
        return true;
      }
    }
  }
  // Separate cache lines: each range's owner claims from its own.
  struct alignas(64) Word {
    std::atomic<uint64_t> v{0};
  };
  Word range_[kMaxRanges];
};

// Runs fill(begin, end) over the items [0, fills), then body(next), on up to the intra-op threads,
// in one parallel region (one hand-off per conv, not two). Fill items are claimed in chunks; a
// thread that runs out of them waits until every claimed chunk is done, then takes tasks. A thread
// that arrives late finds the fill done and goes straight to the tasks.
template <typename Fill, typename F>
void ParallelFillTasks(int64_t fills, int64_t fill_cost, Fill&& fill, int64_t tasks,
                       int64_t task_cost, F&& body) {
  const int64_t total = tasks * task_cost + fills * fill_cost;
  const int64_t worth = std::max<int64_t>(1, total / kMinWorkPerThread);
  const int64_t workers =
      std::min<int64_t>({std::max<int64_t>(tasks, 1), worth,
                         static_cast<int64_t>(cuvil::IntraOpThreads()), TaskRanges::kMaxRanges});
  if (workers <= 1 || tasks >= (int64_t{1} << 31)) {  // (TaskRanges packs two 32-bit bounds)
    if (fills > 0) fill(int64_t{0}, fills);
    int64_t task = 0;
    auto next = [&] { return task < tasks ? task++ : int64_t{-1}; };
    body(next);
    return;
  }
  // Several chunks per thread so that a late thread still takes a share of the fill.
  const int64_t fill_chunk = std::max<int64_t>(1, fills / (4 * workers));
  const int64_t fill_chunks = (fills + fill_chunk - 1) / fill_chunk;
  // Separate cache lines: the fill counters are hammered while the task counter is not yet used.
  struct alignas(64) Counter {
    std::atomic<int64_t> v{0};
  };
  Counter next_fill, filled;
  // Tasks are claimed `grain` at a time: a claim moves the counter's cache line between the cores,
  // which cost more than a small task itself (mobilenet_v2's 14x14 depthwise layers, one plane
  // per task: 22 us on one thread, 115 on two with one claim per plane). Eight claims per thread
  // still leave a late thread a share.
  const int64_t grain = std::max<int64_t>(1, tasks / (8 * workers));
  // Each thread owns a contiguous range of the tasks (thread s: [tasks * s / workers, tasks *
  // (s + 1) / workers)), claimed from its front; one that runs out takes from the back of the
  // others'. cuvil_rt_parallel_for runs chunk s on the same thread call after call, so a thread
  // keeps computing the same rows and channels, layer after layer and inference after inference
  // (its outputs and its share of the weights stay in its own core's caches), and only a late or
  // slowed thread's work moves.
  TaskRanges ranges(tasks, workers);
  ParallelFor(workers, (total + workers - 1) / workers, [&](int64_t slot, int64_t) {
    int64_t mine = 0, mine_end = 0;  // this thread's claimed, not yet handed out tasks
    int64_t victim = 0;              // the next range to take from once its own is empty
    auto next = [&]() -> int64_t {
      while (mine == mine_end) {
        if (ranges.ClaimFront(slot, grain, &mine, &mine_end)) break;
        if (victim == slot) ++victim;
        if (victim >= workers) return -1;
        if (!ranges.ClaimBack(victim, grain, &mine, &mine_end)) ++victim;
      }
      return mine++;
    };
    int64_t done = 0;
    for (int64_t c = next_fill.v.fetch_add(1, std::memory_order_relaxed); c < fill_chunks;
         c = next_fill.v.fetch_add(1, std::memory_order_relaxed)) {
      fill(c * fill_chunk, std::min(fills, (c + 1) * fill_chunk));
      ++done;
    }
    if (done > 0) filled.v.fetch_add(done, std::memory_order_acq_rel);
    while (filled.v.load(std::memory_order_acquire) < fill_chunks) CpuRelax();
    body(next);
  });
}

// Runs body(next) on up to the intra-op threads, where next() hands out the tasks [0, tasks) one at
// a time (-1 when none is left), claimed in small blocks: a thread that starts late (pool wake-up)
// or shares its core with another process takes fewer tasks instead of holding up the conv with a
// fixed share.
template <typename F>
void ParallelTasks(int64_t tasks, int64_t task_cost, F&& body) {
  ParallelFillTasks(0, 0, [](int64_t, int64_t) {}, tasks, task_cost, body);
}

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_PARALLEL_TASKS_H_
