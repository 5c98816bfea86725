#include "cuvil/runtime/dtype.h"

#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

struct DTypeInfo {
  DType dtype;
  int size;
  const char* name;
  const char* kserve;
};

constexpr DTypeInfo kInfos[] = {
    {DType::kFloat32, 4, "float32", "FP32"},   {DType::kUInt8, 1, "uint8", "UINT8"},
    {DType::kInt8, 1, "int8", "INT8"},         {DType::kUInt16, 2, "uint16", "UINT16"},
    {DType::kInt16, 2, "int16", "INT16"},      {DType::kInt32, 4, "int32", "INT32"},
    {DType::kInt64, 8, "int64", "INT64"},      {DType::kBool, 1, "bool", "BOOL"},
    {DType::kFloat64, 8, "float64", "FP64"},   {DType::kUInt32, 4, "uint32", "UINT32"},
    {DType::kUInt64, 8, "uint64", "UINT64"},   {DType::kFloat16, 2, "float16", "FP16"},
    {DType::kBFloat16, 2, "bfloat16", "BF16"}, {DType::kString, 16, "string", "BYTES"},
};

const DTypeInfo* Find(DType d) {
  for (const auto& info : kInfos) {
    if (info.dtype == d) return &info;
  }
  return nullptr;
}

}  // namespace

int DTypeSize(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->size : 0;
}

const char* DTypeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->name : "undefined";
}

const char* DTypeKServeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->kserve : "INVALID";
}

absl::StatusOr<DType> DTypeFromKServeName(const std::string& name) {
  for (const auto& info : kInfos) {
    // Strings travel length-prefixed on the wire, not as the views compiled code reads.
    if (name == info.kserve && info.dtype != DType::kString) return info.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unsupported datatype '", name, "'"));
}

absl::StatusOr<DType> DTypeFromOnnx(int32_t onnx_type) {
  const DTypeInfo* info = Find(static_cast<DType>(onnx_type));
  if (info == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("ONNX element type ", onnx_type, " is not supported"));
  }
  return info->dtype;
}

}  // namespace cuvil
