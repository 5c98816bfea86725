// Turning decoded wire tensors (gRPC or HTTP) into a validated InferenceRequest, and the
// error-code mapping every front end shares.
#ifndef CUVIL_SERVER_INFER_REQUEST_BUILDER_H_
#define CUVIL_SERVER_INFER_REQUEST_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/scheduler/inference_request.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

class SharedMemoryRegion;
class SharedMemoryRegistry;

// A tensor's bytes in a registered system shared memory region: Triton's shared_memory_region,
// shared_memory_offset (within the region) and shared_memory_byte_size parameters. Plain data;
// thread-compatible.
struct SharedMemoryRef {
  std::string region;
  uint64_t offset = 0;
  uint64_t byte_size = 0;
};

// One input as the client sent it; `data` stays valid while the request's holder lives.
struct WireInput {
  std::string name;
  std::string datatype;  // KServe name ("FP32").
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  // Set: the contents are in shared memory (`data` is null, `byte_size` is the ref's).
  std::optional<SharedMemoryRef> shared_memory;
};

// A requested output the client wants written into shared memory instead of the response. Plain
// data; thread-compatible.
struct WireSharedMemoryOutput {
  std::string name;
  SharedMemoryRef ref;
};

// The sequence a request is a step of (Triton's sequence_id, sequence_start and sequence_end
// request parameters). Plain data.
struct WireSequence {
  bool present = false;   // The request named a sequence_id.
  uint64_t id = 0;        // A numeric id (0 with string_id set: a string id).
  std::string string_id;  // A string id (Triton's string correlation ids).
  bool start = false;
  bool end = false;
  // The step's number in its sequence (1 for the START step) when the client sends it
  // (sequence_step): a step whose number is not the sequence's next is refused unapplied, so a
  // client that resumes after a restart learns where the server's checkpoint left it. 0: any.
  uint64_t step = 0;
};

struct WireRequest {
  std::string id;
  WireSequence sequence;
  std::vector<WireInput> inputs;
  std::vector<std::string> requested_outputs;                 // Empty: all outputs.
  std::vector<WireSharedMemoryOutput> shared_memory_outputs;  // Each also in requested_outputs.
  uint32_t priority = 0;
  uint64_t timeout_us = 0;
  std::shared_ptr<const void> holder;  // Owns the bytes the inputs point at.
};

// An output resolved for writing into shared memory once the response is ready; `region` keeps
// the registered region usable even if it is unregistered meanwhile. Thread-compatible (the
// region itself is thread-safe).
struct SharedMemoryOutput {
  std::string name;
  SharedMemoryRef ref;
  std::shared_ptr<const SharedMemoryRegion> region;
};

// Validates `wire` against the model version: every input present exactly once, known names,
// datatypes, shapes (batch dim within max_batch_size), byte sizes matching the shapes, and known
// requested outputs. InvalidArgument names the tensor and expected vs got. Shared memory inputs
// are looked up in `shared_memory`, bounds-checked against their region and copied out of it
// (their byte size must equal the tensor's); shared memory outputs are looked up and
// bounds-checked into `*shared_memory_outputs`, for WriteSharedMemoryOutputs. InvalidArgument
// naming the tensor and region for an unknown region, a window outside it, or a region whose
// object shrank; Unimplemented for shared memory without a registry (or outputs list).
absl::StatusOr<std::unique_ptr<InferenceRequest>> BuildInferenceRequest(
    const ModelVersion& model, WireRequest wire,
    const SharedMemoryRegistry* shared_memory = nullptr,
    std::vector<SharedMemoryOutput>* shared_memory_outputs = nullptr);

// Bytes BuildInferenceRequest copies `wire`'s inputs into: those read out of shared memory, and
// binary inputs that are not naturally aligned in the body they came in. Front ends reserve them
// against the in-flight budget before building the request.
uint64_t CopiedInputBytes(const WireRequest& wire);

// The shape each of `model`'s outputs gets in the response to `request` (batch dimension
// included when batched), in executable().outputs() order, resolved as the scheduler resolves
// them before it allocates them: the declared dims, or the executable's OutputDims for the
// request's input dims (upper bounds when the data decides a size). The executable's error when
// it cannot resolve them (the scheduler then fails the request the same way, allocating nothing).
absl::StatusOr<std::vector<std::vector<int64_t>>> ResolveOutputShapes(
    const ModelVersion& model, const InferenceRequest& request);

// Elements of `shape` times `bytes_per_element`, saturating at UINT64_MAX (shapes come from
// clients).
uint64_t SaturatingTensorBytes(const std::vector<int64_t>& shape, uint64_t bytes_per_element);

// Writes each of `outputs` from `response` into its region: InvalidArgument naming the output and
// region when the output is larger than the byte size given or the region's object shrank.
// Outputs `response` does not hold are skipped.
absl::Status WriteSharedMemoryOutputs(const std::vector<SharedMemoryOutput>& outputs,
                                      const InferenceResponse& response);

// The entry of `outputs` for output `name`, or null.
const SharedMemoryOutput* FindSharedMemoryOutput(const std::vector<SharedMemoryOutput>& outputs,
                                                 const std::string& name);

// Runs `request` on `model` without waiting: `done` runs exactly once with the response, on a
// scheduler thread (or inline on the caller's when admission refuses the request), after the
// request's probes and metrics are recorded. `model` must stay alive until `done` has been
// called; `done` must not block, and must not drop the last reference to `model`.
void InferAsync(ModelVersion& model, std::unique_ptr<InferenceRequest> request,
                std::function<void(InferenceResponse)> done);

// Runs `request` on `model` and waits for the response (the caller's thread blocks).
InferenceResponse InferBlocking(ModelVersion& model, std::unique_ptr<InferenceRequest> request);

// Triton's HTTP status for a status code (400 / 401 / 403 / 404 / 409 for Aborted: a conflicting
// change won, try again / 500 / 501 / 503).
int HttpStatusFor(const absl::Status& status);

}  // namespace cuvil

#endif  // CUVIL_SERVER_INFER_REQUEST_BUILDER_H_
