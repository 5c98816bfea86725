// Private: pattern fusion run after OptimizeGraph, before memory planning.
#ifndef CUVIL_COMPILER_SRC_FUSE_PATTERNS_H_
#define CUVIL_COMPILER_SRC_FUSE_PATTERNS_H_

#include "absl/status/status.h"
#include "cuvil/compiler/ir.h"

namespace cuvil {

// Rewrites the subgraphs PyTorch exports for well-known functions into one node each, so each
// becomes one vectorised kernel:
//   LayerNorm  ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta
//              over the last axis  ->  LayerNormalization(x, gamma, beta; axis, epsilon)
//   GELU       Div sqrt2 (or Mul 1/sqrt2), Erf, Add 1, Mul x, Mul 0.5  ->  Gelu(x)
//   bias       MatMul(a, constant B) followed by Add of a constant [N] vector, or a Gemm whose
//              own C is a constant [N] or [1, N] vector (alpha = beta = 1)  ->  MatMul/Gemm(a, B,
//              bias) with attribute "fused_bias" (the kernel adds it while the tile is in
//              registers; the vector is zero padded to whole panels, "packed_panel" columns)
// Only fuses when every intermediate value is private to the pattern (not a graph output, no
// other consumer). Needs inferred shapes. Returns the number of rewrites in `fused` if non-null.
absl::Status FusePatterns(ir::Graph& graph, int* fused = nullptr);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_FUSE_PATTERNS_H_
