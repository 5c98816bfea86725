#include "grpc_service.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "admin.grpc.pb.h"
#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/model_config.h"
#include "grpc_cq_driver.h"
#include "grpc_infer_decode.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/resource_quota.h"
#include "health.grpc.pb.h"
#include "load_parameters.h"
#include "model_name.h"
#include "shared_memory_registry.h"

namespace cuvil {
namespace {

grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

std::string Metadata(grpc::ServerContext* ctx, const std::string& key) {
  auto it = ctx->client_metadata().find(key);
  if (it == ctx->client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

// Bounds the calls in progress: the sync methods run each on a thread of its own, and every
// inference call holds its request and response in memory, so without a cap slow clients or long
// streams could make the server start threads or buffer requests without end. Thread-safe.
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
    // Frees the slot now (an asynchronous call does so just before it sends its status); later
    // calls and the destructor do nothing.
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

  // Runs `fn` (returning grpc::Status) in a slot, or answers Busy() when none is free.
  template <typename Fn>
  grpc::Status Run(Fn&& fn) {
    Slot slot(this);
    if (!slot.ok()) return Busy();
    return fn();
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

// Converts gRPC's load parameters into the shared parser's input; views point into `q`.
LoadParametersInput LoadInput(const inference::RepositoryModelLoadRequest& q) {
  LoadParametersInput input;
  input.model_name = q.model_name();
  input.parameters.reserve(q.parameters().size());
  for (const auto& [key, param] : q.parameters()) {
    LoadParameter& p = input.parameters.emplace_back();
    p.key = key;
    if (param.has_string_param()) {
      p.type = LoadParameter::Type::kString;
      p.value = param.string_param();
    } else if (param.has_bytes_param()) {
      p.type = LoadParameter::Type::kBytes;
      p.value = param.bytes_param();
    }
  }
  return input;
}

// ModelInfer uses gRPC's completion-queue API (AsyncInferCall below) and ModelStreamInfer its
// callback API: a call is validated and queued on the model's scheduler from a gRPC thread
// without blocking it, and answered from the scheduler's completion callback, so no thread
// waits per call in flight. ModelInfer, the hot path, runs on threads that poll its queue
// themselves (CqDriver): no hand-off between gRPC threads per event. The other methods are quick
// (or administrative) and stay synchronous.
using InferenceServiceBase = inference::GRPCInferenceService::WithAsyncMethod_ModelInfer<
    inference::GRPCInferenceService::WithCallbackMethod_ModelStreamInfer<
        inference::GRPCInferenceService::Service>>;

class InferenceServiceImpl final : public InferenceServiceBase {
 public:
  InferenceServiceImpl(ModelManager* models, AdminOperations* admin, const ServerInfo* info,
                       SharedMemoryRegistry* shared_memory, int64_t max_request_bytes,
                       CallLimiter* limiter)
      : models_(models),
        admin_(admin),
        info_(info),
        shared_memory_(shared_memory),
        max_request_bytes_(max_request_bytes),
        limiter_(limiter) {}

  // Liveness and readiness probes skip the call limit: they are quick, and a busy server must
  // not look dead to its orchestrator.
  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* r) override {
    r->set_live(true);
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* r) override {
    r->set_ready(info_->ready.load());
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* q,
                          inference::ModelReadyResponse* r) override {
    return limiter_->Run([&] {
      r->set_ready(models_->Get(q->name(), q->version()).ok());
      return grpc::Status::OK;
    });
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* r) override {
    return limiter_->Run([&] {
      r->set_name(info_->name);
      r->set_version(info_->version);
      for (const auto& e : info_->extensions) r->add_extensions(e);
      return grpc::Status::OK;
    });
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* q,
                             inference::ModelMetadataResponse* r) override {
    return limiter_->Run([&] { return FillMetadata(*q, r); });
  }

  // A stream holds one call slot for as long as it is open.
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* ctx) override;

  // Validates `q` and queues it on its model's scheduler without waiting. `done` runs exactly
  // once: with the status of the call, after `r` is filled on success; on a scheduler thread, or
  // inline when validation or admission refuses the request. `*model` is set to the version
  // serving the request before it is queued; the caller keeps it (and `ctx`, `q`, `r`) alive
  // until `done` has run, and drops it off the scheduler's threads.
  void StartInfer(grpc::ServerContextBase* ctx, const inference::ModelInferRequest& q,
                  inference::ModelInferResponse* r, std::shared_ptr<ModelVersion>* model,
                  std::function<void(absl::Status)> done);

  CallLimiter* limiter() { return limiter_; }

  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest* q,
                           inference::ModelConfigResponse* r) override {
    return limiter_->Run([&] {
      auto model = models_->Get(q->name(), q->version());
      if (!model.ok()) return ToGrpc(model.status());
      *r->mutable_config() = (*model)->config();
      return grpc::Status::OK;
    });
  }

  grpc::Status ModelStatistics(grpc::ServerContext*, const inference::ModelStatisticsRequest* q,
                               inference::ModelStatisticsResponse* r) override {
    return limiter_->Run([&] {
      bool found = false;
      for (const VersionStatus& v : models_->Index()) {
        if (!q->name().empty() && v.name != q->name()) continue;
        if (!q->version().empty() && absl::StrCat(v.version) != q->version()) continue;
        if (!v.model) continue;
        found = true;
        FillStats(v, r->add_model_stats());
      }
      // Requests refused before any version: one version-less entry per model (a request for
      // one version asks about that version only).
      if (q->version().empty()) {
        for (const auto& [name, reasons] : models_->Rejections()) {
          // "" gathers names never loaded: metrics show it, a statistics entry would not.
          if (q->name().empty() ? name.empty() : name != q->name()) continue;
          FillRejectedStats(name, reasons, r->add_model_stats());
          found = true;
        }
      }
      if (!found && !q->name().empty()) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("no READY version of model '", q->name(), "'"));
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status RepositoryIndex(grpc::ServerContext* ctx, const inference::RepositoryIndexRequest* q,
                               inference::RepositoryIndexResponse* r) override {
    return limiter_->Run([&] {
      if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
      for (const VersionStatus& v : models_->Index()) {
        if (q->ready() && v.state != ModelState::kReady) continue;
        auto* m = r->add_models();
        m->set_name(v.name);
        if (v.version > 0) m->set_version(absl::StrCat(v.version));
        m->set_state(ModelStateName(v.state));
        m->set_reason(v.reason);
      }
      return grpc::Status::OK;
    });
  }

  grpc::Status RepositoryModelLoad(grpc::ServerContext* ctx,
                                   const inference::RepositoryModelLoadRequest* q,
                                   inference::RepositoryModelLoadResponse*) override {
    return limiter_->Run([&] {
      if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
      absl::StatusOr<LoadRequest> load = ParseLoadParameters(LoadInput(*q));
      if (!load.ok()) return ToGrpc(load.status());
      return ToGrpc(models_->Load(*load));
    });
  }

  grpc::Status RepositoryModelUnload(grpc::ServerContext* ctx,
                                     const inference::RepositoryModelUnloadRequest* q,
                                     inference::RepositoryModelUnloadResponse*) override {
    return limiter_->Run([&] {
      if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
      if (auto s = ValidateModelName(q->model_name()); !s.ok()) return ToGrpc(s);
      return ToGrpc(models_->Unload(q->model_name()));
    });
  }

  grpc::Status SystemSharedMemoryStatus(grpc::ServerContext*,
                                        const inference::SystemSharedMemoryStatusRequest* q,
                                        inference::SystemSharedMemoryStatusResponse* r) override {
    return limiter_->Run([&] {
      auto regions = shared_memory_->Status(q->name());
      if (!regions.ok()) return ToGrpc(regions.status());
      for (const SharedMemoryRegionStatus& region : *regions) {
        auto& out = (*r->mutable_regions())[region.name];
        out.set_name(region.name);
        out.set_key(region.key);
        out.set_offset(region.offset);
        out.set_byte_size(region.byte_size);
      }
      return grpc::Status::OK;
    });
  }

  // Registering and unregistering need the admin token when one is set (the server opens the
  // objects clients name); without one, Triton clients work unchanged.
  grpc::Status SystemSharedMemoryRegister(grpc::ServerContext* ctx,
                                          const inference::SystemSharedMemoryRegisterRequest* q,
                                          inference::SystemSharedMemoryRegisterResponse*) override {
    return limiter_->Run([&] {
      if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
      return ToGrpc(shared_memory_->Register(q->name(), q->key(), q->offset(), q->byte_size()));
    });
  }

  grpc::Status SystemSharedMemoryUnregister(
      grpc::ServerContext* ctx, const inference::SystemSharedMemoryUnregisterRequest* q,
      inference::SystemSharedMemoryUnregisterResponse*) override {
    return limiter_->Run([&] {
      if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
      shared_memory_->Unregister(q->name());
      return grpc::Status::OK;
    });
  }

  // A CPU server has no CUDA shared memory.
  grpc::Status CudaSharedMemoryStatus(grpc::ServerContext*,
                                      const inference::CudaSharedMemoryStatusRequest*,
                                      inference::CudaSharedMemoryStatusResponse*) override {
    return NoCuda();
  }
  grpc::Status CudaSharedMemoryRegister(grpc::ServerContext*,
                                        const inference::CudaSharedMemoryRegisterRequest*,
                                        inference::CudaSharedMemoryRegisterResponse*) override {
    return NoCuda();
  }
  grpc::Status CudaSharedMemoryUnregister(grpc::ServerContext*,
                                          const inference::CudaSharedMemoryUnregisterRequest*,
                                          inference::CudaSharedMemoryUnregisterResponse*) override {
    return NoCuda();
  }

 private:
  static grpc::Status NoCuda() {
    return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                        "CUDA shared memory is not supported: this server runs on the CPU");
  }

  grpc::Status FillMetadata(const inference::ModelMetadataRequest& q,
                            inference::ModelMetadataResponse* r) {
    auto model = models_->Get(q.name(), q.version());
    if (!model.ok()) return ToGrpc(model.status());
    const auto& config = (*model)->config();
    r->set_name(q.name());
    for (const VersionStatus& v : models_->Versions(q.name())) {
      if (v.state == ModelState::kReady) r->add_versions(absl::StrCat(v.version));
    }
    r->set_platform(config.platform().empty() ? config.backend() : config.platform());
    auto fill = [&](const std::vector<TensorSpec>& specs, auto* out) {
      for (const TensorSpec& spec : specs) {
        auto* t = out->Add();
        t->set_name(spec.name);
        t->set_datatype(DTypeKServeName(spec.dtype));
        if (config.max_batch_size() > 0) t->add_shape(-1);
        for (int64_t d : spec.dims) t->add_shape(d);
      }
    };
    fill((*model)->executable().inputs(), r->mutable_inputs());
    fill((*model)->executable().outputs(), r->mutable_outputs());
    return grpc::Status::OK;
  }
  static void SetDuration(const DurationStat& d, inference::StatisticDuration* out) {
    out->set_count(d.count);
    out->set_ns(d.ns);
  }

  static void FillStats(const VersionStatus& v, inference::ModelStatistics* out) {
    SchedulerStats s = v.model->Stats();
    out->set_name(v.name);
    out->set_version(absl::StrCat(v.version));
    out->set_last_inference(s.last_inference_ms);
    out->set_inference_count(s.inference_count);
    out->set_execution_count(s.execution_count);
    out->set_compilation_count(v.model->compilations());
    auto* is = out->mutable_inference_stats();
    SetDuration(s.success, is->mutable_success());
    SetDuration(s.fail, is->mutable_fail());
    SetDuration(s.queue, is->mutable_queue());
    SetDuration(s.compute_input, is->mutable_compute_input());
    SetDuration(s.compute_infer, is->mutable_compute_infer());
    SetDuration(s.compute_output, is->mutable_compute_output());
    for (const auto& [size, b] : s.batch_stats) {
      auto* bs = out->add_batch_stats();
      bs->set_batch_size(size);
      SetDuration(b.compute_input, bs->mutable_compute_input());
      SetDuration(b.compute_infer, bs->mutable_compute_infer());
      SetDuration(b.compute_output, bs->mutable_compute_output());
    }
    for (auto [reason, count] :
         {std::pair<const char*, uint64_t>{"queue_full", s.rejected_queue_full},
          {"draining", s.rejected_draining}}) {
      if (count == 0) continue;
      auto* rej = out->add_rejected();
      rej->set_reason(reason);
      rej->set_count(count);
    }
  }

  // The version-less entry of a model's requests refused before reaching a version.
  static void FillRejectedStats(const std::string& name,
                                const std::map<std::string, uint64_t>& reasons,
                                inference::ModelStatistics* out) {
    out->set_name(name);
    uint64_t total = 0;
    for (const auto& [reason, count] : reasons) {
      auto* rej = out->add_rejected();
      rej->set_reason(reason);
      rej->set_count(count);
      total += count;
    }
    out->mutable_inference_stats()->mutable_fail()->set_count(total);
  }

  // Validates `q` into a request for `model`. The request's raw inputs view `q`.
  // Shared memory outputs go to `*shm_outputs`.
  absl::StatusOr<std::unique_ptr<InferenceRequest>> Prepare(
      grpc::ServerContextBase* ctx, const inference::ModelInferRequest& q,
      std::shared_ptr<ModelVersion>* model, std::vector<SharedMemoryOutput>* shm_outputs) {
    // gRPC's own receive limit catches this first; a re-serialised size can still differ.
    if (static_cast<int64_t>(q.ByteSizeLong()) > max_request_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("request of ", q.ByteSizeLong(),
                                                       " bytes exceeds --max-request-bytes ",
                                                       max_request_bytes_));
    }
    auto routed = models_->Route(q.model_name(), q.model_version());
    if (!routed.ok()) return routed.status();
    *model = *std::move(routed);
    absl::StatusOr<WireRequest> wire = DecodeModelInferRequest(q);
    if (!wire.ok()) return wire.status();
    auto request = BuildInferenceRequest(**model, *std::move(wire), shared_memory_, shm_outputs);
    if (!request.ok()) return request.status();
    (*request)->is_cancelled = [ctx] { return ctx->IsCancelled(); };
    auto deadline = ctx->deadline();
    auto now_system = std::chrono::system_clock::now();
    if (deadline < now_system + std::chrono::hours(24 * 365)) {
      (*request)->deadline = Clock::now() + (deadline - now_system);
    }
    return request;
  }

  // Outputs in `shm_outputs` carry their shared memory parameters and no data: none at all when
  // every output is in shared memory, else an empty raw_output_contents entry each so the entries
  // stay aligned with `outputs` for clients that index them together.
  static void FillResponse(const inference::ModelInferRequest& q, const ModelVersion& model,
                           InferenceResponse& response,
                           const std::vector<SharedMemoryOutput>& shm_outputs,
                           inference::ModelInferResponse* r) {
    r->set_model_name(q.model_name());
    r->set_model_version(model.version_string());
    r->set_id(q.id());
    bool any_raw = false;
    for (const OutputTensor& out : response.outputs) {
      any_raw = any_raw || FindSharedMemoryOutput(shm_outputs, out.name) == nullptr;
    }
    for (OutputTensor& out : response.outputs) {
      auto* t = r->add_outputs();
      t->set_name(out.name);
      t->set_datatype(DTypeKServeName(out.tensor.dtype()));
      for (int64_t d : out.tensor.shape()) t->add_shape(d);
      if (const SharedMemoryOutput* o = FindSharedMemoryOutput(shm_outputs, out.name)) {
        auto& params = *t->mutable_parameters();
        params["shared_memory_region"].set_string_param(o->ref.region);
        params["shared_memory_byte_size"].set_uint64_param(out.tensor.byte_size());
        if (o->ref.offset != 0) params["shared_memory_offset"].set_uint64_param(o->ref.offset);
        if (any_raw) r->add_raw_output_contents();
        continue;
      }
      r->add_raw_output_contents()->assign(reinterpret_cast<const char*>(out.tensor.data()),
                                           out.tensor.byte_size());
    }
  }

  ModelManager* models_;
  AdminOperations* admin_;
  const ServerInfo* info_;
  SharedMemoryRegistry* shared_memory_;
  int64_t max_request_bytes_;
  CallLimiter* limiter_;
};

void InferenceServiceImpl::StartInfer(grpc::ServerContextBase* ctx,
                                      const inference::ModelInferRequest& q,
                                      inference::ModelInferResponse* r,
                                      std::shared_ptr<ModelVersion>* model,
                                      std::function<void(absl::Status)> done) {
  std::vector<SharedMemoryOutput> shm_outputs;
  absl::StatusOr<std::unique_ptr<InferenceRequest>> request = Prepare(ctx, q, model, &shm_outputs);
  if (!request.ok()) return done(request.status());
  ModelVersion* version = model->get();
  InferAsync(*version, *std::move(request),
             [&q, version, r, shm_outputs = std::move(shm_outputs),
              done = std::move(done)](InferenceResponse response) {
               if (response.status.ok()) {
                 response.status = WriteSharedMemoryOutputs(shm_outputs, response);
               }
               if (response.status.ok()) FillResponse(q, *version, response, shm_outputs, r);
               done(response.status);
             });
}

// One ModelInfer call on the completion-queue API. Armed by Arm (RequestModelInfer), it arms
// its successor when a call arrives, validates and queues the request on the polling thread
// (where a small model on an idle instance also executes it, see the scheduler's inline
// execution), and answers with Finish from whichever thread completes it. It holds the call
// slot until it sends its status, and the model version until it is deleted on a polling thread
// (the scheduler's thread that completes the call must not destroy the version), once both its
// Finish and its done notification have come back.
class AsyncInferCall {
 public:
  // Puts one new call on `cq`, waiting for a client's ModelInfer.
  static void Arm(InferenceServiceImpl* service, grpc::ServerCompletionQueue* cq,
                  LiveCallCounter* live) {
    auto* call = new AsyncInferCall(service, cq, live);
    // Delivered when the call ends in any way once it has started, so IsCancelled is valid.
    call->ctx_.AsyncNotifyWhenDone(&call->done_tag_);
    service->RequestModelInfer(&call->ctx_, &call->request_, &call->responder_, cq, cq,
                               &call->request_tag_);
  }

 private:
  // Forwards a queue event to one of the call's steps.
  struct Step final : CqTag {
    Step(AsyncInferCall* c, void (AsyncInferCall::*f)(bool)) : call(c), fn(f) {}
    void Proceed(bool ok) override { (call->*fn)(ok); }
    AsyncInferCall* call;
    void (AsyncInferCall::*fn)(bool);
  };

  AsyncInferCall(InferenceServiceImpl* service, grpc::ServerCompletionQueue* cq,
                 LiveCallCounter* live)
      : service_(service), cq_(cq), live_(live) {
    live_->Add();
  }
  ~AsyncInferCall() { live_->Remove(); }

  void OnRequest(bool ok) {
    if (!ok) {  // The server is shutting down; the call never started, no other event comes.
      delete this;
      return;
    }
    Arm(service_, cq_, live_);
    slot_.emplace(service_->limiter());
    if (!slot_->ok()) return Respond(service_->limiter()->Busy());
    service_->StartInfer(&ctx_, request_, &response_, &model_,
                         [this](absl::Status s) { Respond(ToGrpc(s)); });
  }

  void Respond(const grpc::Status& status) {
    slot_->Release();
    if (status.ok()) {
      responder_.Finish(response_, status, &finish_tag_);
    } else {
      responder_.FinishWithError(status, &finish_tag_);
    }
  }

  // The second of Finish's completion and the done notification deletes the call.
  void OnEventBack(bool /*ok*/) {
    if (events_left_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
  }

  InferenceServiceImpl* service_;
  grpc::ServerCompletionQueue* cq_;
  LiveCallCounter* live_;
  grpc::ServerContext ctx_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  grpc::ServerAsyncResponseWriter<inference::ModelInferResponse> responder_{&ctx_};
  std::optional<CallLimiter::Slot> slot_;
  std::shared_ptr<ModelVersion> model_;
  std::atomic<int> events_left_{2};
  Step request_tag_{this, &AsyncInferCall::OnRequest};
  Step finish_tag_{this, &AsyncInferCall::OnEventBack};
  Step done_tag_{this, &AsyncInferCall::OnEventBack};
};

// One ModelStreamInfer stream: read a request, run it, write its response, read the next; a
// failed request is answered with its error_message and the stream goes on. Ends with OK when
// the client finishes writing or a write fails, as the synchronous stream did. Deletes itself in
// OnDone; only one of read, inference and write is outstanding at a time, so the steps never
// run concurrently.
class StreamInferCall final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                             inference::ModelStreamInferResponse> {
 public:
  StreamInferCall(InferenceServiceImpl* service, grpc::CallbackServerContext* ctx)
      : service_(service), ctx_(ctx), slot_(service->limiter()) {
    if (!slot_.ok()) {
      Finish(service->limiter()->Busy());
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) return End();
    response_.Clear();
    // The previous request's version is dropped here, on a gRPC thread.
    model_.reset();
    service_->StartInfer(
        ctx_, request_, response_.mutable_infer_response(), &model_, [this](absl::Status s) {
          if (!s.ok()) {
            response_.set_error_message(std::string(s.message()));
            response_.mutable_infer_response()->set_id(request_.id());
            response_.mutable_infer_response()->set_model_name(request_.model_name());
          }
          StartWrite(&response_);
        });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return End();
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  void End() {
    slot_.Release();
    Finish(grpc::Status::OK);
  }

  InferenceServiceImpl* service_;
  grpc::CallbackServerContext* ctx_;
  CallLimiter::Slot slot_;
  inference::ModelInferRequest request_;
  inference::ModelStreamInferResponse response_;
  std::shared_ptr<ModelVersion> model_;
};

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
InferenceServiceImpl::ModelStreamInfer(grpc::CallbackServerContext* ctx) {
  return new StreamInferCall(this, ctx);
}

class HealthServiceImpl final : public grpc::health::v1::Health::Service {
 public:
  explicit HealthServiceImpl(const ServerInfo* info) : info_(info) {}
  grpc::Status Check(grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest*,
                     grpc::health::v1::HealthCheckResponse* r) override {
    r->set_status(info_->ready.load() ? grpc::health::v1::HealthCheckResponse::SERVING
                                      : grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    return grpc::Status::OK;
  }

 private:
  const ServerInfo* info_;
};

// Chunks of SnapshotStream answers: far below any sensible message limit.
constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;

class AdminServiceImpl final : public cuvil::admin::v1::ModelAdmin::Service {
 public:
  AdminServiceImpl(AdminOperations* admin, CallLimiter* limiter, int64_t max_message_bytes,
                   int64_t max_snapshot_bytes)
      : admin_(admin),
        limiter_(limiter),
        max_message_bytes_(max_message_bytes),
        max_snapshot_bytes_(max_snapshot_bytes) {}
  using Ctx = grpc::ServerContext;
  grpc::Status LoadModel(Ctx* c, const cuvil::admin::v1::LoadModelRequest* q,
                         cuvil::admin::v1::LoadModelResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->LoadModel(*q);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status UnloadModel(Ctx* c, const cuvil::admin::v1::UnloadModelRequest* q,
                           cuvil::admin::v1::UnloadModelResponse*) override {
    return Authorized(c, [&] { return ToGrpc(admin_->UnloadModel(*q)); });
  }
  grpc::Status ListModels(Ctx* c, const cuvil::admin::v1::ListModelsRequest*,
                          cuvil::admin::v1::ListModelsResponse* r) override {
    return Authorized(c, [&] {
      *r = admin_->ListModels();
      return grpc::Status::OK;
    });
  }
  grpc::Status ListFunctions(Ctx* c, const cuvil::admin::v1::ListFunctionsRequest* q,
                             cuvil::admin::v1::ListFunctionsResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->ListFunctions(*q);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status PatchFunction(Ctx* c, const cuvil::admin::v1::PatchFunctionRequest* q,
                             cuvil::admin::v1::PatchFunctionResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->PatchFunction(*q);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status Rollback(Ctx* c, const cuvil::admin::v1::RollbackRequest* q,
                        cuvil::admin::v1::RollbackResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->Rollback(*q);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status ListPatches(Ctx* c, const cuvil::admin::v1::ListPatchesRequest* q,
                           cuvil::admin::v1::ListPatchesResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->ListPatches(*q);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status Snapshot(Ctx* c, const cuvil::admin::v1::SnapshotRequest* q,
                        cuvil::admin::v1::SnapshotResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->Snapshot(*q);
      if (!out.ok()) return ToGrpc(out.status());
      // gRPC would refuse to send it with a generic message; say what to use instead.
      if (out->ByteSizeLong() > static_cast<uint64_t>(max_message_bytes_)) {
        return grpc::Status(
            grpc::StatusCode::RESOURCE_EXHAUSTED,
            absl::StrCat("the snapshot of '", q->name(), "' is ", out->snapshot().size(),
                         " bytes, above the message limit (", max_message_bytes_,
                         " bytes, --max-request-bytes); use SnapshotStream (cuvil-admin "
                         "snapshot does)"));
      }
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status SnapshotStream(Ctx* c, const cuvil::admin::v1::SnapshotRequest* q,
                              grpc::ServerWriter<cuvil::admin::v1::SnapshotChunk>* w) override {
    return Authorized(c, [&] {
      auto out = admin_->Snapshot(*q);
      if (!out.ok()) return ToGrpc(out.status());
      const std::string& bytes = out->snapshot();
      size_t offset = 0;
      do {
        const size_t n = std::min(kSnapshotChunkBytes, bytes.size() - offset);
        cuvil::admin::v1::SnapshotChunk chunk;
        chunk.set_data(bytes.data() + offset, n);
        if (offset == 0) {
          chunk.set_version(out->version());
          chunk.set_total_bytes(static_cast<int64_t>(bytes.size()));
        }
        if (!w->Write(chunk)) {
          return grpc::Status(grpc::StatusCode::CANCELLED, "the client went away");
        }
        offset += n;
      } while (offset < bytes.size());
      return grpc::Status::OK;
    });
  }
  grpc::Status RestoreSnapshotStream(Ctx* c,
                                     grpc::ServerReader<cuvil::admin::v1::SnapshotChunk>* reader,
                                     cuvil::admin::v1::RestoreSnapshotResponse* r) override {
    return Authorized(c, [&] {
      cuvil::admin::v1::RestoreSnapshotRequest request;
      std::string* artifact = request.mutable_snapshot();
      cuvil::admin::v1::SnapshotChunk chunk;
      while (reader->Read(&chunk)) {
        // Sizes stay far below SIZE_MAX: each chunk is bounded by the message limit.
        if (chunk.data().size() > static_cast<uint64_t>(max_snapshot_bytes_) - artifact->size()) {
          return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                              absl::StrCat("the snapshot is larger than the server's limit of ",
                                           max_snapshot_bytes_, " bytes (--max-snapshot-bytes)"));
        }
        artifact->append(chunk.data());
      }
      auto out = admin_->RestoreSnapshot(request);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }
  grpc::Status RestoreSnapshot(Ctx* c, const cuvil::admin::v1::RestoreSnapshotRequest* q,
                               cuvil::admin::v1::RestoreSnapshotResponse* r) override {
    return Authorized(c, [&] {
      auto out = admin_->RestoreSnapshot(*q);
      if (!out.ok()) return ToGrpc(out.status());
      *r = std::move(*out);
      return grpc::Status::OK;
    });
  }

 private:
  // Runs `fn` in a call slot once the caller's bearer token checks out.
  template <typename Fn>
  grpc::Status Authorized(Ctx* c, Fn&& fn) {
    return limiter_->Run([&] {
      if (auto s = admin_->Authorize(Metadata(c, "authorization")); !s.ok()) return ToGrpc(s);
      return fn();
    });
  }
  AdminOperations* admin_;
  CallLimiter* limiter_;
  const int64_t max_message_bytes_;
  const int64_t max_snapshot_bytes_;
};

class GrpcServiceImpl final : public GrpcService {
 public:
  GrpcServiceImpl(const GrpcServiceOptions& options, ModelManager* models, AdminOperations* admin,
                  const ServerInfo* info, SharedMemoryRegistry* shared_memory)
      : limiter_(options.max_concurrent_calls),
        inference_(models, admin, info, shared_memory, options.max_request_bytes, &limiter_),
        health_(info),
        admin_(admin, &limiter_, options.max_request_bytes, options.max_snapshot_bytes) {}

  absl::Status Start(const GrpcServiceOptions& options) {
    grpc::ServerBuilder builder;
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (!options.tls_cert_pem.empty()) {
      grpc::SslServerCredentialsOptions ssl(
          options.tls_client_ca_pem.empty()
              ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
              : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
      ssl.pem_root_certs = options.tls_client_ca_pem;
      ssl.pem_key_cert_pairs.push_back({options.tls_key_pem, options.tls_cert_pem});
      credentials = grpc::SslServerCredentials(ssl);
    }
    builder.AddListeningPort(absl::StrCat(options.bind_address, ":", options.port), credentials,
                             &port_);
    // gRPC refuses larger messages itself with RESOURCE_EXHAUSTED before any handler runs.
    const int max_bytes =
        static_cast<int>(std::clamp<int64_t>(options.max_request_bytes, 1, INT_MAX));
    builder.SetMaxReceiveMessageSize(max_bytes);
    builder.SetMaxSendMessageSize(max_bytes);
    // The synchronous methods run each call on its own thread. The call limit answers first,
    // with a clear message; the thread quota is the backstop. Inference calls use the callback
    // API and take no thread of their own.
    builder.SetSyncServerOption(grpc::ServerBuilder::NUM_CQS, std::max(1, options.sync_cqs));
    builder.SetSyncServerOption(grpc::ServerBuilder::MIN_POLLERS,
                                std::max(1, options.sync_min_pollers));
    builder.SetSyncServerOption(grpc::ServerBuilder::MAX_POLLERS,
                                std::max(1, options.sync_max_pollers));
    grpc::ResourceQuota quota("cuvil-grpc");
    quota.SetMaxThreads(std::max(1, options.sync_max_threads));
    builder.SetResourceQuota(quota);
    builder.RegisterService(&inference_);
    builder.RegisterService(&health_);
    builder.RegisterService(&admin_);
    infer_queue_ = std::make_unique<CqDriver>(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind gRPC to ", options.bind_address, ":", options.port));
    }
    // Calls waiting for a client: each arriving call arms a successor, so this many calls can
    // arrive at once before the polling threads get to re-arm.
    const int threads = std::max(1, options.infer_threads);
    for (int i = 0; i < 2 * threads + 2; ++i) {
      AsyncInferCall::Arm(&inference_, infer_queue_->cq(), &live_infer_calls_);
    }
    infer_queue_->Start(threads);
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Stop(int64_t deadline_ms) override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
      // Armed calls come back refused; calls in progress end once their scheduler answers them
      // (executions are bounded). Only then may the queue shut down: an operation started on a
      // shut-down queue is a gRPC assertion failure.
      live_infer_calls_.AwaitNone();
      infer_queue_->Shutdown();
      server_->Wait();
      server_.reset();
    }
  }

  ~GrpcServiceImpl() override { Stop(0); }

 private:
  CallLimiter limiter_;  // Before the services, which keep a pointer to it.
  InferenceServiceImpl inference_;
  HealthServiceImpl health_;
  AdminServiceImpl admin_;
  LiveCallCounter live_infer_calls_;
  std::unique_ptr<CqDriver> infer_queue_;  // ModelInfer's queue and polling threads.
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcService>> GrpcService::Start(
    const GrpcServiceOptions& options, ModelManager* models, AdminOperations* admin,
    const ServerInfo* info, SharedMemoryRegistry* shared_memory) {
  auto service = std::make_unique<GrpcServiceImpl>(options, models, admin, info, shared_memory);
  if (auto s = service->Start(options); !s.ok()) return s;
  return service;
}

}  // namespace cuvil
