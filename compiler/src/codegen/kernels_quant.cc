// Code generation for the quant op family.
#include "codegen/kernel_context.h"

namespace cuvil::codegen {

void RegisterQuantKernels(KernelRegistry& r) {}

}  // namespace cuvil::codegen
