// Private to cuvil-quantize: MatMul and Gemm weights to 4 bits (ONNX Runtime's com.microsoft
// MatMulNBits), the activations staying float.
#ifndef CUVIL_TOOLS_QUANTIZE_INT4_REWRITE_H_
#define CUVIL_TOOLS_QUANTIZE_INT4_REWRITE_H_

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace cuvil::quantize {

struct Int4Options {
  int64_t block = 32;  // Weights per scale along K: a multiple of 16.
  // Nodes kept float, by NodeId.
  std::set<std::string> exclude;
};

// One node whose weights became 4-bit.
struct Int4Layer {
  std::string node;
  std::string op_type;  // What it was: MatMul or Gemm.
  int64_t k = 0, n = 0;
  double weight_sqnr_db = 0;  // Of the dequantised weights against the float ones.
};

// Replaces every MatMul whose B is a float32 [K, N] initializer, and every Gemm with such a B
// (either transB, no transA, alpha 1, and a C that is absent or a [N] initializer with beta 1),
// by a MatMulNBits node of the same name and output (bits 4, asymmetric uint4 per block of
// `block` weights along K with the block's range widened to include 0, packed zero points, C as
// its bias), and adds the com.microsoft opset. Initializers nothing reads any more are removed.
// Nodes in options.exclude (InvalidArgument when one names no node) and ones of another form
// stay as they are. Thread-compatible.
absl::StatusOr<std::vector<Int4Layer>> RewriteWeightsInt4(onnx::ModelProto& model,
                                                          const Int4Options& options);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_INT4_REWRITE_H_
