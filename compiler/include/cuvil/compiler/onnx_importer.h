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

struct ImportOptions {
  // Symbolic dimensions replaced by a fixed value (like ONNX Runtime's free dimension overrides).
  std::map<std::string, int64_t> dim_overrides;
  // Input shapes fixed entirely (every symbolic dim of that input becomes static).
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // Graph inputs turned into constants before import (specialisation on shape operands).
  std::map<std::string, HostTensor> bound_inputs;
  // Run onnx::checker on the model first.
  bool run_checker = true;
};

// Imports the model at `path` (external data resolved next to it). Errors name the file and the
// offending node; the graph is not yet shape-inferred.
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportOnnxFile(const std::string& path,
                                                          const ImportOptions& options = {});

// Imports a serialized ModelProto held in memory (external data not allowed).
absl::StatusOr<std::unique_ptr<ir::Graph>> ImportOnnxBytes(const std::string& bytes,
                                                           const ImportOptions& options = {});

}  // namespace cuvil

#endif  // CUVIL_COMPILER_ONNX_IMPORTER_H_
