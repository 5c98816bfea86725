// The compiler driver: ONNX → IR → passes → LLVM IR → native object code.
#ifndef CUVIL_COMPILER_COMPILER_H_
#define CUVIL_COMPILER_COMPILER_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/compiler/onnx_importer.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil {

struct CompileOptions {
  ImportOptions import;
  // When set, the optimised LLVM IR is written here.
  std::string emit_llvm_path;
  // LLVM optimisation level 0..3.
  int opt_level = 3;
  // The machine the code is for: an LLVM target triple ("aarch64-linux-gnu"), CPU and feature
  // string. Empty triple: the host CPU with its features (what the JIT engine needs; code for
  // another triple can only be written out, e.g. as an ahead-of-time library). An empty CPU means
  // "generic".
  std::string target_triple;
  std::string target_cpu;
  std::string target_features;
  // Widest float vector, in bits, the kernels are shaped for (weight panels, vector loops): 0
  // for the host's (512 with AVX-512, else 256); a cross target sets its own (ConfigureAotTarget:
  // 128 for NEON and WebAssembly SIMD, 64 for a Cortex-M7's scalar register pairs, 32 for scalar
  // WebAssembly).
  int vector_bits = 0;
  // Batch-invariant kernels: every output element is computed in the same order whatever the
  // batch (or the rows a thread takes), so a row's bits do not depend on the requests it is
  // batched with. Costs the matrix products' latency hiding for few-row tiles (a batch-1 GEMV
  // sums K in one chain instead of up to four). The server sets it for models with
  // sequence_batching (their state must not depend on the batch) and parameter
  // cuvil_batch_invariant.
  bool batch_invariant = false;
  // Filled with graph inputs that must be bound to constants (they determine shapes) when
  // compilation fails for that reason.
  std::vector<std::string>* needs_binding = nullptr;
  // QDQ Convs run as integer kernels (fuse_qdq.cc); false keeps them in float32 (weights
  // dequantised at compile time), the path QDQ models took before.
  bool integer_qdq = true;
  // Debugging: the graph is written to stderr as text after the graph pass of this name (see
  // docs/architecture.md for the list; cuvilc --print-after). Not part of the cache key.
  std::string print_after_pass;
};

// Runs shape inference, constant folding and simplification in place. Errors name the node.
// `integer_qdq`: see CompileOptions.
absl::Status OptimizeGraph(ir::Graph& graph, std::vector<std::string>* needs_binding = nullptr,
                           bool integer_qdq = true);

// Ops the graph uses that Cuvil cannot compile, as "OpType 'node' (opset N)" strings.
std::vector<std::string> UnsupportedOps(const ir::Graph& graph);

// Compiles an imported graph (consumed: passes rewrite it).
absl::StatusOr<CompiledModel> CompileGraph(ir::Graph& graph, const CompileOptions& options = {});

// A model imported, optimised and memory-planned once, then lowered to code at any optimisation
// level: the part of a compile that the tiers of one model share (import, graph passes, weight
// folding and packing, the weights blob) runs once, and each tier only generates code.
// Thread-safe: immutable once made; Lower may be called concurrently.
class PreparedModel {
 public:
  struct Impl;
  explicit PreparedModel(std::unique_ptr<Impl> impl);
  ~PreparedModel();
  PreparedModel(const PreparedModel&) = delete;
  PreparedModel& operator=(const PreparedModel&) = delete;

  // Generates code at options.opt_level (and writes options.emit_llvm_path when set; the import
  // options and needs_binding applied to the preparation and are ignored here). The result shares
  // this model's weights blob (no copy) and its timings list the preparation's phases, then this
  // lowering's. Errors are those CompileOnnxFile reports for the same phase.
  absl::StatusOr<CompiledModel> Lower(const CompileOptions& options) const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Imports, optimises and plans the ONNX model at `path` (errors as CompileOnnxFile's).
absl::StatusOr<std::shared_ptr<const PreparedModel>> PrepareOnnxFile(
    const std::string& path, const CompileOptions& options = {});

// PrepareOnnxFile for a serialized ONNX model held in memory.
absl::StatusOr<std::shared_ptr<const PreparedModel>> PrepareOnnxBytes(
    const std::string& bytes, const CompileOptions& options = {});

// Number of successful CompileGraph calls in this process (thread-safe); lets tests and
// statistics prove that serving any batch size never recompiles.
uint64_t TotalCompilations();

// The code generator's target choices beyond the host CPU's features (for example a vector width
// forced with CUVIL_TARGET_VECTOR_BITS), as a stable string: code compiled under one value must
// not be reused under another, so the JIT cache key includes it. Thread-safe.
std::string CodegenTargetKey();

// Imports and compiles the ONNX model at `path`.
absl::StatusOr<CompiledModel> CompileOnnxFile(const std::string& path,
                                              const CompileOptions& options = {});

// Imports and compiles a serialized ONNX model held in memory.
absl::StatusOr<CompiledModel> CompileOnnxBytes(const std::string& bytes,
                                               const CompileOptions& options = {});

}  // namespace cuvil

#endif  // CUVIL_COMPILER_COMPILER_H_
