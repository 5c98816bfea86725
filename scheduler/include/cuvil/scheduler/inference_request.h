// A validated inference request on its way through a scheduler, and its response.
#ifndef CUVIL_SCHEDULER_INFERENCE_REQUEST_H_
#define CUVIL_SCHEDULER_INFERENCE_REQUEST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

using Clock = std::chrono::steady_clock;

// A view of one input's bytes; the request's `holder` keeps them alive.
struct InputView {
  const uint8_t* data = nullptr;
  size_t byte_size = 0;
  std::vector<int64_t> shape;  // Full shape, batch dimension included when batched.
};

struct OutputTensor {
  std::string name;
  HostTensor tensor;
};

// Where the time went (nanoseconds), as Triton's statistics report it.
struct RequestTimings {
  uint64_t queue_ns = 0;
  uint64_t compute_input_ns = 0;
  uint64_t compute_infer_ns = 0;
  uint64_t compute_output_ns = 0;
  int64_t executed_batch = 0;  // Rows in the execution that served this request.
};

struct InferenceResponse {
  absl::Status status;
  std::vector<OutputTensor> outputs;  // Requested outputs only, in model order.
  RequestTimings timings;
  // For a step of a sequence (sequence batching): the steps the sequence has taken with this
  // one, which the front ends return as the response parameter sequence_step. 0 otherwise.
  uint64_t sequence_step = 0;
};

// Thread-compatible; owned by exactly one stage at a time.
struct InferenceRequest {
  std::string id;
  std::vector<InputView> inputs;  // Executable::inputs() order, validated.
  std::shared_ptr<const void> holder;
  std::vector<bool> output_requested;  // Executable::outputs() order.
  int64_t batch_size = 1;              // Rows (dim 0) for batched models, else 1.
  uint32_t priority = 0;               // 0: the model's default level.
  uint64_t timeout_us = 0;             // 0: the queue policy's default.
  Clock::time_point arrival = Clock::now();
  Clock::time_point deadline = Clock::time_point::max();  // The client's deadline.
  // False: never executed on the submitting thread (SchedulerOptions::inline_execution_max_us),
  // for a caller whose thread must stay free to deliver the answer: if the execution never
  // returns, only then can a retire answer the request.
  bool may_run_inline = true;
  // Polled before execution; true drops the request with CANCELLED.
  std::function<bool()> is_cancelled;
  // Called exactly once, from a scheduler thread.
  std::function<void(InferenceResponse)> on_complete;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_INFERENCE_REQUEST_H_
