// Private: the threads that poll a gRPC server completion queue and run each event's handler on
// the polling thread itself (gRPC's completion-queue async API), so an event costs no hand-off
// between threads — the callback API of Debian's gRPC polls on its own threads and hands each
// event to an executor, two wake-ups per event.
#ifndef CUVIL_SERVER_SRC_GRPC_CQ_DRIVER_H_
#define CUVIL_SERVER_SRC_GRPC_CQ_DRIVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <thread>
#include <vector>

namespace cuvil {

// A tag put on the queue: the event's handler. Its owner keeps it alive until it has run.
class CqTag {
 public:
  virtual ~CqTag() = default;
  // Runs on a polling thread; `ok` is the event's outcome as gRPC reports it.
  virtual void Proceed(bool ok) = 0;
};

// A queue event forwarded to one member function of a call object.
template <typename Call>
struct CallStep final : CqTag {
  CallStep(Call* c, void (Call::*f)(bool)) : call(c), fn(f) {}
  void Proceed(bool ok) override { (call->*fn)(ok); }
  Call* call;
  void (Call::*fn)(bool);
};

// Thread-compatible: its owner calls Start once and Shutdown (after grpc::Server::Shutdown, once
// nothing will start an operation on the queue); the polling threads only run the tags.
class CqDriver {
 public:
  explicit CqDriver(std::unique_ptr<grpc::ServerCompletionQueue> cq) : cq_(std::move(cq)) {}
  ~CqDriver() { Shutdown(); }

  grpc::ServerCompletionQueue* cq() { return cq_.get(); }
  // Starts `threads` (at least 1) polling threads.
  void Start(int threads);
  // Shuts the queue down, runs the events still on it and joins the threads. Idempotent.
  void Shutdown();

 private:
  std::unique_ptr<grpc::ServerCompletionQueue> cq_;
  std::vector<std::thread> threads_;
  bool shut_down_ = false;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_CQ_DRIVER_H_
