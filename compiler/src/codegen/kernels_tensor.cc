// Code generation for the tensor op family.
#include "codegen/kernel_context.h"

namespace cuvil::codegen {

void RegisterTensorKernels(KernelRegistry& r) {}

}  // namespace cuvil::codegen
