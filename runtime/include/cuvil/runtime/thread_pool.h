// A fixed-size pool of worker threads running queued tasks in FIFO order.
#ifndef CUVIL_RUNTIME_THREAD_POOL_H_
#define CUVIL_RUNTIME_THREAD_POOL_H_

#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace cuvil {

// Thread-safe.
class ThreadPool {
 public:
  // Starts `threads` workers (at least one).
  explicit ThreadPool(int threads);
  // Runs every task already queued, then joins the workers.
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Queues `task`; returns false (and drops it) after shutdown began.
  bool Schedule(std::function<void()> task);

 private:
  void WorkerLoop();

  absl::Mutex mu_;
  std::deque<std::function<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> workers_;
};

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_THREAD_POOL_H_
