// Private: the convolution fusion pass (see fuse_conv.cc).
#ifndef CUVIL_COMPILER_SRC_FUSE_CONV_H_
#define CUVIL_COMPILER_SRC_FUSE_CONV_H_

#include "absl/status/status.h"
#include "cuvil/compiler/ir.h"
#include "memory_plan.h"

namespace cuvil {

// Rewrites 2-D float32 Convs with constant weights for the runtime microkernels: folds a
// following BatchNormalization into the weights and bias, fuses a following residual Add and then
// an activation (Relu, Clip, HardSigmoid, HardSwish, Sigmoid) into the Conv's epilogue, and packs
// the weights (attribute "ukernel": 1 packed GEMM, 2 depthwise, 3 Winograd). Fused nodes are
// removed; the Conv takes over their output value. Runs after OptimizeGraph (shapes inferred,
// canonical attributes). With `images`, weights that only their Conv reads are not packed into a
// new constant: the Conv keeps them and `images` gets their packed form for the memory plan to
// write (PlanMemoryDeferringWeights); without it (or for shared weights) the Conv gets a packed
// constant. Not thread-safe on the same graph.
absl::Status FuseConvolutions(ir::Graph& graph, ConstantImages* images = nullptr);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_FUSE_CONV_H_
