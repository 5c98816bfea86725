// Private: a unary gRPC method served on the completion-queue API. Every method of the server's
// services is served this way (or by a stream class built on the same CqCall) so that only the
// server's own polling threads read the network: the thread that reads a call also runs it, with
// no hand-off to a gRPC callback or synchronous-server thread.
#ifndef CUVIL_SERVER_SRC_GRPC_UNARY_CALL_H_
#define CUVIL_SERVER_SRC_GRPC_UNARY_CALL_H_

#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "grpc_cq_call.h"

namespace cuvil {

// Where and how a unary method's handler runs.
enum class HandlerKind {
  // On the polling thread that received the call, holding a call slot.
  kQuick,
  // On the polling thread without a slot: liveness and readiness must answer a busy server.
  kProbe,
  // On the blocking pool, holding a call slot: model loads, drains, compiles, snapshots — work
  // that must not stall the threads that poll the queue.
  kBlocking,
};

// Thread-safe (see ArmedMethod).
template <typename Request, typename Response>
class UnaryMethod final : public ArmedMethod {
 public:
  using Writer = grpc::ServerAsyncResponseWriter<Response>;
  // Asks gRPC for the method's next call (an AsyncService's generated RequestX).
  using Requester = std::function<void(grpc::ServerContext*, Request*, Writer*,
                                       grpc::ServerCompletionQueue*, void* tag)>;
  // Fills the response; the status it returns is the call's.
  using Handler = std::function<grpc::Status(grpc::ServerContext*, const Request&, Response*)>;

  UnaryMethod(const CallContext& context, HandlerKind kind, Requester requester, Handler handler)
      : context_(context),
        kind_(kind),
        requester_(std::move(requester)),
        handler_(std::move(handler)) {}

  void Arm() override {
    auto* call = new Call(this);
    call->AwaitClient();
  }

 private:
  // One call: armed, received, handled, answered.
  class Call final : public CqCall {
   public:
    explicit Call(UnaryMethod* method) : CqCall(method->context_.live), method_(method) {}

    // Asks gRPC for the next call of the method, to arrive on request_tag_.
    void AwaitClient() {
      ctx_.AsyncNotifyWhenDone(done_tag());
      method_->requester_(&ctx_, &request_, &writer_, method_->context_.cq,
                          static_cast<CqTag*>(&request_tag_));
    }

   private:
    void OnRequest(bool ok) {
      if (!ok) {  // The server is shutting down: the call never started.
        delete this;
        return;
      }
      method_->Arm();
      const CallContext& context = method_->context_;
      if (method_->kind_ != HandlerKind::kProbe) {
        slot_.emplace(context.limiter);
        if (!slot_->ok()) return Answer(context.limiter->Busy());
      }
      if (method_->kind_ != HandlerKind::kBlocking) return Handle();
      if (!context.blocking_pool->Schedule([this] { Handle(); })) {
        Answer(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
      }
    }

    void Handle() { Answer(method_->handler_(&ctx_, request_, &response_)); }

    void Answer(const grpc::Status& status) {
      if (slot_) slot_->Release();
      if (status.ok()) {
        writer_.Finish(response_, status, finish_tag());
      } else {
        writer_.FinishWithError(status, finish_tag());
      }
    }

    UnaryMethod* method_;
    grpc::ServerContext ctx_;
    Request request_;
    Response response_;
    Writer writer_{&ctx_};
    std::optional<CallLimiter::Slot> slot_;
    CallStep<Call> request_tag_{this, &Call::OnRequest};
  };

  const CallContext context_;
  const HandlerKind kind_;
  const Requester requester_;
  const Handler handler_;
};

// A UnaryMethod for `request`, an AsyncService's generated RequestX member (declared on one of
// the service's bases, hence the second type).
template <typename Service, typename Base, typename Request, typename Response>
std::unique_ptr<ArmedMethod> MakeUnaryMethod(
    const CallContext& context, HandlerKind kind, Service* service,
    void (Base::*request)(grpc::ServerContext*, Request*,
                          grpc::ServerAsyncResponseWriter<Response>*, grpc::CompletionQueue*,
                          grpc::ServerCompletionQueue*, void*),
    typename UnaryMethod<Request, Response>::Handler handler) {
  return std::make_unique<UnaryMethod<Request, Response>>(
      context, kind,
      [service, request](grpc::ServerContext* ctx, Request* q,
                         grpc::ServerAsyncResponseWriter<Response>* writer,
                         grpc::ServerCompletionQueue* cq,
                         void* tag) { (service->*request)(ctx, q, writer, cq, cq, tag); },
      std::move(handler));
}

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_UNARY_CALL_H_
