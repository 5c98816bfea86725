// A float model compiled by Cuvil with chosen intermediate tensors exposed as extra outputs, so a
// run returns what those tensors held (calibration and per-layer error measurement).
#ifndef CUVIL_TOOLS_QUANTIZE_OBSERVED_MODEL_H_
#define CUVIL_TOOLS_QUANTIZE_OBSERVED_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"

namespace cuvil::quantize {

// Thread-safe: Run may be called concurrently (LoadedModel::Run is thread-safe).
class ObservedModel {
 public:
  // Compiles `model` with each of `tensors` (names of graph inputs, node outputs or graph
  // outputs) readable after a run, and loads it into `engine` under `namespace_name`.
  // InvalidArgument naming a tensor that the graph never defines; compiler errors otherwise.
  static absl::StatusOr<std::unique_ptr<ObservedModel>> Create(
      JitEngine& engine, const onnx::ModelProto& model, const std::vector<std::string>& tensors,
      const std::string& namespace_name);

  struct Result {
    std::vector<HostTensor> outputs;   // The model's own outputs, in order.
    std::vector<HostTensor> observed;  // One per requested tensor, in request order.
  };
  // Runs one set of inputs (the model's non-initializer inputs, in order).
  absl::StatusOr<Result> Run(const std::vector<HostTensor>& inputs) const;

  // The number of the model's own outputs.
  size_t num_outputs() const { return num_outputs_; }

 private:
  ObservedModel() = default;
  std::unique_ptr<LoadedModel> loaded_;
  size_t num_outputs_ = 0;
  // Per requested tensor: where it comes from (kFromInput: inputs[index], else outputs[index]).
  struct Source {
    bool from_input = false;
    size_t index = 0;
  };
  std::vector<Source> sources_;
};

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_OBSERVED_MODEL_H_
