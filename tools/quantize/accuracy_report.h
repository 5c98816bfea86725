// Accuracy of a QDQ model against its float original, both run by Cuvil on the same inputs: the
// final outputs' error and, per quantized activation, the SQNR of what the quantized layer reads
// (its DequantizeLinear output, which carries every earlier layer's error too) against the
// float tensor.
#ifndef CUVIL_TOOLS_QUANTIZE_ACCURACY_REPORT_H_
#define CUVIL_TOOLS_QUANTIZE_ACCURACY_REPORT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/jitcache/jit_engine.h"
#include "onnx/onnx_pb.h"
#include "output_error.h"
#include "quantizer.h"

namespace cuvil::quantize {

struct AccuracyReport {
  std::vector<std::string> output_names;
  std::vector<OutputError> outputs;  // One per float32 model output (others are skipped).
  // Quantized activation -> SQNR (dB) of its dequantized value against the float tensor.
  std::map<std::string, double> activation_sqnr_db;
};

// Runs `float_model` and `quantized.model` on every set of `eval_sets`. Errors from compiling
// or running either model.
absl::StatusOr<AccuracyReport> MeasureAccuracy(
    JitEngine& engine, const onnx::ModelProto& float_model, const QuantizeResult& quantized,
    const std::vector<std::vector<HostTensor>>& eval_sets);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_ACCURACY_REPORT_H_
