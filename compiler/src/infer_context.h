// Private: what an op's shape function sees (the op table itself is op_table.h).
//
// An op's shape function canonicalises its node (opset variants → one attribute form, constant
// operand inputs → attributes), sets every output's type, and, for integer shape arithmetic,
// the outputs' known values so PyTorch's Shape → Gather → Concat → Reshape chains fold away.
#ifndef CUVIL_COMPILER_SRC_INFER_CONTEXT_H_
#define CUVIL_COMPILER_SRC_INFER_CONTEXT_H_

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cuvil/compiler/ir.h"
#include "op_table.h"

namespace cuvil::ir {

// Not thread-safe: used by one compilation at a time.
class InferContext {
 public:
  InferContext(Graph& graph, Node& node, std::vector<std::string>* needs_binding)
      : graph_(graph), node_(node), needs_binding_(needs_binding) {}

  Graph& graph() { return graph_; }
  Node& node() { return node_; }
  size_t num_inputs() const { return node_.inputs.size(); }
  bool has_input(size_t i) const { return node_.has_input(i); }
  Value* input(size_t i) const { return node_.inputs[i]; }
  const TensorType& in_type(size_t i) const { return node_.inputs[i]->type; }
  int in_rank(size_t i) const { return node_.inputs[i]->type.rank(); }
  const SymShape& in_shape(size_t i) const { return node_.inputs[i]->type.shape; }
  DType in_dtype(size_t i) const { return node_.inputs[i]->type.dtype; }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_output(size_t i) const {
    return i < node_.outputs.size() && node_.outputs[i] != nullptr;
  }

  // Sets output i's type (ignored when the output is omitted).
  void SetOutput(size_t i, DType dtype, SymShape shape);
  // Records compile-time values of output i (call after SetOutput). For a float output the
  // values are over the known_den its float inputs share (ops that move values keep them); when
  // those inputs disagree the values are dropped.
  void SetKnown(size_t i, std::vector<SymDim> values);
  // Records output i's values as numerators over `den` (> 0; 1 for integer outputs). Values whose
  // denominator exceeds kMaxKnownDen are dropped.
  void SetKnownRational(size_t i, std::vector<SymDim> nums, int64_t den);

  // The compile-time values of input i, possibly symbolic. FailedPrecondition (and a binding
  // request for graph inputs) when they are not known at compile time or not integers.
  absl::StatusOr<std::vector<SymDim>> Known(size_t i, const char* role);
  // As Known, but every value must be static.
  absl::StatusOr<std::vector<int64_t>> StaticInts(size_t i, const char* role);
  // The constant tensor of input i, or FailedPrecondition.
  absl::StatusOr<const HostTensor*> ConstantInput(size_t i, const char* role);
  // True when binding graph inputs to constants would make `v` a constant (it is a graph input,
  // or computed from some by ops folded on the host).
  bool CouldBeBound(const Value* v) const;
  // A fresh symbol for a dimension the node computes from the data at run time (its kernel
  // writes the value; see Graph::data_dependent), at most `upper_bound`, which sizes the buffers.
  // `what` names it after the node ("<node>_count"). Unimplemented inside If/Loop/Scan bodies,
  // whose buffers are planned before the body runs.
  absl::StatusOr<SymDim> DataDependentDim(const std::string& what, const SymDim& upper_bound);
  // Drops inputs from index i on (after their values were folded into attributes).
  void TruncateInputs(size_t i);

  // InvalidArgument naming the node.
  absl::Status Error(const std::string& message) const;
  // Maps a possibly negative axis into [0, rank) (or [0, rank] with `allow_end`, for ops such as
  // Flatten whose axis may name the end); InvalidArgument naming the node and the axis otherwise,
  // including every axis of a rank-0 tensor. Every shape function normalises axes through here.
  absl::StatusOr<int> Axis(int64_t axis, int rank, bool allow_end = false) const;
  // Checks the input count lies in [min, max].
  absl::Status ExpectInputs(size_t min, size_t max) const;

 private:
  Graph& graph_;
  Node& node_;
  // Adds the graph inputs that would make `v` a constant to needs_binding.
  void RequestBindings(const Value* v);

  std::vector<std::string>* needs_binding_;
};

// Overflow-checked arithmetic for sizes and offsets taken from a model; nullopt on overflow.
inline std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
  return r;
}
inline std::optional<int64_t> CheckedSub(int64_t a, int64_t b) {
  int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// Numpy-style broadcast of two shapes; nullopt when incompatible.
std::optional<SymShape> BroadcastShapes(const SymShape& a, const SymShape& b);

}  // namespace cuvil::ir

#endif  // CUVIL_COMPILER_SRC_INFER_CONTEXT_H_
