// Private: registration of LLVM's back ends for cross compilation.
#ifndef CUVIL_COMPILER_SRC_CODEGEN_LLVM_TARGETS_H_
#define CUVIL_COMPILER_SRC_CODEGEN_LLVM_TARGETS_H_

namespace cuvil::codegen {

// Registers every LLVM back end (target info, target, MC layer, asm printer) once per process, so
// that TargetRegistry finds non-host triples (aarch64, wasm32). Thread-safe; cheap after the first
// call.
void RegisterAllLlvmTargets();

}  // namespace cuvil::codegen

#endif  // CUVIL_COMPILER_SRC_CODEGEN_LLVM_TARGETS_H_
