// Private: the graph passes of a compile as a list a reader can see. Each pass is named and timed;
// after each one VerifyGraph checks the graph's structure, so a pass that breaks it fails the
// compile naming itself instead of leaving a miscompile for code generation to find. The verifier
// in the spirit of TVM's well-formedness check between Relax passes.
#ifndef CUVIL_COMPILER_SRC_PASS_PIPELINE_H_
#define CUVIL_COMPILER_SRC_PASS_PIPELINE_H_

#include <functional>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil {

// One pass over the graph. `shapes_known`: after it every value a node reads or the graph
// returns has a dtype and a known shape (shape inference has run).
struct GraphPass {
  std::string name;
  std::function<absl::Status(ir::Graph&)> run;
  bool shapes_known = true;
};

struct PassOptions {
  // When a pass of this name has run, GraphText of the graph is written to `print_to`.
  std::string print_after;
  std::ostream* print_to = nullptr;
};

// The structural rules every pass must keep, in the graph and in every If/Loop/Scan body it
// holds (recursively; a body's error names the body and its node): each node input is a value of
// this graph that is a graph input, a constant, or the output of an earlier node (topological
// order); each node output's producer is that node, and no value is produced twice; each graph
// output is defined; with `shapes_known`, every value read or returned has a dtype and a known
// shape; every attribute on a node is an ONNX attribute of its op (any opset of ONNX's schema), one
// its row declares (OpRow::Attributes: an op without a schema, a shape function's canonical form)
// or one of Cuvil's internal ones (internal_attrs.h: attr::kAll, attr::kAllPrefixes), so a pass
// cannot leave an undeclared one for later passes to read; a control-flow node's body has a graph
// input for each outer value the node captures (subgraph_import.h). FailedPrecondition naming
// `after` and the first broken rule. Thread-compatible (reads the graph).
absl::Status VerifyGraph(const ir::Graph& graph, bool shapes_known, const std::string& after);

// The graph as text, one line per node: "%y:f32[batch,8] = Relu 'r'(%x)". For --print-after.
std::string GraphText(const ir::Graph& graph);

// Runs `passes` in order over `graph`, appending "pass:<name>" timings; stops at the first error
// (the pass's own, or VerifyGraph's after it, as Internal).
absl::Status RunGraphPasses(ir::Graph& graph, std::span<const GraphPass> passes,
                            const PassOptions& options, std::vector<PhaseTiming>* timings);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_PASS_PIPELINE_H_
