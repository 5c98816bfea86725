// Cuvil IR: a typed SSA graph of values and ops whose dimensions are constants or expressions in
// the model's free dimensions (see cuvil/runtime/symbolic_dim.h; symbol 0 is the batch).
//
// Ops keep ONNX op type names; the importer and shape inference canonicalise every opset variant to
// one attribute form, so passes and code generation see a single form per op.
#ifndef CUVIL_COMPILER_IR_H_
#define CUVIL_COMPILER_IR_H_

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/runtime/dtype.h"
#include "cuvil/runtime/host_tensor.h"
#include "cuvil/runtime/symbolic_dim.h"

namespace cuvil::ir {

class Node;
class Graph;

struct TensorType {
  DType dtype = DType::kUndefined;
  SymShape shape;
  bool shape_known = false;

  int rank() const { return static_cast<int>(shape.size()); }
  // Bytes of a tensor of this type (saturating, see SymMul).
  SymDim ByteSize() const { return SymMul(SymNumElements(shape), SymDim::Const(DTypeSize(dtype))); }
  std::string ToString(const std::string& symbol = "batch") const;
};

// A tensor produced by one node, a graph input, or a constant. Thread-compatible.
class Value {
 public:
  int id = 0;
  std::string name;
  TensorType type;
  Node* producer = nullptr;  // Null for graph inputs and constants.
  // Set for initializers and folded constants; such values have no producer.
  std::optional<HostTensor> constant;
  // Element values known at compile time for small tensors (shapes and indices), possibly
  // symbolic. Set for constants and for results of shape arithmetic. Integer and bool tensors
  // hold the values themselves; a float tensor's element i is known[i] / known_den exactly (the
  // shape arithmetic exporters write in floating point: Cast → Div → Ceil → Cast).
  std::optional<std::vector<SymDim>> known;
  // The common denominator of a float tensor's known values: positive, 1 for every integer tensor.
  int64_t known_den = 1;
  bool is_graph_input = false;
  bool is_graph_output = false;

  bool is_constant() const { return constant.has_value(); }
};

// A GraphProto attribute (If/Loop/Scan bodies) is an imported subgraph: see subgraph_import.h.
using Attribute =
    std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>,
                 std::vector<std::string>, HostTensor, std::shared_ptr<Graph>>;

// One operation. Inputs may contain nullptr for omitted optional inputs. Thread-compatible.
class Node {
 public:
  std::string op_type;
  std::string name;
  int opset = 0;  // The ai.onnx opset the model imports.
  std::vector<Value*> inputs;
  std::vector<Value*> outputs;
  std::map<std::string, Attribute> attrs;

  bool has_input(size_t i) const { return i < inputs.size() && inputs[i] != nullptr; }
  bool has_attr(const std::string& key) const { return attrs.count(key) != 0; }
  int64_t attr_int(const std::string& key, int64_t fallback) const;
  float attr_float(const std::string& key, float fallback) const;
  std::string attr_string(const std::string& key, const std::string& fallback) const;
  std::vector<int64_t> attr_ints(const std::string& key,
                                 const std::vector<int64_t>& fallback = {}) const;
  std::vector<float> attr_floats(const std::string& key) const;
  // "Conv 'conv1' (opset 13)" for error messages.
  std::string Describe() const;
};

// A model graph. Nodes are kept in topological order. Thread-compatible.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Creates a value owned by the graph.
  Value* NewValue(std::string name);
  // Creates a node owned by the graph, appended at the end of the node list.
  Node* NewNode(std::string op_type, std::string name);
  // Turns `value` into a constant holding `tensor` (detaches it from its producer).
  void MakeConstant(Value* value, HostTensor tensor);
  // Removes nodes for which `dead` is true, preserving order.
  void EraseNodes(const std::vector<Node*>& dead);
  // Replaces every use of `from` (node inputs and graph outputs) with `to`.
  void ReplaceAllUses(Value* from, Value* to);

  const std::vector<std::unique_ptr<Node>>& nodes() const { return nodes_; }
  std::vector<std::unique_ptr<Node>>& mutable_nodes() { return nodes_; }
  const std::vector<std::unique_ptr<Value>>& values() const { return values_; }

  std::vector<Value*> inputs;   // Non-constant graph inputs, in model order.
  std::vector<Value*> outputs;  // In model order.
  // The model's output names; outputs[i] may be renamed by simplification, these stay.
  std::vector<std::string> output_names;
  std::string name;
  int opset = 0;
  // The name of symbol 0, the batch ("batch"), empty when all shapes are static.
  std::string symbol;
  // Every free dimension's name by symbol id (symbols[0] == symbol); empty when all shapes are
  // static.
  std::vector<std::string> symbols;
  // Dims shape inference could not prove equal but the graph needs equal (a Concat of an input
  // and its downsampled-then-upsampled copy: H and 2*floor(H/2)). Each becomes a run-time check
  // (CompiledModel::dim_constraints), so inputs that violate it fail before the code runs.
  struct DimAssumption {
    std::string value;  // The tensor whose dim carries the assumption.
    int32_t dim = 0;
    DimExpr lhs, rhs;
  };
  std::vector<DimAssumption> assumptions;
  // False for If/Loop/Scan bodies: their assumptions could not be checked before the entry runs,
  // so shape inference refuses unproven equalities there.
  bool allow_assumptions = true;
  // False for Loop/Scan bodies, whose iterations share one memory plan: they refuse sizes the data
  // decides. An If body may have them: its data-dependent symbols take ids after its parent's
  // (the If adds them to the parent's `symbols` and `data_dependent`, so the execution's symbol
  // array has their slots), and the If's outputs whose shapes differ between the branches get a
  // data-dependent symbol of their own.
  bool allow_data_dependent = true;
  // Symbols a node computes from the data at run time (NonZero's count of non-zeros), the last
  // entries of `symbols`, in creation order. Buffers are sized for `upper_bound`, an expression
  // in the symbols bound from the inputs; the producing kernel writes the value into syms[id].
  struct DataDependentSymbol {
    int32_t id = 0;
    DimExpr upper_bound;
    std::string producer;  // The node, for messages.
  };
  std::vector<DataDependentSymbol> data_dependent;
  // `d` with every data-dependent symbol replaced by its upper bound (what sizes its buffer);
  // nullopt when the result grows past DimExpr's caps.
  std::optional<SymDim> UpperBound(const SymDim& d) const;
  // True when `e` mentions a data-dependent symbol.
  bool IsDataDependent(const DimExpr& e) const;
  // True when a node outputs a string tensor: the execution then needs a StringHeap for the
  // strings its kernels make, whose address the caller stores in syms[StringHeapSlot()].
  bool MakesStrings() const;
  // The syms entry after every symbol (1 for a static model).
  int32_t StringHeapSlot() const {
    return std::max<int32_t>(static_cast<int32_t>(symbols.size()), 1);
  }

 private:
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

// Largest tensor the compiler accepts, in bytes (per batch item for batch-scaled tensors): 1 TiB.
// Far beyond any real model, yet small enough that byte counts, offsets and their sums over a
// whole graph stay far from int64 overflow, so later size arithmetic cannot wrap.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 40;

// Checks that `type` describes a tensor code generation can address: every dim is non-negative,
// and the product of its non-zero dims times the element size is at most kMaxTensorBytes (so the
// product of any subset of its dims fits too, even when another dim is 0). InvalidArgument
// naming `what` ("... is too large") otherwise.
absl::Status ValidateTensorType(const TensorType& type, const std::string& what,
                                const std::string& symbol = "batch");

// Converts a known-values vector to plain integers; error if any element is symbolic.
absl::StatusOr<std::vector<int64_t>> StaticValues(const std::vector<SymDim>& values);

// Reads an integer constant tensor (int32/int64/uint8/int8/bool) into SymDims.
std::vector<SymDim> KnownFromTensor(const HostTensor& t);

// A float constant's values as numerators over one power-of-two denominator (at most
// kMaxKnownDen), the form Value::known takes for float tensors; nullopt when a value is not
// finite, not such a fraction, or its numerator exceeds 2^53.
std::optional<std::pair<std::vector<SymDim>, int64_t>> RationalKnownFromTensor(const HostTensor& t);

// Largest denominator Value::known_den may take; arithmetic that would exceed it drops the values.
inline constexpr int64_t kMaxKnownDen = int64_t{1} << 20;

// Uses of every value by node inputs (a graph output counts as a use too).
std::map<const Value*, int> UseCounts(const Graph& graph);

}  // namespace cuvil::ir

#endif  // CUVIL_COMPILER_IR_H_
