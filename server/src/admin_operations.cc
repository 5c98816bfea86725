#include "admin_operations.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "load_parameters.h"
#include "model_name.h"

namespace cuvil {
namespace {

// Compares without an early exit so timing does not reveal how much of a token matched.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

}  // namespace

absl::Status AdminOperations::Authorize(const std::string& authorization) const {
  if (token_.empty()) return absl::OkStatus();
  constexpr char kPrefix[] = "Bearer ";
  if (!absl::StartsWith(authorization, kPrefix) ||
      !ConstantTimeEquals(authorization.substr(sizeof(kPrefix) - 1), token_)) {
    return absl::UnauthenticatedError("this call needs 'authorization: Bearer <admin token>'");
  }
  return absl::OkStatus();
}

absl::StatusOr<cuvil::admin::v1::LoadModelResponse> AdminOperations::LoadModel(
    const cuvil::admin::v1::LoadModelRequest& request) {
  if (request.version() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("version must be positive (0: version 1), got ", request.version()));
  }
  // The inline model goes through Triton's load-parameter parser so the name and file rules are
  // the same as for RepositoryModelLoad.
  LoadParametersInput input;
  input.model_name = request.name();
  if (!request.onnx_model().empty()) {
    const int64_t version = request.version() > 0 ? request.version() : 1;
    LoadParameter& file = input.parameters.emplace_back();
    file.key = absl::StrCat("file:", version, "/model.onnx");
    file.type = LoadParameter::Type::kBytes;
    file.value = request.onnx_model();
  }
  absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
  if (!load.ok()) return load.status();
  load->config_pbtxt = request.config_pbtxt();
  load->wait = request.wait();
  if (auto s = models_->Load(*load); !s.ok()) return s;
  cuvil::admin::v1::LoadModelResponse response;
  response.set_name(request.name());
  for (const VersionStatus& v : models_->Versions(request.name())) response.add_versions(v.version);
  return response;
}

absl::Status AdminOperations::UnloadModel(const cuvil::admin::v1::UnloadModelRequest& request) {
  if (absl::Status s = ValidateModelName(request.name()); !s.ok()) return s;
  if (request.version() != 0) {
    return absl::UnimplementedError(
        "unloading a single version is not supported; unload the model");
  }
  return models_->Unload(request.name());
}

cuvil::admin::v1::ListModelsResponse AdminOperations::ListModels() const {
  cuvil::admin::v1::ListModelsResponse response;
  for (const VersionStatus& v : models_->Index()) {
    auto* m = response.add_models();
    m->set_name(v.name);
    m->set_version(v.version);
    m->set_state(ModelStateName(v.state));
    m->set_reason(v.reason);
    if (v.model) {
      const CompiledModel& compiled = v.model->loaded().model();
      m->set_namespace_(v.model->loaded().namespace_name());
      m->set_compile_ms(v.model->compile_ms());
      m->set_weights_bytes(v.model->loaded().weights_bytes());
      m->set_code_bytes(compiled.object_code.size());
      m->set_arena_bytes_per_batch(compiled.arena.per_batch_bytes);
    }
  }
  return response;
}

absl::StatusOr<cuvil::admin::v1::ListFunctionsResponse> AdminOperations::ListFunctions(
    const cuvil::admin::v1::ListFunctionsRequest& request) const {
  auto model =
      models_->Get(request.name(), request.version() > 0 ? absl::StrCat(request.version()) : "");
  if (!model.ok()) return model.status();
  cuvil::admin::v1::ListFunctionsResponse response;
  for (const KernelFunction& k : (*model)->loaded().model().kernels) {
    auto* f = response.add_functions();
    f->set_index(k.index);
    f->set_symbol(k.symbol);
    f->set_op_type(k.op_type);
    f->set_node_name(k.node_name);
    f->set_signature(k.signature);
  }
  return response;
}

absl::Status AdminOperations::NotYetImplemented(const std::string& operation) const {
  return absl::UnimplementedError(
      absl::StrCat(operation, " is not implemented yet (hot patching)"));
}

}  // namespace cuvil
