// ONNX front end: reads a ModelProto, runs the ONNX checker and builds Cuvil IR.
#ifndef CUVIL_COMPILER_ONNX_IMPORTER_H_
#define CUVIL_COMPILER_ONNX_IMPORTER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

// The declared kind of a graph input or output. Sequences and optionals never reach the IR: the
// importer resolves them at compile time into their element tensors (see StructuredInput).
enum class IoKind { kTensor, kSequence, kOptionalTensor, kOptionalSequence };

// The compile-time structure of a sequence- or optional-typed graph input. A sequence input `x`
// of n elements becomes n tensor inputs named "x[0]" ... "x[n-1]" (in order, where the input
// stood); a present optional is its one tensor "x[0]" or its sequence's elements; an empty
// optional contributes no input. Structured outputs expand the same way (see OutputLayout).
struct StructuredInput {
  bool present = true;  // Optionals only: false for an empty optional.
  // The element shapes (a sequence, or an optional's sequence), or the one shape of an optional
  // tensor (empty: the shape the model declares).
  std::vector<std::vector<int64_t>> element_shapes;
};

// Where a declared graph output lands among the compiled model's outputs: outputs
// [first, first + count) in order (a tensor: one; a sequence or optional: its element tensors,
// none for an empty sequence or optional, whose presence `present` tells apart).
struct OutputLayout {
  std::string name;
  IoKind kind = IoKind::kTensor;
  bool present = true;
  size_t first = 0;
  size_t count = 1;
};

// A declared graph input (initializers excluded) or output.
struct DeclaredIo {
  std::string name;
  IoKind kind = IoKind::kTensor;
  // A tensor's declared dims, -1 for a free one; empty for a scalar, another kind or an unknown
  // rank (`ranked` tells those apart).
  std::vector<int64_t> dims;
  bool ranked = false;
};

struct ImportOptions {
  // Symbolic dimensions replaced by a fixed value (like ONNX Runtime's free dimension overrides).
  std::map<std::string, int64_t> dim_overrides;
  // Free dimensions known to be multiples of a number (by name, e.g. {"height", 8}): the dim
  // becomes K * (NAME/K), a symbol of its own, so shape arithmetic a graph does on it
  // (floor((H + 7) / 8) beside floor(H / 8) in RAFT, whose PyTorch code asserts multiples of 8
  // that the exporter drops) simplifies exactly, and a request whose dim is not a multiple of K
  // is refused when its symbols are bound. K from 2 to 2^20.
  std::map<std::string, int64_t> dim_multiples;
  // Input shapes fixed by position: each value other than -1 makes that dim of the input static
  // (a static model dim must equal it); -1 keeps the model's dim (e.g. the batch). A model server
  // whose config fixes an image size compiles for that size (see server/model_config.h).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Where input_shapes came from, for its error messages (e.g. "the config's dims"); does not
  // change the code.
  std::string input_shapes_origin;
  // Graph inputs turned into constants before import (specialisation on shape operands).
  std::map<std::string, HostTensor> bound_inputs;
  // Run onnx::checker on the model first.
  bool run_checker = true;
  // Accept sequence- and optional-typed graph inputs and outputs (structured_inputs describes the
  // inputs). Off by default: KServe requests carry tensors only, so a server refuses such models.
  bool allow_structured_io = false;
  // Structure of each sequence- or optional-typed graph input, by name.
  std::map<std::string, StructuredInput> structured_inputs;
  // When set, receives one entry per declared graph output (a successful import only; a JIT
  // cache hit imports nothing and leaves it untouched).
  std::vector<OutputLayout>* output_layout = nullptr;
  // When set, receives graph inputs that must be bound to constants (bound_inputs) because they
  // fix a sequence position, a loop's trip count or a condition that decides a sequence's
  // structure, when the import fails for that reason (FailedPrecondition).
  std::vector<std::string>* needs_binding = nullptr;
};

// The declared graph inputs (initializers excluded, in model order) and outputs of the model at
// `path`, with their kinds; the model is parsed but not checked or imported.
struct DeclaredModelIo {
  std::vector<DeclaredIo> inputs;
  std::vector<DeclaredIo> outputs;
};
absl::StatusOr<DeclaredModelIo> ReadDeclaredIo(const std::string& path);
// The same for a serialized model held in memory.
absl::StatusOr<DeclaredModelIo> ReadDeclaredIoBytes(const std::string& bytes);

// `shapes` (ImportOptions::input_shapes) without what the model at `path` (or in `bytes` when
// not empty) already declares: a value over a static dim becomes -1, and an input left with only
// -1 is dropped. So options that fix nothing the model leaves free compare (and hash into a JIT
// cache key) equal to options without them. Values that contradict the model, and ranks that
// differ, are kept for the importer to refuse.
absl::StatusOr<std::map<std::string, std::vector<int64_t>>> WithoutDeclaredDims(
    std::map<std::string, std::vector<int64_t>> shapes, const std::string& path,
    const std::string& bytes);

// Imports the model at `path` (external data resolved next to it). Errors name the file and the
// offending node; the graph is not yet shape-inferred.
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportOnnxFile(const std::string& path,
                                                          const ImportOptions& options = {});

// Imports a serialized ModelProto held in memory (external data not allowed).
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportOnnxBytes(const std::string& bytes,
                                                           const ImportOptions& options = {});

}  // namespace cuvil

#endif  // CUVIL_COMPILER_ONNX_IMPORTER_H_
