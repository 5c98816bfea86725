// Private: a JIT-loaded compiled model seen as a scheduler Executable.
#ifndef CUVIL_SERVER_SRC_JIT_EXECUTABLE_H_
#define CUVIL_SERVER_SRC_JIT_EXECUTABLE_H_

#include <vector>

#include "absl/strings/str_cat.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/scheduler/executable.h"

namespace cuvil {

// Thread-safe (the generated entry point is reentrant given distinct arenas).
class JitExecutable : public Executable {
 public:
  JitExecutable(const LoadedModel* model, std::vector<TensorSpec> inputs,
                std::vector<TensorSpec> outputs)
      : model_(model), inputs_(std::move(inputs)), outputs_(std::move(outputs)) {}

  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  int64_t ArenaBytes(int64_t batch) const override { return model_->model().arena.BytesFor(batch); }
  absl::Status Run(const void* const* inputs, void* const* outputs, int64_t batch,
                   void* arena) const override {
    int32_t rc = model_->entry()(inputs, outputs, batch, arena);
    if (rc != 0) return absl::InternalError(absl::StrCat("compiled model returned ", rc));
    return absl::OkStatus();
  }

 private:
  const LoadedModel* model_;
  std::vector<TensorSpec> inputs_;
  std::vector<TensorSpec> outputs_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_JIT_EXECUTABLE_H_
