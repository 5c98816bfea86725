// Private: code generation for the kernels that take or make string tensors (string_ops.h in the
// runtime holds their bodies).
#ifndef CUVIL_COMPILER_SRC_CODEGEN_KERNELS_STRING_H_
#define CUVIL_COMPILER_SRC_CODEGEN_KERNELS_STRING_H_

#include "absl/status/status.h"
#include "kernel_context.h"

namespace cuvil::codegen {

// Cast to or from STRING (either side a string tensor): formats or parses every element; a string
// that is not a number fails the execution with kEntryStringNotANumber.
absl::Status EmitStringCast(KernelContext& k);

}  // namespace cuvil::codegen

#endif  // CUVIL_COMPILER_SRC_CODEGEN_KERNELS_STRING_H_
