// The QDQ rewrite: turns a float ONNX model into the standard quantize-dequantize form, where
// every input of a Conv, MatMul or Gemm reads a DequantizeLinear. Activations pass through a
// QuantizeLinear -> DequantizeLinear pair (asymmetric uint8 or int8, per tensor, with the range
// calibration found); float weight initializers become int8 initializers (symmetric, per tensor
// or per output channel) feeding a DequantizeLinear; a float bias becomes an int32 initializer
// with scale input_scale * weight_scale and zero point 0 feeding a DequantizeLinear (or stays
// float when it does not fit int32 or the node's other inputs are not both quantized).
#ifndef CUVIL_TOOLS_QUANTIZE_QDQ_REWRITE_H_
#define CUVIL_TOOLS_QUANTIZE_QDQ_REWRITE_H_

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "calibration.h"
#include "onnx/onnx_pb.h"
#include "quant_params.h"

namespace cuvil::quantize {

struct QdqOptions {
  ActivationType activation_type = ActivationType::kUInt8;
  // One weight scale per output channel (needs opset >= 13) instead of one per tensor.
  bool per_channel = false;
  // Nodes kept float, by NodeId.
  std::set<std::string> exclude;
  // Quantize the bias of Conv and Gemm to int32 (else it stays float).
  bool int32_bias = true;
};

// A node's identity for --exclude and reports: its name, or its first output when unnamed.
std::string NodeId(const onnx::NodeProto& node);

// What the rewrite will quantize: the Conv/MatMul/Gemm nodes not excluded (indices into
// graph.node) and the activation tensors (inputs that are not initializers) they read, each once,
// in first-use order; those need a calibrated range. InvalidArgument when an excluded name
// matches no node; FailedPrecondition when the default-domain opset is below 10, or below 13 with
// per_channel.
struct QuantPlan {
  std::vector<int> nodes;
  std::vector<std::string> activations;
};
absl::StatusOr<QuantPlan> PlanQuantization(const onnx::ModelProto& model,
                                           const QdqOptions& options);

// One node the rewrite quantized.
struct QuantizedLayer {
  std::string node;  // NodeId.
  std::string op_type;
  std::vector<std::string> activations;  // Its quantized activation inputs.
  std::string weight;                    // Its quantized weight initializer, empty if none.
  int weight_axis = -1;                  // Per-channel axis, -1 per tensor.
  double weight_sqnr_db = 0;             // Of the dequantized weight against the float one.
  bool int32_bias = false;
};

struct RewriteResult {
  std::vector<QuantizedLayer> layers;
  // Each quantized activation -> the DequantizeLinear output that replaced it.
  std::map<std::string, std::string> dequantized;
  // Planned nodes left float (an activation without a range, a weight that is not float32 or
  // holds external data), by NodeId.
  std::vector<std::string> skipped;
};

// Rewrites `model` in place per PlanQuantization(model, options), quantizing each activation
// over ranges[name]. Float initializers no longer read by any node (or subgraph, or graph output)
// are removed. Errors as PlanQuantization's; the model is untouched on error.
absl::StatusOr<RewriteResult> RewriteToQdq(onnx::ModelProto& model,
                                           const std::map<std::string, Range>& ranges,
                                           const QdqOptions& options);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_QDQ_REWRITE_H_
