#include "onnx_access.h"

#include <cstring>
#include <limits>

namespace cuvil::quantize {

const onnx::AttributeProto* FindAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t AttrInt(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const auto* a = FindAttr(node, name);
  return a != nullptr && a->type() == onnx::AttributeProto::INT ? a->i() : fallback;
}

float AttrFloat(const onnx::NodeProto& node, const std::string& name, float fallback) {
  const auto* a = FindAttr(node, name);
  return a != nullptr && a->type() == onnx::AttributeProto::FLOAT ? a->f() : fallback;
}

absl::StatusOr<std::vector<float>> FloatValues(const onnx::TensorProto& t) {
  if (t.data_type() != onnx::TensorProto::FLOAT) {
    return absl::FailedPreconditionError("not float32");
  }
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    return absl::FailedPreconditionError("external data");
  }
  int64_t count = 1;
  for (int64_t d : t.dims()) {
    if (d < 0 || (d > 0 && count > std::numeric_limits<int64_t>::max() / d)) {
      return absl::InvalidArgumentError("dims overflow");
    }
    count *= d;
  }
  std::vector<float> v(static_cast<size_t>(count));
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != v.size() * sizeof(float)) {
      return absl::InvalidArgumentError("raw_data size does not match dims");
    }
    std::memcpy(v.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.float_data_size() != count) {
      return absl::InvalidArgumentError("float_data size does not match dims");
    }
    for (int64_t i = 0; i < count; ++i) v[i] = t.float_data(static_cast<int>(i));
  }
  return v;
}

}  // namespace cuvil::quantize
