// Calibration inputs: the model's input tensors read from a backend-test folder
// (DIR/test_data_set_*/input_*.pb, or DIR/input_*.pb) or drawn at random.
#ifndef CUVIL_TOOLS_QUANTIZE_CALIBRATION_DATA_H_
#define CUVIL_TOOLS_QUANTIZE_CALIBRATION_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/runtime/dtype.h"
#include "cuvil/runtime/host_tensor.h"
#include "onnx/onnx_pb.h"

namespace cuvil::quantize {

// A graph input that is not an initializer: its name, dtype and shape (symbolic dims as -1).
struct ModelInput {
  std::string name;
  DType dtype = DType::kUndefined;
  std::vector<int64_t> shape;
};

// The model's non-initializer inputs in order. InvalidArgument for a non-tensor input or an
// element type Cuvil has no DType for.
absl::StatusOr<std::vector<ModelInput>> ModelInputs(const onnx::ModelProto& model);

// One vector of input tensors per data set, in `inputs` order. A data set's files are matched to
// the inputs by tensor name when every file names a model input, else by position (input_K.pb is
// input K). NotFound when `dir` holds no data set; InvalidArgument for a set lacking an input or
// holding one of the wrong dtype.
absl::StatusOr<std::vector<std::vector<HostTensor>>> ReadCalibrationSets(
    const std::string& dir, const std::vector<ModelInput>& inputs);

// `count` sets of random inputs (seeded by `seed`; symbolic dims are 1): float32/float64 draw from
// N(0, 1), integer types uniformly from their range capped to [-128, 127], others from {0, 1}.
std::vector<std::vector<HostTensor>> RandomCalibrationSets(int count,
                                                           const std::vector<ModelInput>& inputs,
                                                           uint64_t seed = 1);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_CALIBRATION_DATA_H_
