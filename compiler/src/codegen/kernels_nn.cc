// Code generation for the nn op family.
#include "codegen/kernel_context.h"

namespace cuvil::codegen {

void RegisterNnKernels(KernelRegistry& r) {}

}  // namespace cuvil::codegen
