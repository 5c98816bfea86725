// Private: the C++ element type behind a numeric DType, for runtime functions that take a dtype
// code from generated code (Unique, Cast to and from STRING).
#ifndef CUVIL_RUNTIME_SRC_NUMERIC_DTYPE_H_
#define CUVIL_RUNTIME_SRC_NUMERIC_DTYPE_H_

#include <cstdint>

#include "cuvil/runtime/dtype.h"

namespace cuvil {

// Returns f(T{}) where T is d's element type: float, double, every integer type, and uint8_t for
// bool; `otherwise` for any other dtype (float16, bfloat16, string, undefined).
template <typename R, typename F>
R VisitNumericDType(DType d, R otherwise, F&& f) {
  switch (d) {
    case DType::kFloat32:
      return f(float{});
    case DType::kFloat64:
      return f(double{});
    case DType::kInt8:
      return f(int8_t{});
    case DType::kInt16:
      return f(int16_t{});
    case DType::kInt32:
      return f(int32_t{});
    case DType::kInt64:
      return f(int64_t{});
    case DType::kUInt8:
    case DType::kBool:
      return f(uint8_t{});
    case DType::kUInt16:
      return f(uint16_t{});
    case DType::kUInt32:
      return f(uint32_t{});
    case DType::kUInt64:
      return f(uint64_t{});
    default:
      return otherwise;
  }
}

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_SRC_NUMERIC_DTYPE_H_
