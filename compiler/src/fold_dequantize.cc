#include "fold_dequantize.h"

#include <cstdint>
#include <vector>

namespace cuvil {
namespace {

// Element i of an int8, uint8 or int32 tensor as int32.
int32_t IntAt(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt8:
      return t.data_as<int8_t>()[i];
    case DType::kUInt8:
      return t.data_as<uint8_t>()[i];
    default:
      return t.data_as<int32_t>()[i];
  }
}

bool IsFoldableData(DType d) {
  return d == DType::kInt8 || d == DType::kUInt8 || d == DType::kInt32;
}

}  // namespace

bool TryFoldDequantize(ir::Graph& graph, ir::Node& node) {
  if (node.op_type != "DequantizeLinear" || node.outputs.size() != 1 ||
      node.outputs[0] == nullptr || node.inputs.size() < 2) {
    return false;
  }
  const ir::Value* x = node.inputs[0];
  const ir::Value* scale = node.inputs[1];
  const ir::Value* zero = node.has_input(2) ? node.inputs[2] : nullptr;
  ir::Value* out = node.outputs[0];
  if (x == nullptr || !x->is_constant() || scale == nullptr || !scale->is_constant() ||
      (zero != nullptr && !zero->is_constant())) {
    return false;
  }
  const HostTensor& xt = *x->constant;
  const HostTensor& st = *scale->constant;
  if (!IsFoldableData(xt.dtype()) || st.dtype() != DType::kFloat32 ||
      out->type.dtype != DType::kFloat32 || !IsStaticShape(out->type.shape)) {
    return false;
  }
  if (zero != nullptr && (zero->constant->dtype() != xt.dtype() ||
                          zero->constant->num_elements() != st.num_elements())) {
    return false;
  }
  const int64_t n = xt.num_elements();
  if (n > kMaxDequantizeFoldElements || n != SymNumElements(out->type.shape).coef()) return false;
  // Per-channel: element i belongs to channel (i / inner) % channels along the canonical axis.
  const int64_t channels = st.num_elements();
  int64_t inner = 1;
  if (channels > 1) {
    const int64_t axis = node.attr_int("axis", -1);
    const std::vector<int64_t>& shape = xt.shape();
    if (axis < 0 || axis >= static_cast<int64_t>(shape.size()) || shape[axis] != channels) {
      return false;
    }
    for (size_t d = static_cast<size_t>(axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  } else if (channels != 1) {
    return false;
  }
  HostTensor y(DType::kFloat32, xt.shape());
  float* dst = y.data_as<float>();
  const float* s = st.data_as<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = channels > 1 ? (i / inner) % channels : 0;
    const int32_t zp = zero != nullptr ? IntAt(*zero->constant, c) : 0;
    // int32 subtraction wraps, as the generated code's does.
    const int32_t q =
        static_cast<int32_t>(static_cast<uint32_t>(IntAt(xt, i)) - static_cast<uint32_t>(zp));
    dst[i] = static_cast<float>(q) * s[c];
  }
  graph.MakeConstant(out, std::move(y));
  return true;
}

}  // namespace cuvil
