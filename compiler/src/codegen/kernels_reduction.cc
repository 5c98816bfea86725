// Code generation for the reduction op family.
#include "codegen/kernel_context.h"

namespace cuvil::codegen {

void RegisterReductionKernels(KernelRegistry& r) {}

}  // namespace cuvil::codegen
