// Private: lowering of an optimised, memory-planned graph to native object code.
#ifndef CUVIL_COMPILER_SRC_CODEGEN_LOWER_H_
#define CUVIL_COMPILER_SRC_CODEGEN_LOWER_H_

#include <string>

#include "absl/status/statusor.h"
#include "cuvil/compiler/ir.h"
#include "cuvil/format/compiled_model.h"
#include "memory_plan.h"

namespace cuvil::codegen {

struct LowerOptions {
  int opt_level = 3;
  std::string emit_llvm_path;
  // Empty: the host (see CompileOptions::target_triple).
  std::string target_triple;
  std::string target_cpu;
  std::string target_features;
};

// Widest float vector, in bits, that generated kernels are shaped for: 512 when the host has
// AVX-512 (F, BW, DQ, VL), else 256. CUVIL_TARGET_VECTOR_BITS=256 forces the 256-bit (AVX2) path on
// an AVX-512 host so both stay tested; the environment is read on every call, the host once.
// Thread-safe.
int TargetVectorBits();

// How the kernels of the compile running on the calling thread are shaped, from its
// CompileOptions, while this lives: `vector_bits` holds TargetVectorBits() (0: the host's; a cross
// target's own, since a Cortex-M7 has no float vectors and NEON and WebAssembly SIMD 128-bit ones,
// and kernels shaped for the host's 512 would be scalarised into far more code), and
// `batch_invariant` sets BatchInvariantKernels(). Restores the previous shape when it ends; scopes
// nest. Thread-compatible (one per thread).
class ScopedKernelShape {
 public:
  ScopedKernelShape(int vector_bits, bool batch_invariant);
  ~ScopedKernelShape();
  ScopedKernelShape(const ScopedKernelShape&) = delete;
  ScopedKernelShape& operator=(const ScopedKernelShape&) = delete;

 private:
  int saved_bits_;
  bool saved_invariant_;
};

// Whether the compile on the calling thread generates batch-invariant kernels
// (CompileOptions::batch_invariant, through ScopedKernelShape). Thread-safe.
bool BatchInvariantKernels();

// Emits one kernel per node plus the entry point and function table, optimises them for the host
// CPU (or options.target_triple) and fills `model->object_code`, `model->kernels`, `model->cpu` and
// the codegen timings.
absl::Status LowerToObject(const ir::Graph& graph, const MemoryPlan& plan,
                           const LowerOptions& options, CompiledModel* model);

}  // namespace cuvil::codegen

#endif  // CUVIL_COMPILER_SRC_CODEGEN_LOWER_H_
