// The FLOP estimate of a graph, from the op table's per-op estimates (OpDef::macs).
#ifndef CUVIL_COMPILER_FLOPS_H_
#define CUVIL_COMPILER_FLOPS_H_

#include <cstdint>

#include "absl/types/span.h"
#include "cuvil/compiler/ir.h"

namespace cuvil {

// Floating-point operations of one execution at symbol values `syms`: 2 per multiply-add of the
// ops whose row has an estimate (Conv, Gemm, MatMul: the ops that dominate; elementwise work is
// not counted, as in most GFLOP/s figures). Reads the graph's shapes; a dim the graph decides at
// run time counts 0. Thread-safe.
double EstimateFlops(const ir::Graph& graph, absl::Span<const int64_t> syms);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_FLOPS_H_
