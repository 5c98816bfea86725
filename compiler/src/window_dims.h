// Private: extents and pads of sliding windows (Conv and the pools) as dim expressions, so that
// shape inference (ops/shape_nn.cc) and code generation (codegen/kernels_nn.cc) agree on them
// for symbolic spatial dims (an image's H and W, a clip's frame count).
#ifndef CUVIL_COMPILER_SRC_WINDOW_DIMS_H_
#define CUVIL_COMPILER_SRC_WINDOW_DIMS_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/runtime/symbolic_dim.h"

namespace cuvil {

// The padding of one spatial dim, before its first and after its last element.
struct WindowPad {
  SymDim begin, end;
};

// The pads auto_pad SAME_UPPER (`upper`) or SAME_LOWER gives a window spanning `extent` input
// elements ((kernel - 1) * dilation + 1) moved by `stride` over a dim of size `in`: the output
// has ceil(in / stride) positions and total = max(0, (out - 1) * stride + extent - in) pads,
// the odd one at the end (SAME_UPPER) or at the begin (SAME_LOWER), as ONNX Runtime splits them.
// stride and extent must be positive; nullopt when the expression grows past DimExpr's caps.
std::optional<WindowPad> SameWindowPad(const SymDim& in, int64_t stride, int64_t extent,
                                       bool upper);

// Output positions of a window over `in` with explicit pads `begin` and `end`:
// floor((in + begin + end - extent) / stride) + 1, or in ceil mode the ceiling instead of the
// floor, less the last position when its window would start past the input and its begin pad
// (ONNX Runtime's rule; for symbolic `in` that is min(ceil(...), floor((in + begin - 1) /
// stride)) + 1, equal to the rule whenever end < extent, which ONNX Runtime requires of pools).
// stride and extent must be positive; nullopt when the expression grows past DimExpr's caps.
std::optional<SymDim> WindowOutputExtent(const SymDim& in, int64_t begin, int64_t end,
                                         int64_t extent, int64_t stride, bool ceil_mode);

// The pads of every spatial dim of a windowed node (Conv, ConvTranspose, MaxPool, AveragePool)
// whose attributes shape inference canonicalised, over input spatial dims `in`: its `pads`
// attribute as constants, or, where it kept what they follow from because they depend on a
// symbolic input size, expressions: auto_pad SAME_UPPER / SAME_LOWER as SameWindowPad gives
// them, a ConvTranspose's output_shape as the ONNX reference splits its total padding (the end
// pad less output_padding, as static ConvTranspose pads are stored). Errors name the node.
absl::StatusOr<std::vector<WindowPad>> NodeWindowPads(const ir::Node& n, const SymShape& in);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_WINDOW_DIMS_H_
