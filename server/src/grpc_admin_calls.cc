#include "grpc_admin_calls.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpc_call_util.h"

namespace cuvil {
namespace {

namespace av1 = cuvil::admin::v1;
using AdminService = av1::ModelAdmin::AsyncService;

// Chunks of SnapshotStream answers: far below any sensible message limit.
constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;

absl::Status Authorize(AdminOperations* admin, const grpc::ServerContext* ctx) {
  return admin->Authorize(ClientMetadata(ctx, "authorization"));
}

// A handler that checks the caller's token, then answers with what `op` returns.
template <typename Request, typename Response>
typename UnaryMethod<Request, Response>::Handler Authorized(
    AdminOperations* admin, std::function<absl::StatusOr<Response>(const Request&)> op) {
  return [admin, op = std::move(op)](grpc::ServerContext* ctx, const Request& q, Response* r) {
    if (auto s = Authorize(admin, ctx); !s.ok()) return ToGrpc(s);
    absl::StatusOr<Response> out = op(q);
    if (!out.ok()) return ToGrpc(out.status());
    *r = *std::move(out);
    return grpc::Status::OK;
  };
}

// SnapshotStream: the snapshot is taken on the blocking pool, then written in chunks, each
// write started by the previous one's completion.
class SnapshotStreamMethod final : public ArmedMethod {
 public:
  SnapshotStreamMethod(const CallContext& context, AdminService* service, AdminOperations* admin)
      : context_(context), service_(service), admin_(admin) {}

  void Arm() override {
    auto* call = new Call(this);
    call->AwaitClient();
  }

 private:
  class Call final : public CqCall {
   public:
    explicit Call(SnapshotStreamMethod* method) : CqCall(method->context_.live), method_(method) {}

    // Asks gRPC for the next call of the method, to arrive on request_tag_.
    void AwaitClient() {
      ctx_.AsyncNotifyWhenDone(done_tag());
      method_->service_->RequestSnapshotStream(&ctx_, &request_, &writer_, method_->context_.cq,
                                               method_->context_.cq,
                                               static_cast<CqTag*>(&request_tag_));
    }

   private:
    void OnRequest(bool ok) {
      if (!ok) {  // The server is shutting down: the call never started.
        delete this;
        return;
      }
      method_->Arm();
      slot_.emplace(method_->context_.limiter);
      if (!slot_->ok()) return End(method_->context_.limiter->Busy());
      if (!method_->context_.blocking_pool->Schedule([this] { Produce(); })) {
        End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
      }
    }

    // On the blocking pool.
    void Produce() {
      if (auto s = Authorize(method_->admin_, &ctx_); !s.ok()) return End(ToGrpc(s));
      absl::StatusOr<av1::SnapshotResponse> out = method_->admin_->Snapshot(request_);
      if (!out.ok()) return End(ToGrpc(out.status()));
      snapshot_ = *std::move(out);
      WriteNext();  // An empty artifact still goes out as one chunk carrying its header.
    }

    void WriteNext() {
      const std::string& bytes = snapshot_.snapshot();
      const size_t n = std::min(kSnapshotChunkBytes, bytes.size() - offset_);
      chunk_.Clear();
      chunk_.set_data(bytes.data() + offset_, n);
      if (offset_ == 0) {
        chunk_.set_version(snapshot_.version());
        chunk_.set_total_bytes(static_cast<int64_t>(bytes.size()));
      }
      offset_ += n;
      writer_.Write(chunk_, static_cast<CqTag*>(&write_tag_));
    }

    void OnWrite(bool ok) {
      if (!ok) return End(grpc::Status(grpc::StatusCode::CANCELLED, "the client went away"));
      if (offset_ < snapshot_.snapshot().size()) return WriteNext();
      End(grpc::Status::OK);
    }

    void End(const grpc::Status& status) {
      if (slot_) slot_->Release();
      writer_.Finish(status, finish_tag());
    }

    SnapshotStreamMethod* method_;
    grpc::ServerContext ctx_;
    av1::SnapshotRequest request_;
    grpc::ServerAsyncWriter<av1::SnapshotChunk> writer_{&ctx_};
    std::optional<CallLimiter::Slot> slot_;
    av1::SnapshotResponse snapshot_;
    av1::SnapshotChunk chunk_;
    size_t offset_ = 0;
    CallStep<Call> request_tag_{this, &Call::OnRequest};
    CallStep<Call> write_tag_{this, &Call::OnWrite};
  };

  const CallContext context_;
  AdminService* service_;
  AdminOperations* admin_;
};

// RestoreSnapshotStream: chunks are appended as they arrive (each read started by the previous
// one's completion), bounded by max_snapshot_bytes; the restore runs on the blocking pool once
// the client has finished writing.
class RestoreSnapshotStreamMethod final : public ArmedMethod {
 public:
  RestoreSnapshotStreamMethod(const CallContext& context, AdminService* service,
                              AdminOperations* admin, int64_t max_snapshot_bytes)
      : context_(context),
        service_(service),
        admin_(admin),
        max_snapshot_bytes_(static_cast<uint64_t>(std::max<int64_t>(0, max_snapshot_bytes))) {}

  void Arm() override {
    auto* call = new Call(this);
    call->AwaitClient();
  }

 private:
  class Call final : public CqCall {
   public:
    explicit Call(RestoreSnapshotStreamMethod* method)
        : CqCall(method->context_.live), method_(method) {}

    // Asks gRPC for the next call of the method, to arrive on request_tag_.
    void AwaitClient() {
      ctx_.AsyncNotifyWhenDone(done_tag());
      method_->service_->RequestRestoreSnapshotStream(&ctx_, &reader_, method_->context_.cq,
                                                      method_->context_.cq,
                                                      static_cast<CqTag*>(&request_tag_));
    }

   private:
    void OnRequest(bool ok) {
      if (!ok) {  // The server is shutting down: the call never started.
        delete this;
        return;
      }
      method_->Arm();
      slot_.emplace(method_->context_.limiter);
      if (!slot_->ok()) return End(method_->context_.limiter->Busy());
      if (auto s = Authorize(method_->admin_, &ctx_); !s.ok()) return End(ToGrpc(s));
      reader_.Read(&chunk_, static_cast<CqTag*>(&read_tag_));
    }

    void OnRead(bool ok) {
      if (ok) {
        std::string* artifact = request_.mutable_snapshot();
        // Sizes stay far below SIZE_MAX: each chunk is bounded by the message limit.
        if (chunk_.data().size() > method_->max_snapshot_bytes_ - artifact->size()) {
          return End(grpc::Status(
              grpc::StatusCode::RESOURCE_EXHAUSTED,
              absl::StrCat("the snapshot is larger than the server's limit of ",
                           method_->max_snapshot_bytes_, " bytes (--max-snapshot-bytes)")));
        }
        artifact->append(chunk_.data());
        return reader_.Read(&chunk_, static_cast<CqTag*>(&read_tag_));
      }
      // The client has finished writing: restore what arrived (a cut-off artifact fails its
      // checksum there).
      if (!method_->context_.blocking_pool->Schedule([this] { Restore(); })) {
        End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "the server is shutting down"));
      }
    }

    // On the blocking pool.
    void Restore() {
      absl::StatusOr<av1::RestoreSnapshotResponse> out = method_->admin_->RestoreSnapshot(request_);
      if (!out.ok()) return End(ToGrpc(out.status()));
      response_ = *std::move(out);
      slot_->Release();
      reader_.Finish(response_, grpc::Status::OK, finish_tag());
    }

    // Ends the call with `status`, an error.
    void End(const grpc::Status& status) {
      if (slot_) slot_->Release();
      reader_.FinishWithError(status, finish_tag());
    }

    RestoreSnapshotStreamMethod* method_;
    grpc::ServerContext ctx_;
    grpc::ServerAsyncReader<av1::RestoreSnapshotResponse, av1::SnapshotChunk> reader_{&ctx_};
    std::optional<CallLimiter::Slot> slot_;
    av1::SnapshotChunk chunk_;
    av1::RestoreSnapshotRequest request_;
    av1::RestoreSnapshotResponse response_;
    CallStep<Call> request_tag_{this, &Call::OnRequest};
    CallStep<Call> read_tag_{this, &Call::OnRead};
  };

  const CallContext context_;
  AdminService* service_;
  AdminOperations* admin_;
  const uint64_t max_snapshot_bytes_;
};

}  // namespace

void AddAdminMethods(const CallContext& context, const AdminCallLimits& limits,
                     AdminService* service, AdminOperations* admin,
                     std::vector<std::unique_ptr<ArmedMethod>>* methods) {
  auto add = [&](std::unique_ptr<ArmedMethod> method) { methods->push_back(std::move(method)); };
  add(MakeUnaryMethod(context, HandlerKind::kBlocking, service, &AdminService::RequestLoadModel,
                      Authorized<av1::LoadModelRequest, av1::LoadModelResponse>(
                          admin, [admin](const auto& q) { return admin->LoadModel(q); })));
  add(MakeUnaryMethod(
      context, HandlerKind::kBlocking, service, &AdminService::RequestUnloadModel,
      Authorized<av1::UnloadModelRequest, av1::UnloadModelResponse>(
          admin, [admin](const auto& q) -> absl::StatusOr<av1::UnloadModelResponse> {
            if (auto s = admin->UnloadModel(q); !s.ok()) return s;
            return av1::UnloadModelResponse();
          })));
  add(MakeUnaryMethod(context, HandlerKind::kQuick, service, &AdminService::RequestListModels,
                      Authorized<av1::ListModelsRequest, av1::ListModelsResponse>(
                          admin, [admin](const auto&) -> absl::StatusOr<av1::ListModelsResponse> {
                            return admin->ListModels();
                          })));
  add(MakeUnaryMethod(context, HandlerKind::kQuick, service, &AdminService::RequestListFunctions,
                      Authorized<av1::ListFunctionsRequest, av1::ListFunctionsResponse>(
                          admin, [admin](const auto& q) { return admin->ListFunctions(q); })));
  add(MakeUnaryMethod(context, HandlerKind::kBlocking, service, &AdminService::RequestPatchFunction,
                      Authorized<av1::PatchFunctionRequest, av1::PatchFunctionResponse>(
                          admin, [admin](const auto& q) { return admin->PatchFunction(q); })));
  add(MakeUnaryMethod(context, HandlerKind::kBlocking, service, &AdminService::RequestRollback,
                      Authorized<av1::RollbackRequest, av1::RollbackResponse>(
                          admin, [admin](const auto& q) { return admin->Rollback(q); })));
  add(MakeUnaryMethod(context, HandlerKind::kQuick, service, &AdminService::RequestListPatches,
                      Authorized<av1::ListPatchesRequest, av1::ListPatchesResponse>(
                          admin, [admin](const auto& q) { return admin->ListPatches(q); })));
  const int64_t max_message_bytes = limits.max_message_bytes;
  add(MakeUnaryMethod(
      context, HandlerKind::kBlocking, service, &AdminService::RequestSnapshot,
      Authorized<av1::SnapshotRequest, av1::SnapshotResponse>(
          admin,
          [admin, max_message_bytes](const auto& q) -> absl::StatusOr<av1::SnapshotResponse> {
            absl::StatusOr<av1::SnapshotResponse> out = admin->Snapshot(q);
            // gRPC would refuse to send it with a generic message; say what to use instead.
            if (out.ok() && out->ByteSizeLong() > static_cast<uint64_t>(max_message_bytes)) {
              return absl::ResourceExhaustedError(absl::StrCat(
                  "the snapshot of '", q.name(), "' is ", out->snapshot().size(),
                  " bytes, above the message limit (", max_message_bytes,
                  " bytes, --max-request-bytes); use SnapshotStream (cuvil-admin snapshot does)"));
            }
            return out;
          })));
  add(MakeUnaryMethod(context, HandlerKind::kBlocking, service,
                      &AdminService::RequestRestoreSnapshot,
                      Authorized<av1::RestoreSnapshotRequest, av1::RestoreSnapshotResponse>(
                          admin, [admin](const auto& q) { return admin->RestoreSnapshot(q); })));
  add(MakeUnaryMethod(context, HandlerKind::kQuick, service, &AdminService::RequestListSequences,
                      Authorized<av1::ListSequencesRequest, av1::ListSequencesResponse>(
                          admin, [admin](const auto& q) { return admin->ListSequences(q); })));
  // Blocking: the tombstone is a write to the checkpoint log.
  add(MakeUnaryMethod(context, HandlerKind::kBlocking, service, &AdminService::RequestEndSequence,
                      Authorized<av1::EndSequenceRequest, av1::EndSequenceResponse>(
                          admin, [admin](const auto& q) { return admin->EndSequence(q); })));
  add(std::make_unique<SnapshotStreamMethod>(context, service, admin));
  add(std::make_unique<RestoreSnapshotStreamMethod>(context, service, admin,
                                                    limits.max_snapshot_bytes));
}

}  // namespace cuvil
