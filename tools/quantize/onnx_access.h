// Private to cuvil-quantize: reading attributes and float initializers of ONNX protos, and
// making initializers. Thread-safe (pure functions).
#ifndef CUVIL_TOOLS_QUANTIZE_ONNX_ACCESS_H_
#define CUVIL_TOOLS_QUANTIZE_ONNX_ACCESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "onnx/onnx_pb.h"

namespace cuvil::quantize {

// The attribute `name` of `node`, or null.
const onnx::AttributeProto* FindAttr(const onnx::NodeProto& node, const std::string& name);
// An INT / FLOAT attribute, or `fallback` when absent or of another type.
int64_t AttrInt(const onnx::NodeProto& node, const std::string& name, int64_t fallback);
float AttrFloat(const onnx::NodeProto& node, const std::string& name, float fallback);

// The float32 values of an initializer held inline; FailedPrecondition for another dtype or
// external data, InvalidArgument when its data does not match its dims.
absl::StatusOr<std::vector<float>> FloatValues(const onnx::TensorProto& t);

// An initializer named `name` holding `values` as raw data.
template <typename T>
onnx::TensorProto MakeTensor(const std::string& name, int32_t dtype, std::vector<int64_t> dims,
                             const std::vector<T>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(dtype);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(
      std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T)));
  return t;
}

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_ONNX_ACCESS_H_
