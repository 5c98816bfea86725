// Private: what every call the server serves on gRPC's completion-queue API shares — the
// resources of its method and the lifetime rule of the call object.
#ifndef CUVIL_SERVER_SRC_GRPC_CQ_CALL_H_
#define CUVIL_SERVER_SRC_GRPC_CQ_CALL_H_

#include <atomic>

#include "cuvil/runtime/thread_pool.h"
#include "grpc_call_limits.h"
#include "grpc_cq_driver.h"

namespace cuvil {

// What the completion-queue methods of one server share: the queue their calls arrive on and
// complete through, the count of calls alive, the call cap and the pool for work that blocks.
// Plain pointers, all outliving every call.
struct CallContext {
  grpc::ServerCompletionQueue* cq = nullptr;
  LiveCallCounter* live = nullptr;
  CallLimiter* limiter = nullptr;
  ThreadPool* blocking_pool = nullptr;
};

// A method the server accepts calls of. Thread-safe: its calls re-arm it from polling threads.
class ArmedMethod {
 public:
  virtual ~ArmedMethod() = default;
  // Puts one call on the queue, waiting for a client; each call that arrives arms its successor.
  virtual void Arm() = 0;
};

// Base of one call object: counted alive from construction to destruction, and deleted on a
// polling thread once both its final status has gone out (finish_tag) and gRPC's done
// notification (done_tag) has come back. A call whose request event fails (the server is
// shutting down; the call never started) deletes itself directly: no other event comes.
// Thread-compatible: a call has at most one operation outstanding besides the done notification.
class CqCall {
 public:
  CqCall(const CqCall&) = delete;
  CqCall& operator=(const CqCall&) = delete;

 protected:
  explicit CqCall(LiveCallCounter* live) : live_(live) { live_->Add(); }
  virtual ~CqCall() { live_->Remove(); }

  // The tag for the call's Finish (or FinishWithError).
  void* finish_tag() { return static_cast<CqTag*>(&finish_tag_); }
  // The tag for ServerContext::AsyncNotifyWhenDone, set before the call is requested.
  void* done_tag() { return static_cast<CqTag*>(&done_tag_); }

 private:
  void OnEventBack(bool /*ok*/) {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  LiveCallCounter* live_;
  std::atomic<int> events_left_{2};
  CallStep<CqCall> finish_tag_{this, &CqCall::OnEventBack};
  CallStep<CqCall> done_tag_{this, &CqCall::OnEventBack};
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_CQ_CALL_H_
