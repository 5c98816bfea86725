// Private: the bounds every gRPC call obeys — a cap on calls in progress, and a count of the
// completion-queue calls alive so shutdown knows when the queue may close.
#ifndef CUVIL_SERVER_SRC_GRPC_CALL_LIMITS_H_
#define CUVIL_SERVER_SRC_GRPC_CALL_LIMITS_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace cuvil {

// Bounds the calls in progress: every call holds its request and response in memory, and calls
// that block wait in the blocking pool's queue, so without a cap slow clients or long streams
// could make the server buffer requests without end. Thread-safe.
class CallLimiter {
 public:
  explicit CallLimiter(int max_calls) : max_calls_(std::max(1, max_calls)) {}

  // Holds one slot while alive; ok() is false when the limit was reached (nothing is held).
  class Slot {
   public:
    explicit Slot(CallLimiter* limiter) : limiter_(limiter) {
      if (limiter_->in_flight_.fetch_add(1, std::memory_order_acq_rel) >= limiter_->max_calls_) {
        limiter_->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
        limiter_ = nullptr;
      }
    }
    ~Slot() { Release(); }
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;
    bool ok() const { return limiter_ != nullptr; }
    // Frees the slot now (a call does so just before it sends its status); later calls and the
    // destructor do nothing.
    void Release() {
      if (limiter_ != nullptr) limiter_->in_flight_.fetch_sub(1, std::memory_order_acq_rel);
      limiter_ = nullptr;
    }

   private:
    CallLimiter* limiter_;
  };

  // The status a call refused for want of a slot gets.
  grpc::Status Busy() const {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("server is busy: ", max_calls_,
                                     " calls are already in progress (the concurrent call limit); "
                                     "retry later"));
  }

 private:
  const int max_calls_;
  std::atomic<int> in_flight_{0};
};

// Counts the completion-queue calls alive (armed or in progress), so shutdown can wait until
// none will start an operation on the queue before shutting it down. Thread-safe.
class LiveCallCounter {
 public:
  void Add() {
    absl::MutexLock l(&mu_);
    ++live_;
  }
  void Remove() {
    absl::MutexLock l(&mu_);
    --live_;
  }
  // Blocks until no call is alive.
  void AwaitNone() {
    absl::MutexLock l(&mu_);
    mu_.Await(absl::Condition(+[](int* live) { return *live == 0; }, &live_));
  }

 private:
  absl::Mutex mu_;
  int live_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_CALL_LIMITS_H_
