// Turning decoded wire tensors (gRPC or HTTP) into a validated InferenceRequest, and the
// error-code mapping every front end shares.
#ifndef CUVIL_SERVER_INFER_REQUEST_BUILDER_H_
#define CUVIL_SERVER_INFER_REQUEST_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/scheduler/inference_request.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

// One input as the client sent it; `data` stays valid while the request's holder lives.
struct WireInput {
  std::string name;
  std::string datatype;  // KServe name ("FP32").
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
};

struct WireRequest {
  std::string id;
  std::vector<WireInput> inputs;
  std::vector<std::string> requested_outputs;  // Empty: all outputs.
  uint32_t priority = 0;
  uint64_t timeout_us = 0;
  std::shared_ptr<const void> holder;  // Owns the bytes the inputs point at.
};

// Validates `wire` against the model version: every input present exactly once, known names,
// datatypes, shapes (batch dim within max_batch_size), byte sizes matching the shapes, and known
// requested outputs. InvalidArgument names the tensor and expected vs got.
absl::StatusOr<std::unique_ptr<InferenceRequest>> BuildInferenceRequest(const ModelVersion& model,
                                                                        WireRequest wire);

// Runs `request` on `model` without waiting: `done` runs exactly once with the response, on a
// scheduler thread (or inline on the caller's when admission refuses the request), after the
// request's probes and metrics are recorded. `model` must stay alive until `done` has been
// called; `done` must not block, and must not drop the last reference to `model`.
void InferAsync(ModelVersion& model, std::unique_ptr<InferenceRequest> request,
                std::function<void(InferenceResponse)> done);

// Runs `request` on `model` and waits for the response (the caller's thread blocks).
InferenceResponse InferBlocking(ModelVersion& model, std::unique_ptr<InferenceRequest> request);

// Triton's HTTP status for a status code (400 / 404 / 500 / 501 / 503).
int HttpStatusFor(const absl::Status& status);

}  // namespace cuvil

#endif  // CUVIL_SERVER_INFER_REQUEST_BUILDER_H_
