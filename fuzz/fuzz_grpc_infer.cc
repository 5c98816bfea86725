// A serialized inference::ModelInferRequest decoded as the gRPC front end does and validated
// against the example mlp (whatever model it names); requests that validate are run.
#include <cstddef>
#include <cstdint>

#include "cuvil/server/infer_request_builder.h"
#include "fuzz_support.h"
#include "grpc_infer_decode.h"
#include "grpc_service.pb.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  cuvil::fuzz::ExampleModels();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  inference::ModelInferRequest q;
  if (!q.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<std::shared_ptr<cuvil::ModelVersion>> model =
      cuvil::fuzz::ExampleModels().Get("mlp", "");
  if (!model.ok()) __builtin_trap();
  absl::StatusOr<cuvil::WireRequest> wire = cuvil::DecodeModelInferRequest(q);
  if (!wire.ok()) return 0;
  auto request = cuvil::BuildInferenceRequest(**model, *std::move(wire));
  if (!request.ok()) return 0;
  (void)cuvil::InferBlocking(**model, *std::move(request));
  return 0;
}
