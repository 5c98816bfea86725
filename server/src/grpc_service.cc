#include "grpc_service.h"

#include <chrono>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "admin.grpc.pb.h"
#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/model_config.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "health.grpc.pb.h"

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

template <typename T>
void AppendTyped(const google::protobuf::RepeatedField<T>& src, std::string* out) {
  out->append(reinterpret_cast<const char*>(src.data()), src.size() * sizeof(T));
}

// Converts typed `contents` into raw little-endian bytes of `dtype`.
absl::Status ContentsToBytes(const inference::InferTensorContents& c, DType dtype, const std::string& name,
                             std::string* out) {
  auto narrow = [&](auto tag, const auto& src) {
    using T = decltype(tag);
    for (auto v : src) {
      T x = static_cast<T>(v);
      out->append(reinterpret_cast<const char*>(&x), sizeof(T));
    }
  };
  switch (dtype) {
    case DType::kFloat32: AppendTyped(c.fp32_contents(), out); break;
    case DType::kFloat64: AppendTyped(c.fp64_contents(), out); break;
    case DType::kInt64: AppendTyped(c.int64_contents(), out); break;
    case DType::kUInt64: AppendTyped(c.uint64_contents(), out); break;
    case DType::kInt32: AppendTyped(c.int_contents(), out); break;
    case DType::kInt16: narrow(int16_t{}, c.int_contents()); break;
    case DType::kInt8: narrow(int8_t{}, c.int_contents()); break;
    case DType::kUInt32: AppendTyped(c.uint_contents(), out); break;
    case DType::kUInt16: narrow(uint16_t{}, c.uint_contents()); break;
    case DType::kUInt8: narrow(uint8_t{}, c.uint_contents()); break;
    case DType::kBool: narrow(uint8_t{}, c.bool_contents()); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "': datatype has no typed contents"));
  }
  return absl::OkStatus();
}

class InferenceServiceImpl final : public inference::GRPCInferenceService::Service {
 public:
  InferenceServiceImpl(ModelManager* models, AdminOperations* admin, const ServerInfo* info,
                       int64_t max_request_bytes)
      : models_(models), admin_(admin), info_(info), max_request_bytes_(max_request_bytes) {}

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
    r->set_ready(models_->Get(q->name(), q->version()).ok());
    return grpc::Status::OK;
  }

  grpc::Status ServerMetadata(grpc::ServerContext*, const inference::ServerMetadataRequest*,
                              inference::ServerMetadataResponse* r) override {
    r->set_name(info_->name);
    r->set_version(info_->version);
    for (const auto& e : info_->extensions) r->add_extensions(e);
    return grpc::Status::OK;
  }

  grpc::Status ModelMetadata(grpc::ServerContext*, const inference::ModelMetadataRequest* q,
                             inference::ModelMetadataResponse* r) override {
    auto model = models_->Get(q->name(), q->version());
    if (!model.ok()) return ToGrpc(model.status());
    const auto& config = (*model)->config();
    r->set_name(q->name());
    for (const VersionStatus& v : models_->Versions(q->name())) {
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

  grpc::Status ModelInfer(grpc::ServerContext* ctx, const inference::ModelInferRequest* q,
                          inference::ModelInferResponse* r) override {
    return ToGrpc(Infer(ctx, *q, r));
  }

  grpc::Status ModelStreamInfer(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<inference::ModelStreamInferResponse, inference::ModelInferRequest>* stream) override {
    inference::ModelInferRequest q;
    while (stream->Read(&q)) {
      inference::ModelStreamInferResponse out;
      absl::Status s = Infer(ctx, q, out.mutable_infer_response());
      if (!s.ok()) {
        out.set_error_message(std::string(s.message()));
        out.mutable_infer_response()->set_id(q.id());
        out.mutable_infer_response()->set_model_name(q.model_name());
      }
      if (!stream->Write(out)) break;
    }
    return grpc::Status::OK;
  }

  grpc::Status ModelConfig(grpc::ServerContext*, const inference::ModelConfigRequest* q,
                           inference::ModelConfigResponse* r) override {
    auto model = models_->Get(q->name(), q->version());
    if (!model.ok()) return ToGrpc(model.status());
    *r->mutable_config() = (*model)->config();
    return grpc::Status::OK;
  }

  grpc::Status ModelStatistics(grpc::ServerContext*, const inference::ModelStatisticsRequest* q,
                               inference::ModelStatisticsResponse* r) override {
    bool found = false;
    for (const VersionStatus& v : models_->Index()) {
      if (!q->name().empty() && v.name != q->name()) continue;
      if (!q->version().empty() && absl::StrCat(v.version) != q->version()) continue;
      if (!v.model) continue;
      found = true;
      FillStats(v, r->add_model_stats());
    }
    if (!found && !q->name().empty()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          absl::StrCat("no READY version of model '", q->name(), "'"));
    }
    return grpc::Status::OK;
  }

  grpc::Status RepositoryIndex(grpc::ServerContext* ctx, const inference::RepositoryIndexRequest* q,
                               inference::RepositoryIndexResponse* r) override {
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
  }

  grpc::Status RepositoryModelLoad(grpc::ServerContext* ctx, const inference::RepositoryModelLoadRequest* q,
                                   inference::RepositoryModelLoadResponse*) override {
    if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    LoadRequest load;
    load.name = q->model_name();
    for (const auto& [key, param] : q->parameters()) {
      if (key == "config") {
        load.config_json = param.string_param();
      } else if (key.rfind("file:", 0) == 0) {
        // "file:<version>/model.onnx" carries the model bytes inline.
        std::string rest = key.substr(5);
        int64_t version = 0;
        if (!absl::SimpleAtoi(rest.substr(0, rest.find('/')), &version)) {
          return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, absl::StrCat("bad load parameter '", key, "'"));
        }
        load.model_bytes[version] = param.bytes_param();
      }
    }
    return ToGrpc(models_->Load(load));
  }

  grpc::Status RepositoryModelUnload(grpc::ServerContext* ctx, const inference::RepositoryModelUnloadRequest* q,
                                     inference::RepositoryModelUnloadResponse*) override {
    if (auto s = admin_->Authorize(Metadata(ctx, "authorization")); !s.ok()) return ToGrpc(s);
    return ToGrpc(models_->Unload(q->model_name()));
  }

 private:
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
  }

  absl::Status Infer(grpc::ServerContext* ctx, const inference::ModelInferRequest& q,
                     inference::ModelInferResponse* r) {
    if (static_cast<int64_t>(q.ByteSizeLong()) > max_request_bytes_) {
      return absl::InvalidArgumentError(absl::StrCat("request of ", q.ByteSizeLong(),
                                                     " bytes exceeds --max-request-bytes ", max_request_bytes_));
    }
    auto model = models_->Get(q.model_name(), q.model_version());
    if (!model.ok()) return model.status();
    bool raw = q.raw_input_contents_size() > 0;
    if (raw && q.raw_input_contents_size() != q.inputs_size()) {
      return absl::InvalidArgumentError(absl::StrCat("expected ", q.inputs_size(),
                                                     " raw_input_contents entries, got ", q.raw_input_contents_size()));
    }
    // Typed contents are converted into buffers owned with the request.
    auto typed = std::make_shared<std::vector<std::string>>(q.inputs_size());
    WireRequest wire;
    wire.id = q.id();
    for (int i = 0; i < q.inputs_size(); ++i) {
      const auto& in = q.inputs(i);
      WireInput w{in.name(), in.datatype(), {in.shape().begin(), in.shape().end()}, nullptr, 0};
      if (raw) {
        if (in.has_contents()) {
          return absl::InvalidArgumentError(absl::StrCat("input '", in.name(), "' has both contents and raw data"));
        }
        w.data = reinterpret_cast<const uint8_t*>(q.raw_input_contents(i).data());
        w.byte_size = q.raw_input_contents(i).size();
      } else {
        auto dtype = DTypeFromKServeName(in.datatype());
        if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("input '", in.name(), "': ", dtype.status().message()));
        if (auto s = ContentsToBytes(in.contents(), *dtype, in.name(), &(*typed)[i]); !s.ok()) return s;
        w.data = reinterpret_cast<const uint8_t*>((*typed)[i].data());
        w.byte_size = (*typed)[i].size();
      }
      wire.inputs.push_back(std::move(w));
    }
    for (const auto& out : q.outputs()) wire.requested_outputs.push_back(out.name());
    if (auto it = q.parameters().find("priority"); it != q.parameters().end()) {
      wire.priority = static_cast<uint32_t>(it->second.has_uint64_param() ? it->second.uint64_param() : it->second.int64_param());
    }
    if (auto it = q.parameters().find("timeout"); it != q.parameters().end()) {
      wire.timeout_us = static_cast<uint64_t>(it->second.has_uint64_param() ? it->second.uint64_param() : it->second.int64_param());
    }
    wire.holder = typed;  // `q` outlives the blocking call, so raw views need no copy.
    auto request = BuildInferenceRequest(**model, std::move(wire));
    if (!request.ok()) return request.status();
    (*request)->is_cancelled = [ctx] { return ctx->IsCancelled(); };
    auto deadline = ctx->deadline();
    auto now_system = std::chrono::system_clock::now();
    if (deadline < now_system + std::chrono::hours(24 * 365)) {
      (*request)->deadline = Clock::now() + (deadline - now_system);
    }
    InferenceResponse response = InferBlocking(**model, std::move(*request));
    if (!response.status.ok()) return response.status;
    r->set_model_name(q.model_name());
    r->set_model_version((*model)->version_string());
    r->set_id(q.id());
    for (OutputTensor& out : response.outputs) {
      auto* t = r->add_outputs();
      t->set_name(out.name);
      t->set_datatype(DTypeKServeName(out.tensor.dtype()));
      for (int64_t d : out.tensor.shape()) t->add_shape(d);
      r->add_raw_output_contents()->assign(reinterpret_cast<const char*>(out.tensor.data()), out.tensor.byte_size());
    }
    return absl::OkStatus();
  }

  ModelManager* models_;
  AdminOperations* admin_;
  const ServerInfo* info_;
  int64_t max_request_bytes_;
};

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

class AdminServiceImpl final : public cuvil::admin::v1::ModelAdmin::Service {
 public:
  explicit AdminServiceImpl(AdminOperations* admin) : admin_(admin) {}
  using Ctx = grpc::ServerContext;
  grpc::Status LoadModel(Ctx* c, const cuvil::admin::v1::LoadModelRequest* q,
                         cuvil::admin::v1::LoadModelResponse* r) override {
    if (auto s = Auth(c); !s.ok()) return s;
    auto out = admin_->LoadModel(*q);
    if (!out.ok()) return ToGrpc(out.status());
    *r = std::move(*out);
    return grpc::Status::OK;
  }
  grpc::Status UnloadModel(Ctx* c, const cuvil::admin::v1::UnloadModelRequest* q,
                           cuvil::admin::v1::UnloadModelResponse*) override {
    if (auto s = Auth(c); !s.ok()) return s;
    return ToGrpc(admin_->UnloadModel(*q));
  }
  grpc::Status ListModels(Ctx* c, const cuvil::admin::v1::ListModelsRequest*,
                          cuvil::admin::v1::ListModelsResponse* r) override {
    if (auto s = Auth(c); !s.ok()) return s;
    *r = admin_->ListModels();
    return grpc::Status::OK;
  }
  grpc::Status ListFunctions(Ctx* c, const cuvil::admin::v1::ListFunctionsRequest* q,
                             cuvil::admin::v1::ListFunctionsResponse* r) override {
    if (auto s = Auth(c); !s.ok()) return s;
    auto out = admin_->ListFunctions(*q);
    if (!out.ok()) return ToGrpc(out.status());
    *r = std::move(*out);
    return grpc::Status::OK;
  }
  grpc::Status PatchFunction(Ctx* c, const cuvil::admin::v1::PatchFunctionRequest*,
                             cuvil::admin::v1::PatchFunctionResponse*) override {
    if (auto s = Auth(c); !s.ok()) return s;
    return ToGrpc(admin_->NotYetImplemented("PatchFunction"));
  }
  grpc::Status Rollback(Ctx* c, const cuvil::admin::v1::RollbackRequest*, cuvil::admin::v1::RollbackResponse*) override {
    if (auto s = Auth(c); !s.ok()) return s;
    return ToGrpc(admin_->NotYetImplemented("Rollback"));
  }
  grpc::Status Snapshot(Ctx* c, const cuvil::admin::v1::SnapshotRequest*, cuvil::admin::v1::SnapshotResponse*) override {
    if (auto s = Auth(c); !s.ok()) return s;
    return ToGrpc(admin_->NotYetImplemented("Snapshot"));
  }
  grpc::Status RestoreSnapshot(Ctx* c, const cuvil::admin::v1::RestoreSnapshotRequest*,
                               cuvil::admin::v1::RestoreSnapshotResponse*) override {
    if (auto s = Auth(c); !s.ok()) return s;
    return ToGrpc(admin_->NotYetImplemented("RestoreSnapshot"));
  }

 private:
  grpc::Status Auth(Ctx* c) { return ToGrpc(admin_->Authorize(Metadata(c, "authorization"))); }
  AdminOperations* admin_;
};

class GrpcServiceImpl final : public GrpcService {
 public:
  GrpcServiceImpl(ModelManager* models, AdminOperations* admin, const ServerInfo* info, int64_t max_bytes)
      : inference_(models, admin, info, max_bytes), health_(info), admin_(admin) {}

  absl::Status Start(const GrpcServiceOptions& options) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(absl::StrCat(options.bind_address, ":", options.port),
                             grpc::InsecureServerCredentials(), &port_);
    // Requests a little over the limit reach the handler, which rejects them with a clear message.
    int cap = static_cast<int>(std::min<int64_t>(options.max_request_bytes * 2 + (1 << 20), INT32_MAX));
    builder.SetMaxReceiveMessageSize(cap);
    builder.SetMaxSendMessageSize(INT32_MAX);
    builder.RegisterService(&inference_);
    builder.RegisterService(&health_);
    builder.RegisterService(&admin_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(absl::StrCat("cannot bind gRPC to ", options.bind_address, ":", options.port));
    }
    return absl::OkStatus();
  }

  int port() const override { return port_; }

  void Stop(int64_t deadline_ms) override {
    if (server_) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
      server_->Wait();
      server_.reset();
    }
  }

  ~GrpcServiceImpl() override { Stop(0); }

 private:
  InferenceServiceImpl inference_;
  HealthServiceImpl health_;
  AdminServiceImpl admin_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcService>> GrpcService::Start(const GrpcServiceOptions& options,
                                                                ModelManager* models, AdminOperations* admin,
                                                                const ServerInfo* info) {
  auto service = std::make_unique<GrpcServiceImpl>(models, admin, info, options.max_request_bytes);
  if (auto s = service->Start(options); !s.ok()) return s;
  return service;
}

}  // namespace cuvil
