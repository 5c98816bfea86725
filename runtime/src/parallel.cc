#include "cuvil/runtime/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cuvil/runtime/thread_pool.h"

namespace cuvil {
namespace {

thread_local int intra_op_threads = 1;

// Counts finished chunks. std primitives (not absl) so ThreadSanitizer sees the hand-off.
class Latch {
 public:
  explicit Latch(int64_t count) : remaining_(count) {}
  void CountDown() {
    std::lock_guard<std::mutex> lock(mu_);
    if (--remaining_ == 0) cv_.notify_all();
  }
  void Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return remaining_ == 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t remaining_;
};

// Workers shared by every execution; created on first parallel use, never destroyed (generated
// code may run until process exit).
ThreadPool& SharedPool() {
  static ThreadPool* pool =
      new ThreadPool(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1));
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
  const int64_t chunks = std::min<int64_t>({cuvil::IntraOpThreads(), count, worth});
  if (chunks <= 1) {
    if (count > 0) body(ctx, 0, count);
    return;
  }
  cuvil::Latch done(chunks - 1);
  auto bounds = [&](int64_t i) { return count * i / chunks; };
  for (int64_t i = 1; i < chunks; ++i) {
    const int64_t begin = bounds(i), end = bounds(i + 1);
    if (!cuvil::SharedPool().Schedule([=, &done] {
          body(ctx, begin, end);
          done.CountDown();
        })) {
      body(ctx, begin, end);  // Pool shut down (process exit): run inline.
      done.CountDown();
    }
  }
  body(ctx, 0, bounds(1));
  done.Wait();
}
