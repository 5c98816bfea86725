#include "cuvil/runtime/parallel.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

struct Work {
  std::vector<std::atomic<int>> hits;
  explicit Work(int64_t n) : hits(n) {}
};

void Body(void* ctx, int64_t begin, int64_t end) {
  auto* w = static_cast<Work*>(ctx);
  for (int64_t i = begin; i < end; ++i) w->hits[i]++;
}

TEST(ParallelForTest, CoversEveryIndexExactlyOnceForAnyThreadCount) {
  for (int threads : {1, 2, 3, 8}) {
    SetIntraOpThreads(threads);
    for (int64_t n : {0, 1, 2, 5, 97}) {
      Work w(n);
      cuvil_rt_parallel_for(n, kMinParallelWork, Body, &w);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(w.hits[i].load(), 1) << threads << " threads, n=" << n;
    }
  }
  SetIntraOpThreads(1);
}

void RecordThread(void* ctx, int64_t begin, int64_t end) {
  auto* ids = static_cast<std::vector<std::thread::id>*>(ctx);
  for (int64_t i = begin; i < end; ++i) (*ids)[i] = std::this_thread::get_id();
}

TEST(ParallelForTest, CheapWorkStaysOnTheCallingThread) {
  SetIntraOpThreads(4);
  std::vector<std::thread::id> ids(8);
  cuvil_rt_parallel_for(8, 1, RecordThread, &ids);
  for (const auto& id : ids) EXPECT_EQ(id, std::this_thread::get_id());
  SetIntraOpThreads(1);
}

TEST(ParallelForTest, ConcurrentCallersShareThePool) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&] {
      SetIntraOpThreads(3);
      for (int r = 0; r < 50; ++r) {
        Work w(31);
        cuvil_rt_parallel_for(31, kMinParallelWork, Body, &w);
        for (auto& h : w.hits) wrong += h.load() != 1;
      }
    });
  }
  for (auto& c : callers) c.join();
  EXPECT_EQ(wrong.load(), 0);
}

// Each chunk waits (up to 5 s) until the other has started: only a pool worker running one chunk
// while the caller runs the other lets both start promptly.
struct Rendezvous {
  std::atomic<int> started{0};
  std::thread::id ids[2];
};

void MeetOtherChunk(void* ctx, int64_t begin, int64_t end) {
  auto* r = static_cast<Rendezvous*>(ctx);
  r->ids[begin] = std::this_thread::get_id();
  r->started++;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (r->started.load() < 2 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
  }
}

TEST(ParallelForTest, AWorkerRunsAChunkBesideTheCaller) {
  SetIntraOpThreads(2);
  for (int round = 0; round < 20; ++round) {
    Rendezvous r;
    auto t0 = std::chrono::steady_clock::now();
    cuvil_rt_parallel_for(2, kMinParallelWork, MeetOtherChunk, &r);
    EXPECT_NE(r.ids[0], r.ids[1]);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(4));
    // Idle gaps let the worker go from spinning to sleeping, so both wake-up paths run.
    if (round % 4 == 3) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  SetIntraOpThreads(1);
}

}  // namespace
}  // namespace cuvil
