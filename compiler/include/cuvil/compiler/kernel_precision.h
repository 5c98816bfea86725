// The arithmetic precision a compiled kernel computes in, for operators' listings (ListModels'
// cuvil_precision, ListFunctions). Derived from the kernel's op type and signature, so it needs no
// field in JIT cache entries or snapshots.
#ifndef CUVIL_COMPILER_KERNEL_PRECISION_H_
#define CUVIL_COMPILER_KERNEL_PRECISION_H_

#include <string>
#include <vector>

#include "cuvil/format/compiled_model.h"

namespace cuvil {

// "int8" for kernels that multiply 8-bit integers with 32-bit accumulation (the fused QDQ conv,
// QLinear*, *Integer ops); "int4" for MatMulNBits (4-bit weights widened in registers); else
// "float64" when the signature has a float64 tensor, "float32"
// when it has any other floating tensor (float16 and bfloat16 are storage formats computed in
// float32; Quantize/DequantizeLinear count here); else the element type of the first output
// ("int64", "bool", ...), or "unknown" when the signature names none. Thread-safe (pure function).
std::string KernelPrecision(const KernelFunction& kernel);

// The kernels of a model counted by KernelPrecision, most frequent first (ties by name), rendered
// "int8:21 float32:7". Empty for a model without kernels. Thread-safe (pure function).
std::string PrecisionSummary(const std::vector<KernelFunction>& kernels);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_KERNEL_PRECISION_H_
