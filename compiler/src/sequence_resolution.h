// Private: compile-time resolution of ONNX sequence and optional values.
//
// Cuvil's IR holds tensors only. A sequence or optional value whose structure (a sequence's
// length, an optional's presence) is known at compile time is instead tracked by the importer as
// the list of its element tensors, and the ops on such values are rewritten, before import, into
// plain tensor nodes of the same ModelProto:
//   SequenceConstruct / SequenceEmpty / SequenceInsert / SequenceErase / Optional   → no node
//   SequenceAt / OptionalGetElement (tensor)                   → Identity of the element
//   SequenceLength / OptionalHasElement                        → Constant
//   ConcatFromSequence                                         → [Unsqueeze each] + Concat
//   SplitToSequence with a constant 1-D split                  → Split
//   SequenceMap                                                → its body inlined per element
//   If whose condition is known, with sequence/optional values → the taken branch inlined
//   If whose condition is not known                            → an If over the element tensors
//                                                                (both branches alike)
//   Loop carrying sequence/optional values                     → unrolled (trip count and
//                                                                condition known)
// Positions, trip counts and conditions must be compile-time constants (Constant nodes,
// initializers, bound inputs, or results this pass folds); otherwise the rewrite fails with
// FailedPrecondition naming the node, and a graph input that would fix it is reported in
// needs_binding. The rewritten model has only tensor-typed values, so the rest of the compiler
// (shape inference, codegen) is unchanged; no kernel exists for any sequence op.
#ifndef CUVIL_COMPILER_SRC_SEQUENCE_RESOLUTION_H_
#define CUVIL_COMPILER_SRC_SEQUENCE_RESOLUTION_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "cuvil/compiler/onnx_importer.h"
#include "onnx/onnx_pb.h"
#include "onnx_tensor.h"

namespace cuvil {

// True when `graph` (or a subgraph) declares a sequence- or optional-typed input or output or
// uses a sequence or optional op: only such models go through ResolveSequences.
bool UsesSequencesOrOptionals(const onnx::GraphProto& graph);

// The kind of a declared value type; Unimplemented for maps, sparse tensors, nested sequences.
absl::StatusOr<IoKind> IoKindOf(const onnx::TypeProto& type, const std::string& what);

// Rewrites `model` in place as described above. `options` supplies bound inputs, the structure
// of sequence/optional graph inputs and allow_structured_io; `raw_data` holds the moved raw_data
// of the initializers (may be empty; see onnx_tensor.h). Fills `layout` (one entry per declared
// graph output) and, for a FailedPrecondition, options.needs_binding. Errors name the node.
absl::Status ResolveSequences(onnx::ModelProto* model, const ImportOptions& options,
                              const std::vector<std::optional<MovedRawData>>& raw_data,
                              std::vector<OutputLayout>* layout);

// The layout of a model without sequences or optionals: output i is declared output i.
std::vector<OutputLayout> TensorOutputLayout(const onnx::GraphProto& graph);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_SEQUENCE_RESOLUTION_H_
