// Private: dequantises constant weights at compile time.
//
// A QDQ model (cuvil-quantize's, ONNX Runtime's quantization tool's) stores weights and biases as
// int8/uint8/int32 initializers behind DequantizeLinear. Dequantised once here, a Conv, MatMul or
// Gemm sees float constant weights, so the weight-packing passes and the packed kernels apply,
// instead of a run-time DequantizeLinear over every weight feeding the generic kernels.
#ifndef CUVIL_COMPILER_SRC_FOLD_DEQUANTIZE_H_
#define CUVIL_COMPILER_SRC_FOLD_DEQUANTIZE_H_

#include "cuvil/compiler/ir.h"

namespace cuvil {

// Largest dequantised tensor folded, in elements (4 GiB of float32).
inline constexpr int64_t kMaxDequantizeFoldElements = int64_t{1} << 30;

// When `node` (shape-inferred, canonical form) is a DequantizeLinear of constant int8, uint8 or
// int32 data with a constant float32 scale and an optional constant zero point, turns its output
// into the float32 constant the kernel would compute, bit for bit ((x - zero_point) in int32,
// converted to float, times the scale of its channel), and returns true; the caller erases the
// node. Otherwise (or beyond kMaxDequantizeFoldElements) changes nothing and returns false.
bool TryFoldDequantize(ir::Graph& graph, ir::Node& node);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_FOLD_DEQUANTIZE_H_
