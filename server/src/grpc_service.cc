#include "grpc_service.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "admin.grpc.pb.h"
#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/model_config.h"
#include "grpc_admin_calls.h"
#include "grpc_call_util.h"
#include "grpc_cq_driver.h"
#include "grpc_infer_decode.h"
#include "grpc_infer_wire.h"
#include "grpc_service.grpc.pb.h"
#include "grpc_unary_call.h"
#include "grpcpp/grpcpp.h"
#include "health.grpc.pb.h"
#include "inflight_budget.h"
#include "load_parameters.h"
#include "model_name.h"
#include "sequence_batcher.h"
#include "shared_memory_registry.h"

namespace cuvil {
namespace {

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

// The handlers of inference.GRPCInferenceService. Every method runs on the completion-queue API
// (grpc_unary_call.h; ModelInfer and ModelStreamInfer by the call classes below): a call is read,
// validated and queued on the model's scheduler by the thread polling the queue, without blocking
// it, and answered from the scheduler's completion callback, so no thread waits per call in flight
// and no second gRPC thread touches a call. Thread-safe.
class InferenceHandlers {
 public:
  InferenceHandlers(ModelManager* models, AdminOperations* admin, const ServerInfo* info,
                    SharedMemoryRegistry* shared_memory, int64_t max_request_bytes,
                    InflightBudget* inflight_budget)
      : models_(models),
        admin_(admin),
        info_(info),
        shared_memory_(shared_memory),
        max_request_bytes_(max_request_bytes),
        inflight_budget_(inflight_budget) {}

  // Liveness and readiness probes skip the call limit: they are quick, and a busy server must
  // not look dead to its orchestrator.
  grpc::Status ServerLive(grpc::ServerContext*, const inference::ServerLiveRequest*,
                          inference::ServerLiveResponse* r) {
    r->set_live(true);
    return grpc::Status::OK;
  }

  grpc::Status ServerReady(grpc::ServerContext*, const inference::ServerReadyRequest*,
                           inference::ServerReadyResponse* r) {
    r->set_ready(info_->ready.load());
    return grpc::Status::OK;
  }

  grpc::Status ModelReady(grpc::ServerContext*, const inference::ModelReadyRequest* q,
                          inference::ModelReadyResponse* r) {
    r->set_ready(models_->Get(q->name(), q->version()).ok());
    return grpc::Status::OK;
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* r) {
    r->set_name(info_->name);
    r->set_version(info_->version);
    for (const auto& e : info_->extensions) r->add_extensions(e);
    return grpc::Status::OK;
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* q,
                             inference::ModelMetadataResponse* r) {
    return FillMetadata(*q, r);
  }

  // Validates `q` and queues it on its model's scheduler without waiting. `done` runs exactly
  // once: with the status of the call, after `r` is filled on success; on a scheduler thread, or
  // inline when validation or admission refuses the request. `*model` is set to the version
  // serving the request before it is queued (when it is set already, as WireLimits sets it, that
  // version serves the request); the caller keeps it (and `ctx`, `q`, `r`) alive
  // until `done` has run, and drops it off the scheduler's threads.
  //
  // A call that reads and writes ModelInfer's bytes itself (grpc_infer_wire.h) passes the raw
  // inputs it read as `raw_inputs` (q then has none) and gets the raw outputs in `*raw_outputs`
  // instead of in `r`'s raw_output_contents: views of the response's tensors, which its holder
  // owns. Both may be null (the streaming call).
  //
  // Before the request is built and queued, `*reservation` (the call's, taken from
  // inflight_budget(); null: nothing is charged) grows by the inputs the request copies (out of
  // shared memory) and by what its response will hold, from the output shapes resolved for its
  // inputs: the tensors, and with no `raw_outputs` the copies the response message and its
  // serialised bytes take. Past the budget `done` gets RESOURCE_EXHAUSTED naming `what`.
  struct RawOutputs {
    std::vector<RawBytes> entries;
    std::shared_ptr<const void> holder;
  };
  void StartInfer(grpc::ServerContextBase* ctx, const inference::ModelInferRequest& q,
                  const std::vector<RawBytes>* raw_inputs, inference::ModelInferResponse* r,
                  RawOutputs* raw_outputs, std::shared_ptr<ModelVersion>* model,
                  InflightBudget::Reservation* reservation, const char* what,
                  std::function<void(absl::Status)> done);

  // Where raw inputs read from the wire are copied.
  const std::shared_ptr<RecycledBuffers>& input_buffers() const {
    return shared_memory_->input_buffers();
  }

  // The server-wide budget a ModelInfer's bytes are reserved against (null: unlimited).
  InflightBudget* inflight_budget() const { return inflight_budget_; }

  // The wire reader's limits for a ModelInfer: routes the model the request names (its error,
  // e.g. NotFound, refuses the request before anything else of it is parsed) into `*model`, for
  // StartInfer, and allows as many inputs, raw entries and requested outputs as it has, and
  // declared input tensors up to --max-request-bytes.
  absl::StatusOr<InferWireLimits> WireLimits(const InferWireCounts& counts,
                                             std::shared_ptr<ModelVersion>* model) const {
    auto routed = models_->Route(counts.model_name, counts.model_version);
    if (!routed.ok()) return routed.status();
    *model = *std::move(routed);
    InferWireLimits limits;
    limits.max_inputs = (*model)->executable().inputs().size();
    limits.max_outputs = (*model)->executable().outputs().size();
    limits.max_declared_bytes = static_cast<uint64_t>(max_request_bytes_);
    limits.what = absl::StrCat("model '", counts.model_name, "'");
    return limits;
  }

  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest* q,
                           inference::ModelConfigResponse* r) {
    auto model = models_->Get(q->name(), q->version());
    if (!model.ok()) return ToGrpc(model.status());
    *r->mutable_config() = (*model)->config();
    return grpc::Status::OK;
  }

  grpc::Status ModelStatistics(grpc::ServerContext*, const inference::ModelStatisticsRequest* q,
                               inference::ModelStatisticsResponse* r) {
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
  }

  grpc::Status RepositoryIndex(grpc::ServerContext* ctx, const inference::RepositoryIndexRequest* q,
                               inference::RepositoryIndexResponse* r) {
    if (auto s = admin_->Authorize(ClientMetadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    for (const VersionStatus& v : models_->Index()) {
      if (q->ready() && v.state != ModelState::kReady) continue;
      auto* m = r->add_models();
      m->set_name(v.name);
      if (v.version > 0) m->set_version(absl::StrCat(v.version));
      m->set_state(ModelStateName(v.state));
      m->set_reason(v.reason);
    }
    return grpc::Status::OK;
  }

  grpc::Status RepositoryModelLoad(grpc::ServerContext* ctx,
                                   const inference::RepositoryModelLoadRequest* q,
                                   inference::RepositoryModelLoadResponse*) {
    if (auto s = admin_->Authorize(ClientMetadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    absl::StatusOr<LoadRequest> load = ParseLoadParameters(LoadInput(*q));
    if (!load.ok()) return ToGrpc(load.status());
    return ToGrpc(models_->Load(*load));
  }

  grpc::Status RepositoryModelUnload(grpc::ServerContext* ctx,
                                     const inference::RepositoryModelUnloadRequest* q,
                                     inference::RepositoryModelUnloadResponse*) {
    if (auto s = admin_->Authorize(ClientMetadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    if (auto s = ValidateModelName(q->model_name()); !s.ok()) return ToGrpc(s);
    return ToGrpc(models_->Unload(q->model_name()));
  }

  grpc::Status SystemSharedMemoryStatus(grpc::ServerContext*,
                                        const inference::SystemSharedMemoryStatusRequest* q,
                                        inference::SystemSharedMemoryStatusResponse* r) {
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
  }

  // Registering and unregistering need the admin token when one is set (the server opens the
  // objects clients name); without one, Triton clients work unchanged.
  grpc::Status SystemSharedMemoryRegister(grpc::ServerContext* ctx,
                                          const inference::SystemSharedMemoryRegisterRequest* q,
                                          inference::SystemSharedMemoryRegisterResponse*) {
    if (auto s = admin_->Authorize(ClientMetadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    return ToGrpc(shared_memory_->Register(q->name(), q->key(), q->offset(), q->byte_size()));
  }

  grpc::Status SystemSharedMemoryUnregister(grpc::ServerContext* ctx,
                                            const inference::SystemSharedMemoryUnregisterRequest* q,
                                            inference::SystemSharedMemoryUnregisterResponse*) {
    if (auto s = admin_->Authorize(ClientMetadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    shared_memory_->Unregister(q->name());
    return grpc::Status::OK;
  }

  // A CPU server has no CUDA shared memory.
  grpc::Status CudaSharedMemoryStatus(grpc::ServerContext*,
                                      const inference::CudaSharedMemoryStatusRequest*,
                                      inference::CudaSharedMemoryStatusResponse*) {
    return NoCuda();
  }
  grpc::Status CudaSharedMemoryRegister(grpc::ServerContext*,
                                        const inference::CudaSharedMemoryRegisterRequest*,
                                        inference::CudaSharedMemoryRegisterResponse*) {
    return NoCuda();
  }
  grpc::Status CudaSharedMemoryUnregister(grpc::ServerContext*,
                                          const inference::CudaSharedMemoryUnregisterRequest*,
                                          inference::CudaSharedMemoryUnregisterResponse*) {
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

  // Adds `bytes` to `*reservation` (null: nothing to charge); ResourceExhausted past the budget.
  absl::Status Charge(InflightBudget::Reservation* reservation, uint64_t bytes, const char* what) {
    if (reservation == nullptr || inflight_budget_ == nullptr || inflight_budget_->limit() == 0) {
      return absl::OkStatus();
    }
    return inflight_budget_->Extend(reservation, bytes, what);
  }

  // What the response to `request` will hold: its requested outputs' tensors, which the
  // scheduler allocates, and with `copied` (a response built as a message, the streaming call's)
  // twice more the bytes of those not written into shared memory: the message's copy and its
  // serialised bytes. ModelInfer's raw response refers to the tensors. 0 when the shapes cannot
  // be resolved: the scheduler then fails the request before allocating any output.
  static uint64_t ResponseBytes(const ModelVersion& model, const InferenceRequest& request,
                                const std::vector<SharedMemoryOutput>& shm_outputs, bool copied) {
    absl::StatusOr<std::vector<std::vector<int64_t>>> shapes = ResolveOutputShapes(model, request);
    if (!shapes.ok()) return 0;
    const std::vector<TensorSpec>& specs = model.executable().outputs();
    uint64_t bytes = 0;
    auto add = [&bytes](uint64_t more) {
      bytes = more > UINT64_MAX - bytes ? UINT64_MAX : bytes + more;
    };
    for (size_t o = 0; o < specs.size() && o < shapes->size(); ++o) {
      if (o < request.output_requested.size() && !request.output_requested[o]) continue;
      const uint64_t tensor =
          SaturatingTensorBytes((*shapes)[o], static_cast<uint64_t>(DTypeSize(specs[o].dtype)));
      add(tensor);
      if (copied && FindSharedMemoryOutput(shm_outputs, specs[o].name) == nullptr) {
        add(tensor);
        add(tensor);
      }
    }
    return bytes;
  }

  // Routes `q` to `*model` (unless the caller already did) and decodes it into a wire request,
  // charging `*reservation` with the inputs it copies (see StartInfer). Its raw inputs view `q`.
  absl::StatusOr<WireRequest> PrepareWire(const inference::ModelInferRequest& q,
                                          const std::vector<RawBytes>* raw_inputs,
                                          std::shared_ptr<ModelVersion>* model,
                                          InflightBudget::Reservation* reservation,
                                          const char* what) {
    // gRPC's own receive limit catches this first; a re-serialised size can still differ.
    if (static_cast<int64_t>(q.ByteSizeLong()) > max_request_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("request of ", q.ByteSizeLong(),
                                                       " bytes exceeds --max-request-bytes ",
                                                       max_request_bytes_));
    }
    if (*model == nullptr) {
      auto routed = models_->Route(q.model_name(), q.model_version());
      if (!routed.ok()) return routed.status();
      *model = *std::move(routed);
    }
    absl::StatusOr<WireRequest> wire = DecodeModelInferRequest(q, raw_inputs);
    if (!wire.ok()) return wire.status();
    if (absl::Status s = Charge(reservation, CopiedInputBytes(*wire), what); !s.ok()) return s;
    return wire;
  }

  // Validates `wire` into a request for `model`, and charges `*reservation` with what its
  // response holds (see StartInfer). Shared memory outputs go to `*shm_outputs`.
  absl::StatusOr<std::unique_ptr<InferenceRequest>> PrepareRequest(
      grpc::ServerContextBase* ctx, const ModelVersion& model, WireRequest wire,
      std::vector<SharedMemoryOutput>* shm_outputs, bool copied_response,
      InflightBudget::Reservation* reservation, const char* what) {
    auto request = BuildInferenceRequest(model, std::move(wire), shared_memory_, shm_outputs);
    if (!request.ok()) return request.status();
    // The outputs are allocated as the request runs: charged before it is queued.
    if (reservation != nullptr) {
      const uint64_t response = ResponseBytes(model, **request, *shm_outputs, copied_response);
      if (absl::Status s = Charge(reservation, response, what); !s.ok()) return s;
    }
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
  // stay aligned with `outputs` for clients that index them together. With `raw_outputs` the
  // entries go there, and the response's tensors move into its holder.
  static void FillResponse(const inference::ModelInferRequest& q, const ModelVersion& model,
                           InferenceResponse& response,
                           const std::vector<SharedMemoryOutput>& shm_outputs,
                           inference::ModelInferResponse* r, RawOutputs* raw_outputs) {
    r->set_model_name(q.model_name());
    r->set_model_version(model.version_string());
    r->set_id(q.id());
    if (response.sequence_step > 0) {
      (*r->mutable_parameters())["sequence_step"].set_uint64_param(response.sequence_step);
    }
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
        if (any_raw && raw_outputs != nullptr) raw_outputs->entries.push_back({});
        if (any_raw && raw_outputs == nullptr) r->add_raw_output_contents();
        continue;
      }
      if (raw_outputs != nullptr) {
        raw_outputs->entries.push_back({out.tensor.data(), out.tensor.byte_size()});
      } else {
        r->add_raw_output_contents()->assign(reinterpret_cast<const char*>(out.tensor.data()),
                                             out.tensor.byte_size());
      }
    }
    if (raw_outputs != nullptr) {
      // Moving the tensors keeps their buffers where the entries point.
      raw_outputs->holder =
          std::make_shared<std::vector<OutputTensor>>(std::move(response.outputs));
    }
  }

  ModelManager* models_;
  AdminOperations* admin_;
  const ServerInfo* info_;
  SharedMemoryRegistry* shared_memory_;
  int64_t max_request_bytes_;
  InflightBudget* inflight_budget_;
};

void InferenceHandlers::StartInfer(grpc::ServerContextBase* ctx,
                                   const inference::ModelInferRequest& q,
                                   const std::vector<RawBytes>* raw_inputs,
                                   inference::ModelInferResponse* r, RawOutputs* raw_outputs,
                                   std::shared_ptr<ModelVersion>* model,
                                   InflightBudget::Reservation* reservation, const char* what,
                                   std::function<void(absl::Status)> done) {
  absl::StatusOr<WireRequest> wire = PrepareWire(q, raw_inputs, model, reservation, what);
  if (!wire.ok()) return done(wire.status());
  ModelVersion* version = model->get();
  SequenceBatcher* sequences = version->sequences();
  auto shm_outputs = std::make_shared<std::vector<SharedMemoryOutput>>();
  auto answer = [&q, version, r, raw_outputs, shm_outputs,
                 done = std::move(done)](InferenceResponse response) {
    if (response.status.ok()) {
      response.status = WriteSharedMemoryOutputs(*shm_outputs, response);
    }
    if (response.status.ok()) {
      FillResponse(q, *version, response, *shm_outputs, r, raw_outputs);
    }
    done(response.status);
  };
  auto run = [this, ctx, version, shm_outputs, copied_response = raw_outputs == nullptr,
              reservation, what](WireRequest w, bool on_step_thread,
                                 std::function<void(InferenceResponse)> finish) {
    absl::StatusOr<std::unique_ptr<InferenceRequest>> request = PrepareRequest(
        ctx, *version, std::move(w), shm_outputs.get(), copied_response, reservation, what);
    if (!request.ok()) {
      InferenceResponse failed;
      failed.status = request.status();
      return finish(std::move(failed));
    }
    // A sequence's next step started by its previous step's answer is on a scheduler thread
    // that must not execute it inline; a step of an idle sequence is on this polling thread,
    // which may, as for any request.
    if (!on_step_thread) (*request)->may_run_inline = false;
    InferAsync(*version, *std::move(request), std::move(finish));
  };
  if (sequences != nullptr) {
    sequences->Step(*std::move(wire), std::move(run), std::move(answer));
  } else {
    run(*std::move(wire), /*on_step_thread=*/true, std::move(answer));
  }
}

using InferenceService = inference::GRPCInferenceService::AsyncService;
// ModelInfer's and ModelStreamInfer's requests and responses travel as bytes the calls read and
// write themselves (grpc_infer_wire.h); every other method as gRPC's generated messages.
using InferenceServiceWithRawInfer =
    inference::GRPCInferenceService::WithRawMethod_ModelStreamInfer<
        inference::GRPCInferenceService::WithRawMethod_ModelInfer<InferenceService>>;

// ModelInfer: validates and queues the request on the polling thread that received it (where a
// small model on an idle instance also executes it, see the scheduler's inline execution), and
// answers with Finish from whichever thread completes it. A call holds its slot until it sends
// its status, and the model version until it is deleted on a polling thread (the scheduler's
// thread that completes the call must not destroy the version). Its message's bytes are reserved
// against the server's in-flight budget until the call is deleted, after its response has gone
// out; the wire reader routes the model first and checks the request against it before parsing
// or copying anything in proportion to the message.
class InferMethod final : public ArmedMethod {
 public:
  InferMethod(const CallContext& context, InferenceServiceWithRawInfer* service,
              InferenceHandlers* handlers)
      : context_(context), service_(service), handlers_(handlers) {}

  void Arm() override {
    auto* call = new Call(this);
    call->AwaitClient();
  }

 private:
  class Call final : public CqCall {
   public:
    explicit Call(InferMethod* method) : CqCall(method->context_.live), method_(method) {}

    // Asks gRPC for the next call of the method, to arrive on request_tag_.
    void AwaitClient() {
      ctx_.AsyncNotifyWhenDone(done_tag());
      method_->service_->RequestModelInfer(&ctx_, &request_wire_, &responder_, method_->context_.cq,
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
      if (!slot_->ok()) {
        request_wire_.Clear();
        return Respond(method_->context_.limiter->Busy());
      }
      if (InflightBudget* budget = method_->handlers_->inflight_budget(); budget != nullptr) {
        absl::StatusOr<InflightBudget::Reservation> reserved =
            budget->Reserve(request_wire_.Length(), "a gRPC ModelInfer request");
        if (!reserved.ok()) {
          request_wire_.Clear();
          return Respond(ToGrpc(reserved.status()));
        }
        reservation_ = *std::move(reserved);
      }
      absl::Status read =
          ReadModelInferRequest(request_wire_, method_->handlers_->input_buffers(), &request_,
                                [this](const InferWireCounts& counts) {
                                  return method_->handlers_->WireLimits(counts, &model_);
                                });
      request_wire_.Clear();  // gRPC's receive slices are not needed any more.
      if (!read.ok()) return Respond(ToGrpc(read));
      method_->handlers_->StartInfer(&ctx_, request_.header, &request_.raw, &response_,
                                     &raw_outputs_, &model_, &reservation_,
                                     "a gRPC ModelInfer request with its response",
                                     [this](absl::Status s) { Respond(ToGrpc(s)); });
    }

    void Respond(const grpc::Status& status) {
      slot_->Release();
      if (status.ok()) {
        WriteModelInferResponse(response_, raw_outputs_.entries, std::move(raw_outputs_.holder),
                                &response_wire_);
        responder_.Finish(response_wire_, status, finish_tag());
      } else {
        responder_.FinishWithError(status, finish_tag());
      }
    }

    InferMethod* method_;
    grpc::ServerContext ctx_;
    grpc::ByteBuffer request_wire_;
    SplitInferRequest request_;
    inference::ModelInferResponse response_;  // Without its raw outputs, which are in raw_outputs_.
    InferenceHandlers::RawOutputs raw_outputs_;
    grpc::ByteBuffer response_wire_;
    grpc::ServerAsyncResponseWriter<grpc::ByteBuffer> responder_{&ctx_};
    std::optional<CallLimiter::Slot> slot_;
    InflightBudget::Reservation reservation_;  // Released when the call is deleted.
    std::shared_ptr<ModelVersion> model_;
    CallStep<Call> request_tag_{this, &Call::OnRequest};
  };

  const CallContext context_;
  InferenceServiceWithRawInfer* service_;
  InferenceHandlers* handlers_;
};

// ModelStreamInfer: read a request, run it, write its response, read the next; a failed request
// is answered with its error_message and the stream goes on. Ends with OK when the client
// finishes writing or a write fails. Only one of read, inference and write is outstanding at a
// time, so the steps never run concurrently. A stream holds one call slot while it is open.
//
// Each message is read as ModelInfer's are (grpc_infer_wire.h), never by protobuf: its bytes are
// reserved against the in-flight budget until its response has been written, and the wire reader
// routes the model it names and checks its counts and declared sizes before anything in
// proportion to it is parsed or copied. A message refused there is answered with the error and
// the stream goes on.
class StreamInferMethod final : public ArmedMethod {
 public:
  StreamInferMethod(const CallContext& context, InferenceServiceWithRawInfer* service,
                    InferenceHandlers* handlers)
      : context_(context), service_(service), handlers_(handlers) {}

  void Arm() override {
    auto* call = new Call(this);
    call->AwaitClient();
  }

 private:
  class Call final : public CqCall {
   public:
    explicit Call(StreamInferMethod* method) : CqCall(method->context_.live), method_(method) {}

    // Asks gRPC for the next call of the method, to arrive on request_tag_.
    void AwaitClient() {
      ctx_.AsyncNotifyWhenDone(done_tag());
      method_->service_->RequestModelStreamInfer(&ctx_, &stream_, method_->context_.cq,
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
      stream_.Read(&request_wire_, static_cast<CqTag*>(&read_tag_));
    }

    void OnRead(bool ok) {
      if (!ok) return End(grpc::Status::OK);
      response_.Clear();
      request_ = SplitInferRequest{};
      // The previous request's version is dropped here, on a polling thread.
      model_.reset();
      InferenceHandlers* handlers = method_->handlers_;
      if (InflightBudget* budget = handlers->inflight_budget(); budget != nullptr) {
        absl::StatusOr<InflightBudget::Reservation> reserved =
            budget->Reserve(request_wire_.Length(), "a gRPC ModelStreamInfer request");
        if (!reserved.ok()) {
          request_wire_.Clear();
          return Answer(reserved.status());
        }
        reservation_ = *std::move(reserved);
      }
      absl::Status read = ReadModelInferRequest(request_wire_, handlers->input_buffers(), &request_,
                                                [this, handlers](const InferWireCounts& counts) {
                                                  // Named in an error answer even when the header
                                                  // is never parsed.
                                                  request_.header.set_model_name(counts.model_name);
                                                  return handlers->WireLimits(counts, &model_);
                                                });
      request_wire_.Clear();  // gRPC's receive slices are not needed any more.
      if (!read.ok()) return Answer(read);
      handlers->StartInfer(&ctx_, request_.header, &request_.raw,
                           response_.mutable_infer_response(), nullptr, &model_, &reservation_,
                           "a gRPC ModelStreamInfer request with its response",
                           [this](absl::Status s) { Answer(s); });
    }

    // Writes the response to the current request, or its error.
    void Answer(const absl::Status& s) {
      if (!s.ok()) {
        response_.set_error_message(std::string(s.message()));
        response_.mutable_infer_response()->set_id(request_.header.id());
        response_.mutable_infer_response()->set_model_name(request_.header.model_name());
      }
      bool own = false;
      grpc::Status serialized =
          grpc::SerializationTraits<inference::ModelStreamInferResponse>::Serialize(
              response_, &response_wire_, &own);
      if (!serialized.ok()) return End(serialized);
      stream_.Write(response_wire_, static_cast<CqTag*>(&write_tag_));
    }

    void OnWrite(bool ok) {
      // The request and its bytes are done with once its response is out.
      reservation_.Release();
      request_ = SplitInferRequest{};
      response_wire_.Clear();
      if (!ok) return End(grpc::Status::OK);
      stream_.Read(&request_wire_, static_cast<CqTag*>(&read_tag_));
    }

    void End(const grpc::Status& status) {
      if (slot_) slot_->Release();
      stream_.Finish(status, finish_tag());
    }

    StreamInferMethod* method_;
    grpc::ServerContext ctx_;
    grpc::ServerAsyncReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer> stream_{&ctx_};
    std::optional<CallLimiter::Slot> slot_;
    grpc::ByteBuffer request_wire_;
    SplitInferRequest request_;
    InflightBudget::Reservation reservation_;  // The current message's bytes.
    inference::ModelStreamInferResponse response_;
    grpc::ByteBuffer response_wire_;
    std::shared_ptr<ModelVersion> model_;
    CallStep<Call> request_tag_{this, &Call::OnRequest};
    CallStep<Call> read_tag_{this, &Call::OnRead};
    CallStep<Call> write_tag_{this, &Call::OnWrite};
  };

  const CallContext context_;
  InferenceServiceWithRawInfer* service_;
  InferenceHandlers* handlers_;
};

// Appends every method of inference.GRPCInferenceService to `methods`.
void AddInferenceMethods(const CallContext& context, InferenceServiceWithRawInfer* service,
                         InferenceHandlers* h, std::vector<std::unique_ptr<ArmedMethod>>* methods) {
  using S = InferenceService;
  auto add = [&](std::unique_ptr<ArmedMethod> method) { methods->push_back(std::move(method)); };
  // Quick: answered on the polling thread. Probes skip the call limit.
  const HandlerKind probe = HandlerKind::kProbe;
  const HandlerKind quick = HandlerKind::kQuick;
  add(MakeUnaryMethod(context, probe, service, &S::RequestServerLive,
                      [h](auto* c, const auto& q, auto* r) { return h->ServerLive(c, &q, r); }));
  add(MakeUnaryMethod(context, probe, service, &S::RequestServerReady,
                      [h](auto* c, const auto& q, auto* r) { return h->ServerReady(c, &q, r); }));
  add(MakeUnaryMethod(context, quick, service, &S::RequestModelReady,
                      [h](auto* c, const auto& q, auto* r) { return h->ModelReady(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestServerMetadata,
      [h](auto* c, const auto& q, auto* r) { return h->ServerMetadata(c, &q, r); }));
  add(MakeUnaryMethod(context, quick, service, &S::RequestModelMetadata,
                      [h](auto* c, const auto& q, auto* r) { return h->ModelMetadata(c, &q, r); }));
  add(MakeUnaryMethod(context, quick, service, &S::RequestModelConfig,
                      [h](auto* c, const auto& q, auto* r) { return h->ModelConfig(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestModelStatistics,
      [h](auto* c, const auto& q, auto* r) { return h->ModelStatistics(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestRepositoryIndex,
      [h](auto* c, const auto& q, auto* r) { return h->RepositoryIndex(c, &q, r); }));
  // Loads compile and unloads drain: the blocking pool runs them.
  add(MakeUnaryMethod(
      context, HandlerKind::kBlocking, service, &S::RequestRepositoryModelLoad,
      [h](auto* c, const auto& q, auto* r) { return h->RepositoryModelLoad(c, &q, r); }));
  add(MakeUnaryMethod(
      context, HandlerKind::kBlocking, service, &S::RequestRepositoryModelUnload,
      [h](auto* c, const auto& q, auto* r) { return h->RepositoryModelUnload(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestSystemSharedMemoryStatus,
      [h](auto* c, const auto& q, auto* r) { return h->SystemSharedMemoryStatus(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestSystemSharedMemoryRegister,
      [h](auto* c, const auto& q, auto* r) { return h->SystemSharedMemoryRegister(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestSystemSharedMemoryUnregister,
      [h](auto* c, const auto& q, auto* r) { return h->SystemSharedMemoryUnregister(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestCudaSharedMemoryStatus,
      [h](auto* c, const auto& q, auto* r) { return h->CudaSharedMemoryStatus(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestCudaSharedMemoryRegister,
      [h](auto* c, const auto& q, auto* r) { return h->CudaSharedMemoryRegister(c, &q, r); }));
  add(MakeUnaryMethod(
      context, quick, service, &S::RequestCudaSharedMemoryUnregister,
      [h](auto* c, const auto& q, auto* r) { return h->CudaSharedMemoryUnregister(c, &q, r); }));
  add(std::make_unique<InferMethod>(context, service, h));
  add(std::make_unique<StreamInferMethod>(context, service, h));
}

// grpc.health.v1.Health/Check: SERVING once the server is ready; a probe, outside the call limit.
void AddHealthMethods(const CallContext& context, grpc::health::v1::Health::AsyncService* service,
                      const ServerInfo* info, std::vector<std::unique_ptr<ArmedMethod>>* methods) {
  using grpc::health::v1::HealthCheckResponse;
  methods->push_back(MakeUnaryMethod(
      context, HandlerKind::kProbe, service, &grpc::health::v1::Health::AsyncService::RequestCheck,
      [info](grpc::ServerContext*, const grpc::health::v1::HealthCheckRequest&,
             HealthCheckResponse* r) {
        r->set_status(info->ready.load() ? HealthCheckResponse::SERVING
                                         : HealthCheckResponse::NOT_SERVING);
        return grpc::Status::OK;
      }));
}

class GrpcServiceImpl final : public GrpcService {
 public:
  GrpcServiceImpl(const GrpcServiceOptions& options, ModelManager* models, AdminOperations* admin,
                  const ServerInfo* info, SharedMemoryRegistry* shared_memory)
      : admin_(admin),
        info_(info),
        limiter_(options.max_concurrent_calls),
        inference_(models, admin, info, shared_memory, options.max_request_bytes,
                   options.inflight_budget) {}

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
    // gRPC sets SO_REUSEPORT by default: a second server on a port in use would share it (see
    // exclusive_listener.h) instead of failing to start.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    // gRPC refuses larger messages itself with RESOURCE_EXHAUSTED before any handler runs.
    const int64_t max_receive =
        options.max_receive_bytes > 0 ? options.max_receive_bytes : options.max_request_bytes;
    builder.SetMaxReceiveMessageSize(
        static_cast<int>(std::clamp<int64_t>(max_receive, 1, INT_MAX)));
    builder.SetMaxSendMessageSize(
        static_cast<int>(std::clamp<int64_t>(options.max_request_bytes, 1, INT_MAX)));
    // gRPC reads a whole message before any handler sees it, so the in-flight budget alone
    // would come too late for many large messages arriving at once: gRPC's own buffers obey a
    // resource quota (past it, the transport sheds streams and shrinks windows), a share of
    // --max-inflight-bytes the budget leaves out (InflightBudgetSplit, in inflight_budget.h,
    // says how much and why).
    if (options.resource_quota_bytes != 0) {
      grpc::ResourceQuota quota("cuvil-grpc");
      quota.Resize(static_cast<size_t>(std::min<uint64_t>(options.resource_quota_bytes, SIZE_MAX)));
      builder.SetResourceQuota(quota);
    }
    // gRPC reads every ModelInfer message whole as soon as its stream opens, and the quota sheds
    // only after the fact: a connection's streams are what one client can make it buffer.
    if (options.max_streams_per_connection > 0) {
      builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                 options.max_streams_per_connection);
    }
    // Every method is asynchronous: gRPC starts no synchronous-server or callback threads, so the
    // queue's own polling threads are the only ones reading the network.
    builder.RegisterService(&inference_service_);
    builder.RegisterService(&health_service_);
    builder.RegisterService(&admin_service_);
    queue_ = std::make_unique<CqDriver>(builder.AddCompletionQueue());
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          absl::StrCat("cannot bind gRPC to ", options.bind_address, ":", options.port));
    }
    blocking_pool_ = std::make_unique<ThreadPool>(std::max(1, options.blocking_threads));
    const CallContext context{queue_->cq(), &live_calls_, &limiter_, blocking_pool_.get()};
    AddInferenceMethods(context, &inference_service_, &inference_, &methods_);
    AddHealthMethods(context, &health_service_, info_, &methods_);
    AddAdminMethods(context, AdminCallLimits{options.max_request_bytes, options.max_snapshot_bytes},
                    &admin_service_, admin_, &methods_);
    // Calls waiting for a client: each arriving call arms a successor, so this many calls of a
    // method can arrive at once before the polling threads get to re-arm.
    const int threads = std::max(1, options.threads);
    for (const auto& method : methods_) {
      for (int i = 0; i < threads + 1; ++i) method->Arm();
    }
    queue_->Start(threads);
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Stop(int64_t deadline_ms) override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
      // Armed calls come back refused; calls in progress end once their scheduler or the
      // blocking pool answers them (executions are bounded). Only then may the queue shut down:
      // an operation started on a shut-down queue is a gRPC assertion failure.
      live_calls_.AwaitNone();
      blocking_pool_.reset();
      queue_->Shutdown();
      server_->Wait();
      server_.reset();
    }
  }

  ~GrpcServiceImpl() override { Stop(0); }

 private:
  AdminOperations* admin_;
  const ServerInfo* info_;
  CallLimiter limiter_;
  InferenceHandlers inference_;
  InferenceServiceWithRawInfer inference_service_;
  grpc::health::v1::Health::AsyncService health_service_;
  cuvil::admin::v1::ModelAdmin::AsyncService admin_service_;
  LiveCallCounter live_calls_;
  std::unique_ptr<CqDriver> queue_;  // Every method's queue and its polling threads.
  std::unique_ptr<ThreadPool> blocking_pool_;
  std::vector<std::unique_ptr<ArmedMethod>> methods_;
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
