#include "cuvil/runtime/parallel.h"

#include <algorithm>
#include <thread>

#include "absl/synchronization/blocking_counter.h"
#include "cuvil/runtime/thread_pool.h"

namespace cuvil {
namespace {

thread_local int intra_op_threads = 1;

// Workers shared by every execution; created on first parallel use, never destroyed (generated
// code may run until process exit).
ThreadPool& SharedPool() {
  static ThreadPool* pool = new ThreadPool(
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) - 1));
  return *pool;
}

}  // namespace

void SetIntraOpThreads(int threads) { intra_op_threads = std::max(threads, 1); }

int IntraOpThreads() { return intra_op_threads; }

}  // namespace cuvil

extern "C" void cuvil_rt_parallel_for(int64_t count,
                                      void (*body)(void* ctx, int64_t begin, int64_t end),
                                      void* ctx) {
  const int64_t chunks = std::min<int64_t>(cuvil::IntraOpThreads(), count);
  if (chunks <= 1) {
    if (count > 0) body(ctx, 0, count);
    return;
  }
  absl::BlockingCounter done(static_cast<int>(chunks - 1));
  auto bounds = [&](int64_t i) { return count * i / chunks; };
  for (int64_t i = 1; i < chunks; ++i) {
    const int64_t begin = bounds(i), end = bounds(i + 1);
    if (!cuvil::SharedPool().Schedule([=, &done] {
          body(ctx, begin, end);
          done.DecrementCount();
        })) {
      body(ctx, begin, end);  // Pool shut down (process exit): run inline.
      done.DecrementCount();
    }
  }
  body(ctx, 0, bounds(1));
  done.Wait();
}
