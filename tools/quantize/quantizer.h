// Post-training quantization end to end: plan which nodes to quantize, calibrate their
// activations by running the float model with Cuvil, rewrite into QDQ form and check the result.
#ifndef CUVIL_TOOLS_QUANTIZE_QUANTIZER_H_
#define CUVIL_TOOLS_QUANTIZE_QUANTIZER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "activation_calibrator.h"
#include "cuvil/jitcache/jit_engine.h"
#include "int4_rewrite.h"
#include "onnx/onnx_pb.h"
#include "qdq_rewrite.h"

namespace cuvil::quantize {

struct QuantizeOptions {
  QdqOptions qdq;
  CalibrationOptions calibration;
  // MatMul/Gemm weights become 4-bit MatMulNBits first (RewriteWeightsInt4, with qdq.exclude);
  // the rest (Conv) is then calibrated on that model and rewritten to QDQ as usual.
  bool weights_int4 = false;
  int64_t int4_block = 32;
};

struct QuantizeResult {
  onnx::ModelProto model;  // The QDQ model.
  std::vector<Int4Layer> int4_layers;
  RewriteResult rewrite;
  std::map<std::string, ActivationStats> activations;
};

// Quantizes `float_model`, calibrating on `calibration_sets` (each the model's inputs in order).
// The result passes onnx::checker (Internal otherwise: a rewrite bug). Errors from planning,
// calibration and the rewrite.
absl::StatusOr<QuantizeResult> QuantizeModel(
    JitEngine& engine, const onnx::ModelProto& float_model,
    const std::vector<std::vector<HostTensor>>& calibration_sets, const QuantizeOptions& options);

// onnx::checker::check_model on `model` (full check, no shape inference); InvalidArgument with
// the checker's first line on failure.
absl::Status CheckModel(const onnx::ModelProto& model);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_QUANTIZER_H_
