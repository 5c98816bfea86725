#include "grpc_client.h"

#include <chrono>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "client_shared_memory.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cuvil::perf {
namespace {

absl::Status ToStatus(const grpc::Status& s, absl::string_view what, const std::string& url) {
  if (s.ok()) return absl::OkStatus();
  auto code = static_cast<absl::StatusCode>(s.error_code());
  if (s.error_code() == grpc::StatusCode::UNAVAILABLE ||
      s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return absl::Status(code, absl::StrCat(what, ": cannot reach the gRPC server at ", url, ": ",
                                           s.error_message()));
  }
  return absl::Status(code, absl::StrCat(what, ": ", s.error_message()));
}

class GrpcClient final : public InferClient {
 public:
  explicit GrpcClient(const ClientOptions& options) : options_(options) {
    grpc::ChannelArguments args;
    // A subchannel pool of its own: every client really opens its own TCP connection.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    auto channel = grpc::CreateCustomChannel(options.url, grpc::InsecureChannelCredentials(), args);
    stub_ = inference::GRPCInferenceService::NewStub(channel);
  }

  ~GrpcClient() override { ReleaseSharedMemory(); }

  absl::StatusOr<ModelInfo> GetModelInfo() override {
    inference::ModelMetadataRequest req;
    req.set_name(options_.model);
    req.set_version(options_.version);
    inference::ModelMetadataResponse res;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    if (absl::Status s =
            ToStatus(stub_->ModelMetadata(&ctx, req, &res), "ModelMetadata", options_.url);
        !s.ok()) {
      return s;
    }
    ModelInfo info;
    info.name = res.name();
    info.versions.assign(res.versions().begin(), res.versions().end());
    auto convert = [](const inference::ModelMetadataResponse::TensorMetadata& t) {
      return TensorInfo{t.name(), t.datatype(), {t.shape().begin(), t.shape().end()}};
    };
    for (const auto& t : res.inputs()) info.inputs.push_back(convert(t));
    for (const auto& t : res.outputs()) info.outputs.push_back(convert(t));

    inference::ModelConfigRequest creq;
    creq.set_name(options_.model);
    creq.set_version(options_.version);
    inference::ModelConfigResponse cres;
    grpc::ClientContext cctx;
    SetDeadline(&cctx);
    grpc::Status cs = stub_->ModelConfig(&cctx, creq, &cres);
    if (cs.ok()) {
      info.max_batch_size = cres.config().max_batch_size();
      const inference::ModelSequenceBatching& sb = cres.config().sequence_batching();
      info.sequence_batching = cres.config().has_sequence_batching();
      std::vector<std::string> filled, states;
      for (const auto& c : sb.control_input()) filled.push_back(c.name());
      for (const auto& st : sb.state()) {
        filled.push_back(st.input_name());
        states.push_back(st.output_name());
      }
      RemoveSequenceTensors(filled, states, &info);
    } else if (cs.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      info.max_batch_size = -1;  // Unknown: the caller guesses from the shapes.
    } else {
      return ToStatus(cs, "ModelConfig", options_.url);
    }
    return info;
  }

  absl::StatusOr<ServerStats> GetStatistics() override {
    inference::ModelStatisticsRequest req;
    req.set_name(options_.model);
    req.set_version(options_.version);
    inference::ModelStatisticsResponse res;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    if (absl::Status s =
            ToStatus(stub_->ModelStatistics(&ctx, req, &res), "ModelStatistics", options_.url);
        !s.ok()) {
      return s;
    }
    // Several versions may answer: add them up.
    ServerStats out;
    auto add = [](const inference::StatisticDuration& d, Duration* to) {
      to->count += d.count();
      to->ns += d.ns();
    };
    for (const inference::ModelStatistics& m : res.model_stats()) {
      out.inference_count += m.inference_count();
      out.execution_count += m.execution_count();
      const inference::InferStatistics& is = m.inference_stats();
      add(is.success(), &out.success);
      add(is.fail(), &out.fail);
      add(is.queue(), &out.queue);
      add(is.compute_input(), &out.compute_input);
      add(is.compute_infer(), &out.compute_infer);
      add(is.compute_output(), &out.compute_output);
      for (const inference::InferBatchStatistics& b : m.batch_stats()) {
        add(b.compute_infer(), &out.batch_compute_infer[b.batch_size()]);
      }
    }
    return out;
  }

  absl::Status Prepare(const std::vector<InputTensor>& inputs,
                       const std::vector<std::string>& outputs) override {
    ReleaseSharedMemory();
    if (options_.shared_memory == SharedMemoryKind::kSystem) {
      auto shm = ClientSharedMemory::Create(
          inputs, outputs.size(), static_cast<uint64_t>(options_.output_shared_memory_bytes));
      if (!shm.ok()) return shm.status();
      shm_ = *std::move(shm);
      if (absl::Status s =
              shm_->ForEachRegion([this](const ClientRegion& region) { return Register(region); });
          !s.ok()) {
        return s;
      }
    }
    request_.Clear();
    request_.set_model_name(options_.model);
    request_.set_model_version(options_.version);
    auto point_at = [](const ClientRegion& region, auto* params) {
      (*params)["shared_memory_region"].set_string_param(region.name);
      (*params)["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(region.byte_size));
    };
    for (size_t i = 0; i < inputs.size(); ++i) {
      const InputTensor& in = inputs[i];
      inference::ModelInferRequest::InferInputTensor* t = request_.add_inputs();
      t->set_name(in.name);
      t->set_datatype(in.datatype);
      for (int64_t d : in.shape) t->add_shape(d);
      if (shm_) {
        point_at(shm_->inputs()[i], t->mutable_parameters());
      } else {
        request_.add_raw_input_contents(in.data);
      }
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      auto* out = request_.add_outputs();
      out->set_name(outputs[i]);
      if (shm_) point_at(shm_->outputs()[i], out->mutable_parameters());
    }
    return absl::OkStatus();
  }

  void SetSequence(uint64_t id, bool start, bool end) override {
    auto* params = request_.mutable_parameters();
    if (id == 0) {
      params->erase("sequence_id");
      params->erase("sequence_start");
      params->erase("sequence_end");
      return;
    }
    (*params)["sequence_id"].set_uint64_param(id);
    (*params)["sequence_start"].set_bool_param(start);
    (*params)["sequence_end"].set_bool_param(end);
  }

  absl::Status Infer() override {
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    // Many connections opening at once occasionally see one connect attempt fail; without this
    // the channel fails every call fast until its reconnect backoff ends, flooding the error
    // count. Waiting (bounded by the deadline) measures the server instead.
    ctx.set_wait_for_ready(true);
    response_.Clear();
    return ToStatus(stub_->ModelInfer(&ctx, request_, &response_), "ModelInfer", options_.url);
  }

 private:
  absl::Status Register(const ClientRegion& region) {
    inference::SystemSharedMemoryRegisterRequest req;
    req.set_name(region.name);
    req.set_key(shm_->key());
    req.set_offset(region.offset);
    req.set_byte_size(region.byte_size);
    inference::SystemSharedMemoryRegisterResponse res;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    if (absl::Status s = ToStatus(stub_->SystemSharedMemoryRegister(&ctx, req, &res),
                                  "SystemSharedMemoryRegister", options_.url);
        !s.ok()) {
      return s;
    }
    registered_.push_back(region.name);
    return absl::OkStatus();
  }

  // Unregisters this client's regions (best effort) and frees its object.
  void ReleaseSharedMemory() {
    for (const std::string& name : registered_) {
      inference::SystemSharedMemoryUnregisterRequest req;
      req.set_name(name);
      inference::SystemSharedMemoryUnregisterResponse res;
      grpc::ClientContext ctx;
      SetDeadline(&ctx);
      (void)stub_->SystemSharedMemoryUnregister(&ctx, req, &res);
    }
    registered_.clear();
    shm_.reset();
  }

  void SetDeadline(grpc::ClientContext* ctx) const {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(options_.timeout_ms));
  }

  ClientOptions options_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  std::unique_ptr<ClientSharedMemory> shm_;  // With --shared-memory system, once prepared.
  std::vector<std::string> registered_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<InferClient>> CreateGrpcClient(const ClientOptions& options) {
  return std::unique_ptr<InferClient>(new GrpcClient(options));
}

}  // namespace cuvil::perf
