// The admin API's and Triton's model-load inputs. The first byte picks the entry point, the rest
// is its input:
//   0  a model name (ValidateModelName)
//   1  a serialized inference::RepositoryModelLoadRequest -> ParseLoadParameters, then the
//      "config" JSON it accepted parsed as a model configuration (what the load does next)
//   2  a serialized cuvil.admin.v1.LoadModelRequest -> AdminOperations::LoadModel (waiting) on an
//      empty repository, then ListModels / ListFunctions / UnloadModel for that name
//   3  an authorization header value (AdminOperations::Authorize with a token set)
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "admin.pb.h"
#include "admin_operations.h"
#include "cuvil/server/model_config.h"
#include "cuvil/server/model_repository.h"
#include "fuzz_support.h"
#include "grpc_service.pb.h"
#include "load_parameters.h"
#include "model_name.h"

namespace {

cuvil::AdminOperations& Admin() {
  static cuvil::AdminOperations* admin = [] {
    // An empty repository: repository loads fail fast; inline loads compile the given model.
    char dir[] = "/tmp/cuvil-fuzz-admin-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    auto* repository = new cuvil::ModelRepository({dir});
    auto* models = new cuvil::ModelManager(&cuvil::fuzz::Jit(), repository, {});
    return new cuvil::AdminOperations(models, "fuzz-token");
  }();
  return *admin;
}

// As the gRPC front end converts RepositoryModelLoad (grpc_service.cc LoadInput).
void TritonLoad(const inference::RepositoryModelLoadRequest& q) {
  cuvil::LoadParametersInput input;
  input.model_name = q.model_name();
  for (const auto& [key, param] : q.parameters()) {
    cuvil::LoadParameter& p = input.parameters.emplace_back();
    p.key = key;
    if (param.has_string_param()) {
      p.type = cuvil::LoadParameter::Type::kString;
      p.value = param.string_param();
    } else if (param.has_bytes_param()) {
      p.type = cuvil::LoadParameter::Type::kBytes;
      p.value = param.bytes_param();
    }
  }
  absl::StatusOr<cuvil::LoadRequest> load = cuvil::ParseLoadParameters(input);
  if (!load.ok()) return;
  if (!load->config_json.empty()) (void)cuvil::ParseModelConfigJson(load->config_json);
}

void AdminLoad(cuvil::admin::v1::LoadModelRequest request) {
  request.set_wait(true);  // An answer per input; queued loads would pile up.
  cuvil::AdminOperations& admin = Admin();
  (void)admin.LoadModel(request);
  (void)admin.ListModels();
  cuvil::admin::v1::ListFunctionsRequest functions;
  functions.set_name(request.name());
  functions.set_version(request.version());
  (void)admin.ListFunctions(functions);
  cuvil::admin::v1::UnloadModelRequest unload;
  unload.set_name(request.name());
  (void)admin.UnloadModel(unload);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::QuietLogs();
  Admin();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t mode = data[0] % 4;
  const absl::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (mode) {
    case 0:
      (void)cuvil::ValidateModelName(rest);
      break;
    case 1: {
      inference::RepositoryModelLoadRequest q;
      if (q.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) TritonLoad(q);
      break;
    }
    case 2: {
      cuvil::admin::v1::LoadModelRequest q;
      if (q.ParseFromArray(rest.data(), static_cast<int>(rest.size()))) AdminLoad(std::move(q));
      break;
    }
    case 3:
      (void)Admin().Authorize(std::string(rest));
      break;
  }
  return 0;
}
