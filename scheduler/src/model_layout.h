// What the scheduler needs to know about an executable's tensors: validation of a request's
// inputs, whether two requests can share a batch, and output shapes.
#ifndef CUVIL_SCHEDULER_MODEL_LAYOUT_H_
#define CUVIL_SCHEDULER_MODEL_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/scheduler/executable.h"
#include "cuvil/scheduler/inference_request.h"

namespace cuvil {

// Immutable after construction; thread-safe.
class ModelLayout {
 public:
  // `max_batch_size` 0 means no tensor has a batch dimension.
  ModelLayout(const Executable& executable, int64_t max_batch_size);

  int64_t max_rows() const { return max_rows_; }
  // Whether input/output i has a batch dimension.
  bool input_batched(size_t i) const { return input_batched_[i]; }
  bool output_batched(size_t i) const { return output_batched_[i]; }
  size_t num_inputs() const { return input_batched_.size(); }
  size_t num_outputs() const { return output_batched_.size(); }

  // Checks `request` against the specs (so later copies stay in bounds) and returns its rows.
  absl::StatusOr<int64_t> Validate(const InferenceRequest& request) const;
  // Whether `a` and `b` may run in one execution: equal non-batch dims for inputs with varying
  // dims, identical unbatched inputs, and outputs whose sizes the data does not decide.
  bool CanShareBatch(const InferenceRequest& a, const InferenceRequest& b) const;
  // Row dims of every output (batch dim excluded) when no output has a -1 dim.
  bool outputs_vary() const { return outputs_vary_; }
  const std::vector<std::vector<int64_t>>& fixed_output_dims() const { return fixed_output_dims_; }
  // Row dims of every output for a batch shaped like `request`, when outputs_vary().
  absl::StatusOr<std::vector<std::vector<int64_t>>> VaryingOutputDims(
      const InferenceRequest& request) const;

 private:
  const Executable& executable_;
  int64_t max_batch_size_;
  int64_t max_rows_;  // Rows one execution may hold (1 without a batch dimension).
  std::vector<bool> input_batched_;
  std::vector<bool> output_batched_;
  std::vector<size_t> varying_inputs_;    // Batched inputs with a -1 dim.
  std::vector<size_t> unbatched_inputs_;  // Only when batching: shared across a batch.
  bool outputs_vary_ = false;
  std::vector<std::vector<int64_t>> fixed_output_dims_;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_MODEL_LAYOUT_H_
