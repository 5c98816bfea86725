// Private: host evaluation of tiny elementwise ops whose inputs are all constants.
//
// Shape arithmetic on integers folds through known values (InferContext::SetKnown); this covers
// what that does not: float arithmetic and casts that ONNX function expansions put between a
// size and the op that needs it (a window's size through Cast and Sub into Range, a Loop's trip
// count through Div, Ceil and Cast). Only results of at most kMaxHostFoldElements elements of
// float32/float64/int32/int64 (or bool, for a Cast) fold, so activations never do.
#ifndef CUVIL_COMPILER_SRC_CONSTANT_FOLD_H_
#define CUVIL_COMPILER_SRC_CONSTANT_FOLD_H_

#include <string>
#include <vector>

#include "cuvil/compiler/ir.h"

namespace cuvil {

inline constexpr int64_t kMaxHostFoldElements = 64;

// True for the op types TryFoldOnHost evaluates.
bool IsHostFoldable(const std::string& op_type);

// When `node` (shape-inferred) is host-foldable, all its inputs are constants and its one output
// is small, turns the output into a constant holding the result (with known values for integer
// results) and returns true; the caller erases the node. Otherwise changes nothing.
bool TryFoldOnHost(ir::Graph& graph, ir::Node& node);

// The graph inputs that, bound to constants, would make `v` a constant through host-foldable
// ops; empty when some value behind it is neither (a binding could not help).
std::vector<std::string> GraphInputsBehind(const ir::Value* v);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_CONSTANT_FOLD_H_
