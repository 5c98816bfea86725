// One model instance's execution state: the reused gather buffers, output buffers and arena,
// and the gather -> Run -> split of one batch.
#ifndef CUVIL_SCHEDULER_EXECUTION_CONTEXT_H_
#define CUVIL_SCHEDULER_EXECUTION_CONTEXT_H_

#include <memory>
#include <vector>

#include "clock.h"
#include "cuvil/runtime/host_tensor.h"
#include "cuvil/scheduler/executable.h"
#include "model_layout.h"
#include "queued_request.h"

namespace cuvil {

// Thread-compatible: used by one thread at a time (the scheduler hands it over under its lock).
class ExecutionContext {
 public:
  ExecutionContext(const Executable* executable, const ModelLayout* layout,
                   const SchedulerClock* clock);

  struct Result {
    absl::Status status;
    int64_t rows = 0;
    uint64_t input_ns = 0, infer_ns = 0, output_ns = 0;
  };
  // Runs `batch` (compatible requests, at most max_rows rows) as one execution and stores each
  // request's outputs and timings in `responses` (same order, already sized).
  Result Execute(std::vector<QueuedRequest>& batch, std::vector<InferenceResponse>& responses);

 private:
  // A growable buffer reused across executions.
  struct Scratch {
    AlignedBuffer data;
    size_t capacity = 0;
    uint8_t* Reserve(size_t bytes);
    // Frees the buffer when it holds more than `keep` bytes (one run with large free dims must
    // not leave its scratch resident for good).
    void Trim(size_t keep) {
      if (capacity > keep) {
        data.reset();
        capacity = 0;
      }
    }
  };
  // Buffers above this are freed after the execution that needed them.
  static constexpr size_t kKeepScratchBytes = size_t{256} << 20;

  absl::Status ResolveOutputDims(const InferenceRequest& request);
  bool Requested(const InferenceRequest& request, size_t output) const {
    return request.output_requested.empty() || request.output_requested[output];
  }
  std::vector<int64_t> OutputShape(size_t output, int64_t rows) const;

  const Executable* executable_;
  const ModelLayout* layout_;
  const SchedulerClock* clock_;
  std::vector<Scratch> inputs_;
  std::vector<Scratch> outputs_;
  Scratch arena_;
  std::vector<const void*> input_ptrs_;
  std::vector<void*> output_ptrs_;
  std::vector<size_t> output_row_bytes_;
  std::vector<std::vector<int64_t>> run_shapes_;  // Shapes of the batch being executed.
  std::vector<size_t> gather_bytes_;              // Per input: bytes gathered for this execution.
  std::vector<size_t> staged_output_bytes_;       // Per output: bytes staged (0: in the response).
  std::vector<std::vector<int64_t>> varying_dims_;
  std::vector<std::vector<int64_t>> written_dims_;  // Output dims a run reports (sized by run).
  const std::vector<std::vector<int64_t>>* output_dims_ = nullptr;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_EXECUTION_CONTEXT_H_
