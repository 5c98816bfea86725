// Element types that Cuvil tensors and compiled code understand.
#ifndef CUVIL_RUNTIME_DTYPE_H_
#define CUVIL_RUNTIME_DTYPE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace cuvil {

// Values equal ONNX TensorProto.DataType so conversion is a cast.
enum class DType : int32_t {
  kUndefined = 0,
  kFloat32 = 1,
  kUInt8 = 2,
  kInt8 = 3,
  kUInt16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,  // Elements are CuvilString views (string_ops.h); no arithmetic.
  kBool = 9,
  kFloat16 = 10,
  kFloat64 = 11,
  kUInt32 = 12,
  kUInt64 = 13,
  kBFloat16 = 16,  // Storage only: kernels compute in float32 and round when storing.
};

// Size of one element in bytes; 0 for kUndefined.
int DTypeSize(DType dtype);

// ONNX-style lowercase name ("float32", "int64", "bool").
const char* DTypeName(DType dtype);

// KServe v2 datatype string ("FP32", "INT64", "BOOL").
const char* DTypeKServeName(DType dtype);

// Parses a KServe v2 datatype string; InvalidArgument for unknown names.
absl::StatusOr<DType> DTypeFromKServeName(const std::string& name);

// Converts an ONNX TensorProto.DataType; Unimplemented for types Cuvil does not support.
absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type);

inline bool IsFloat(DType d) {
  return d == DType::kFloat32 || d == DType::kFloat64 || d == DType::kFloat16 ||
         d == DType::kBFloat16;
}
// float16 and bfloat16: 16-bit storage types.
inline bool IsHalf(DType d) { return d == DType::kFloat16 || d == DType::kBFloat16; }
inline bool IsSigned(DType d) {
  return d == DType::kInt8 || d == DType::kInt16 || d == DType::kInt32 || d == DType::kInt64;
}
inline bool IsInteger(DType d) {
  return !IsFloat(d) && d != DType::kBool && d != DType::kString && d != DType::kUndefined;
}

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_DTYPE_H_
