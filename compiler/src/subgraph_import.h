// Private: import of the GraphProto attributes of control-flow ops (If, Loop, Scan).
//
// A subgraph becomes an ir::Graph of its own. Names it reads but does not define resolve in the
// enclosing scopes; each such outer value is *captured*: the control-flow node gets it as an extra
// input after its ONNX inputs (attribute kExplicitInputsAttr keeps the ONNX input count), and
// every subgraph of the node gets a matching graph input after its formal ONNX inputs, in the same
// order. So the node's inputs say everything the node reads (lifetimes, dead code, memory plan)
// and a subgraph is compiled like a model whose inputs are its formal inputs then the captures.
#ifndef CUVIL_COMPILER_SRC_SUBGRAPH_IMPORT_H_
#define CUVIL_COMPILER_SRC_SUBGRAPH_IMPORT_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/ir.h"
#include "internal_attrs.h"
#include "onnx/onnx_pb.h"

namespace cuvil {

// Node attribute holding the number of ONNX inputs of a control-flow node (captures follow).
inline constexpr const auto& kExplicitInputsAttr = attr::kExplicitInputs;
// An If's outputs whose dims differ between its branches: (output, dim, symbol id) triples of
// the data-dependent symbols the kernel sets from the branch that ran (ops/shape_control_flow.cc).
inline constexpr const auto& kIfDataDependentDims = attr::kIfDataDependentDims;
// Set on an opset-8 Scan by shape inference: input 0 is sequence_lens (absent) and every other
// input and output has a leading batch dim; the scan attributes describe one batch item.
inline constexpr const auto& kScanBatchedAttr = attr::kScanBatched;

// Resolves a name in an enclosing scope; nullptr when no scope defines it.
using OuterLookup = std::function<ir::Value*(const std::string&)>;
// Converts a non-graph attribute (the importer's own conversion).
using AttributeConverter =
    std::function<absl::StatusOr<ir::Attribute>(const onnx::AttributeProto&)>;

// Imports the GRAPH attributes `graphs` of `node` (whose ONNX input count is `explicit_inputs`;
// node->inputs may be shorter when trailing inputs were omitted), resolving free names through
// `outer`, stores each as a std::shared_ptr<ir::Graph> attribute and appends the captured values
// to node->inputs as described above. Errors name the node.
absl::Status ImportSubgraphAttributes(ir::Node* node, int explicit_inputs,
                                      const std::vector<const onnx::AttributeProto*>& graphs,
                                      const OuterLookup& outer, const AttributeConverter& convert);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_SUBGRAPH_IMPORT_H_
