// Private: the broadcasting elementwise loop shared by every elementwise-shaped kernel.
#ifndef CUVIL_COMPILER_SRC_CODEGEN_ELEMENTWISE_H_
#define CUVIL_COMPILER_SRC_CODEGEN_ELEMENTWISE_H_

#include <functional>
#include <vector>

#include "codegen/kernel_context.h"

namespace cuvil::codegen {

// Computes out(0)[i] = scalar(loaded inputs at i) over out_shape(0), broadcasting every listed
// input. `inputs` are input indices; the callback receives their loaded values in that order.
using ScalarFn = std::function<llvm::Value*(KernelContext&, const std::vector<llvm::Value*>&)>;
void EmitBroadcastElementwise(KernelContext& k, const std::vector<size_t>& inputs,
                              const ScalarFn& scalar);

}  // namespace cuvil::codegen

#endif  // CUVIL_COMPILER_SRC_CODEGEN_ELEMENTWISE_H_
