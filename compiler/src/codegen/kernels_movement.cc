// Code generation for the movement op family.
#include "codegen/kernel_context.h"

namespace cuvil::codegen {

void RegisterMovementKernels(KernelRegistry& r) {}

}  // namespace cuvil::codegen
