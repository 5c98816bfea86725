#include "cuvil/runtime/parallel.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace cuvil {
namespace {

thread_local int intra_op_threads = 1;

void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// The chunk a thread takes first: 0 on a thread calling cuvil_rt_parallel_for, i + 1 on pool
// worker i. So with as many chunks as threads each thread runs the same chunk, the same part of
// the data, call after call (a core reading lines the other core wrote last pays 3x here, see
// bench/RESULTS.md), unless a thread is late and the other takes its chunk.
thread_local int home_chunk = 0;

// One cuvil_rt_parallel_for call. Chunks are claimed through `claimed` (one bit per chunk) by the
// caller and by any pool worker that picks the job up, each starting at its home chunk, so a
// worker that is slow to wake never delays the call: the caller runs the chunk itself. Lives on
// the caller's stack; `visitors` counts the workers that may still touch it. Thread-safe through
// its atomics.
struct Job {
  static constexpr int64_t kMaxChunks = 64;  // bits of `claimed`
  void (*body)(void* ctx, int64_t begin, int64_t end);
  void* ctx;
  int64_t count;
  int64_t chunks;  // at most kMaxChunks
  std::atomic<uint64_t> claimed{0};
  std::atomic<int> visitors{0};

  int64_t Bound(int64_t i) const { return count * i / chunks; }
  // Runs unclaimed chunks, its home chunk first, then the others in order, until none is left.
  // Chunk 0 is the caller's; a worker whose home lies beyond the chunks starts in [1, chunks).
  void RunChunks(int home) {
    const uint64_t all = chunks == 64 ? ~uint64_t{0} : (uint64_t{1} << chunks) - 1;
    const int64_t first = home == 0 || chunks == 1 ? 0 : 1 + (home - 1) % (chunks - 1);
    for (int64_t k = 0; k < chunks; ++k) {
      if ((claimed.load(std::memory_order_relaxed) & all) == all) return;
      const int64_t i = (first + k) % chunks;
      const uint64_t bit = uint64_t{1} << i;
      if ((claimed.fetch_or(bit, std::memory_order_relaxed) & bit) == 0) {
        body(ctx, Bound(i), Bound(i + 1));
      }
    }
  }
};

// Workers for intra-op parallelism. Between jobs a worker spins briefly before it sleeps:
// generated code calls parallel_for kernel after kernel, and waking a sleeping thread costs
// tens of microseconds, as much as a small kernel. Created on first use, never destroyed
// (generated code may run until process exit). Thread-safe.
class SpinningPool {
 public:
  explicit SpinningPool(int workers) {
    for (int i = 0; i < workers; ++i) {
      std::thread([this, i] {
        home_chunk = i + 1;
        WorkerLoop();
      }).detach();
    }
  }

  // Offers `job` to the workers.
  void Post(Job* job) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(job);
      pending_.store(static_cast<int>(jobs_.size()), std::memory_order_release);
      wake = sleeping_ > 0;
    }
    if (wake) cv_.notify_all();
  }

  // After this returns no worker starts visiting `job`; then waits for those that did.
  void Retract(Job* job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      Remove(job);
    }
    for (int spins = 0; job->visitors.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 4096) {
        CpuRelax();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static constexpr auto kSpinTime = std::chrono::microseconds(100);

  void Remove(Job* job) {
    auto it = std::find(jobs_.begin(), jobs_.end(), job);
    if (it != jobs_.end()) jobs_.erase(it);
    pending_.store(static_cast<int>(jobs_.size()), std::memory_order_release);
  }

  void WorkerLoop() {
    while (true) {
      auto deadline = std::chrono::steady_clock::now() + kSpinTime;
      for (int spins = 1; pending_.load(std::memory_order_acquire) == 0; ++spins) {
        CpuRelax();
        if (spins % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
      }
      Job* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (jobs_.empty()) {
          ++sleeping_;
          cv_.wait(lock, [this] { return !jobs_.empty(); });
          --sleeping_;
        }
        job = jobs_.front();
        job->visitors.fetch_add(1, std::memory_order_relaxed);
      }
      job->RunChunks(home_chunk);
      {
        // Every chunk is claimed: no other worker needs to visit. The job's memory may be reused
        // once `visitors` drops, so remove it first.
        std::lock_guard<std::mutex> lock(mu_);
        Remove(job);
        job->visitors.fetch_sub(1, std::memory_order_release);
      }
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> jobs_;        // Guarded by mu_.
  int sleeping_ = 0;             // Guarded by mu_.
  std::atomic<int> pending_{0};  // jobs_.size(), read without the lock by spinning workers.
};

SpinningPool& SharedPool() {
  static SpinningPool* pool =
      new SpinningPool(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1));
  return *pool;
}

}  // namespace

void SetIntraOpThreads(int threads) { intra_op_threads = std::max(threads, 1); }

int IntraOpThreads() { return intra_op_threads; }

}  // namespace cuvil

extern "C" void cuvil_rt_parallel_for(int64_t count, int64_t cost_per_item,
                                      void (*body)(void* ctx, int64_t begin, int64_t end),
                                      void* ctx) {
  const int64_t worth =
      std::max<int64_t>(1, count * std::max<int64_t>(cost_per_item, 1) / cuvil::kMinParallelWork);
  const int64_t chunks =
      std::min<int64_t>({cuvil::IntraOpThreads(), count, worth, cuvil::Job::kMaxChunks});
  if (chunks <= 1) {
    if (count > 0) body(ctx, 0, count);
    return;
  }
  cuvil::Job job;
  job.body = body;
  job.ctx = ctx;
  job.count = count;
  job.chunks = chunks;
  cuvil::SharedPool().Post(&job);
  job.RunChunks(/*home=*/0);
  cuvil::SharedPool().Retract(&job);
}
