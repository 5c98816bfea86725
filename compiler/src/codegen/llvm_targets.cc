#include "codegen/llvm_targets.h"

#include <mutex>

#include "llvm/Support/TargetSelect.h"

namespace cuvil::codegen {

void RegisterAllLlvmTargets() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeAllTargetInfos();
    llvm::InitializeAllTargets();
    llvm::InitializeAllTargetMCs();
    llvm::InitializeAllAsmPrinters();
  });
}

}  // namespace cuvil::codegen
