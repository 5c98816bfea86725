// Private: a JIT-loaded compiled model seen as a scheduler Executable.
#ifndef CUVIL_SERVER_SRC_JIT_EXECUTABLE_H_
#define CUVIL_SERVER_SRC_JIT_EXECUTABLE_H_

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/scheduler/executable.h"
#include "inflight_budget.h"

namespace cuvil {

// Thread-safe (the generated entry point is reentrant given distinct arenas).
class JitExecutable : public Executable {
 public:
  // The executable for `model` as the (completed) config describes its tensors. Fails with
  // InvalidArgument when a spec is looser than the compiled signature (a -1 over a fixed dim, a
  // different rank or dtype): buffers sized from the specs must be what the code reads and writes.
  // With `scratch_budget` (may be null; must outlive the executable), each run reserves its
  // scratch bytes and the bytes its caller stages (Executable::Run) there while it runs, and
  // fails with ResourceExhausted when they do not fit: "is larger than" when they could not fit
  // beside its requests' inputs even on an idle server, "server is busy" otherwise.
  static absl::StatusOr<std::shared_ptr<JitExecutable>> Create(
      const LoadedModel* model, std::vector<TensorSpec> inputs, std::vector<TensorSpec> outputs,
      InflightBudget* scratch_budget = nullptr);

  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  // Binds the model's symbols from `input_shapes` once (checking every dim), reserves the scratch
  // they need and runs the entry point.
  absl::Status Run(const void* const* inputs, absl::Span<const std::vector<int64_t>> input_shapes,
                   void* const* outputs, int64_t batch, uint64_t staged_bytes, ArenaReserve arena,
                   std::vector<std::vector<int64_t>>* written_dims) const override;
  bool outputs_sized_by_run() const override {
    return !model_->model().data_dependent_dims.empty();
  }
  // Output dims from the symbols the input dims bind (models with free dims beyond the batch).
  absl::StatusOr<std::vector<std::vector<int64_t>>> OutputDims(
      const std::vector<std::vector<int64_t>>& input_dims) const override;

 private:
  JitExecutable(const LoadedModel* model, std::vector<TensorSpec> inputs,
                std::vector<TensorSpec> outputs, InflightBudget* scratch_budget)
      : model_(model),
        inputs_(std::move(inputs)),
        outputs_(std::move(outputs)),
        scratch_budget_(scratch_budget),
        batched_(std::any_of(inputs_.begin(), inputs_.end(),
                             [](const TensorSpec& s) { return s.batched; })) {}

  // Whether runs bind the model's symbols from the input shapes (free dims beyond a batch, dim
  // constraints, or any free dim of an unbatched config) rather than take the batch as given.
  bool BindsSymbols() const;

  // The arena of `bytes` for one run, reserved with the caller's `staged_bytes` against
  // scratch_budget_ into `*reservation`; the run's inputs are shaped `input_shapes`.
  absl::StatusOr<void*> ReserveArena(ArenaReserve arena, size_t bytes, uint64_t staged_bytes,
                                     absl::Span<const std::vector<int64_t>> input_shapes,
                                     InflightBudget::Reservation* reservation) const;

  const LoadedModel* model_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
  InflightBudget* scratch_budget_;
  // Some input has the batch as dim 0 (max_batch_size > 0): executions run `batch` rows.
  const bool batched_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_JIT_EXECUTABLE_H_
