// Conversions between float32 and the 16-bit float storage types (IEEE float16 and bfloat16),
// both rounding to nearest even, for host code (tensor files, comparisons, printing). Generated
// kernels convert with the same rounding (KernelContext::Convert).
#ifndef CUVIL_RUNTIME_HALF_H_
#define CUVIL_RUNTIME_HALF_H_

#include <cstdint>

namespace cuvil {

// float16 bits to float32 (exact).
float HalfToFloat(uint16_t bits);
// float32 to float16 bits, rounding to nearest even; overflow gives infinity, NaN stays NaN.
uint16_t FloatToHalf(float v);
// bfloat16 bits to float32 (exact).
float BFloat16ToFloat(uint16_t bits);
// float32 to bfloat16 bits, rounding to nearest even; NaN stays a (quiet) NaN.
uint16_t FloatToBFloat16(float v);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_HALF_H_
