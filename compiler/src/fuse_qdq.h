// Private: integer convolutions for QDQ models (see fuse_qdq.cc).
#ifndef CUVIL_COMPILER_SRC_FUSE_QDQ_H_
#define CUVIL_COMPILER_SRC_FUSE_QDQ_H_

#include <unordered_set>

#include "cuvil/compiler/ir.h"

namespace cuvil {

// The values that FuseQdqConvs may read as int8 weights: the outputs of DequantizeLinear nodes
// feeding a Conv's weight input. OptimizeGraph keeps those DequantizeLinear nodes unfolded until
// FuseQdqConvs has run (then folds the ones still used).
std::unordered_set<const ir::Value*> QdqWeightCandidates(const ir::Graph& graph);

// Rewrites DequantizeLinear(x) and DequantizeLinear(constant int8 weight) -> Conv (2-D, group 1,
// constant float bias) -> [Add of a residual computed earlier] -> [Relu | Clip] ->
// [QuantizeLinear] into one CuvilQConv node (cuvil_uk_qconv2d: uint8 or int8 x, int8 weights,
// int32 accumulation, the scales and zero points folded into a per-channel requantisation, the
// activation as its clamp). Fires only when x's scale and zero point are constant scalars, the
// weight's scale is constant per tensor or per output channel with zero points 0, and every
// intermediate float value has no other consumer and is no graph output; without a final
// QuantizeLinear (or with a residual) the node outputs float32. Needs inferred shapes. Returns the
// number of Convs rewritten. Not thread-safe on the same graph.
int FuseQdqConvs(ir::Graph& graph);

// Rewrites each QLinearConv that FuseQdqConvs can run on the integer kernel — x, y and weight
// scales and zero points constant (weight zero points 0), int8 constant weights, an int32 constant
// or no bias, 2-D, one group, static non-batch dims — into the equivalent DequantizeLinear ->
// Conv -> QuantizeLinear (bias pre-scaled by x_scale * w_scale), for FuseQdqConvs to fuse. Others
// keep their reference kernel. Needs inferred shapes. Returns the number rewritten.
int ExpandQLinearConvs(ir::Graph& graph);

// Likewise each QLinearMatMul with a 2-D activation (static row length), constant scalar scales
// and zero points for it and y, and constant int8 [K, N] weights with zero points 0 and scales per
// tensor or per column: DequantizeLinear -> MatMul -> QuantizeLinear, which FuseQdqConvs runs on
// the integer matrix product. Others keep their reference kernel. Returns the number rewritten.
int ExpandQLinearMatMuls(ir::Graph& graph);

// Rewrites each MatMulInteger (2-D activation with a static row length) and ConvInteger (2-D,
// one group, static non-batch dims) whose weights are constant int8 with zero points 0 (absent or
// constant) and whose activation zero point is absent or a constant scalar into the integer
// matrix product or convolution with the exact int32 output (CUVIL_UK_QOUT_S32). Others keep
// their reference kernels. Needs inferred shapes. Returns the number rewritten.
int LowerIntegerProducts(ir::Graph& graph);

// Rewrites DequantizeLinear(x) -> depthwise Conv prepared for the microkernel (FuseConvolutions:
// "ukernel" 2, any fused activation, no residual) -> QuantizeLinear, with constant scalar scales
// and zero points, into that Conv reading x and writing the 8-bit output itself
// (cuvil_uk_qdepthwise2d; attributes q_x_scale, q_x_zero, q_x_signed, q_y_scale, q_y_zero,
// q_y_signed), so neither float tensor goes through memory. The results are the same bits. Fires
// only when the Conv's float output has no other consumer; the DequantizeLinear stays while
// something else reads it. Returns the number of Convs rewritten. Not thread-safe on the graph.
int FuseQdqDepthwiseConvs(ir::Graph& graph);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_FUSE_QDQ_H_
