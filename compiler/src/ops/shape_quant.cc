// Shape inference for the quant op family: (De)QuantizeLinear, DynamicQuantizeLinear and the
// integer / quantized-linear MatMul and Conv ops. Per-axis quantization parameters are checked
// against the dimension they index; Conv attributes are canonicalised to explicit form
// (kernel_shape, strides, dilations, pads with begin/end per spatial axis, group; no auto_pad).
#include <algorithm>

#include "cuvil/runtime/ukernels.h"
#include "infer_context.h"
#include "internal_attrs.h"

namespace cuvil::ir {
namespace {

bool IsQuantType(DType d) { return d == DType::kUInt8 || d == DType::kInt8; }

// A scale or zero point must hold one value or `channels` values (one per channel).
absl::Status CheckParam(InferContext& c, size_t i, const SymDim& channels, const char* role) {
  if (!c.has_input(i)) return absl::OkStatus();
  SymDim n = SymNumElements(c.in_shape(i));
  if (n == SymDim::Const(1) || (c.in_rank(i) == 1 && n == channels)) return absl::OkStatus();
  return c.Error(absl::StrCat(role, " has shape ", SymShapeToString(c.in_shape(i)),
                              ", expected one value or ", channels.ToString()));
}

// QuantizeLinear(x, scale, zero_point?) and DequantizeLinear(x, scale, zero_point?). Canonical
// form: `axis` is non-negative.
absl::Status QuantDequant(InferContext& c, bool quantize) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  int rank = c.in_rank(0);
  auto axis = c.Axis(c.node().attr_int("axis", 1), rank);
  bool per_axis = SymNumElements(c.in_shape(1)) != SymDim::Const(1);
  if (per_axis && !axis.ok()) return axis.status();
  if (per_axis) c.node().attrs["axis"] = int64_t{*axis};
  SymDim channels = per_axis ? c.in_shape(0)[*axis] : SymDim::Const(1);
  if (auto s = CheckParam(c, 1, channels, "scale"); !s.ok()) return s;
  if (auto s = CheckParam(c, 2, channels, "zero point"); !s.ok()) return s;
  if (!IsFloat(c.in_dtype(1))) return c.Error("scale must be a float tensor");
  if (quantize) {
    DType out = c.has_input(2) ? c.in_dtype(2) : DType::kUInt8;
    if (!IsQuantType(out))
      return c.Error(absl::StrCat("unsupported zero point dtype ", DTypeName(out)));
    c.SetOutput(0, out, c.in_shape(0));
  } else {
    if (!IsQuantType(c.in_dtype(0)) && c.in_dtype(0) != DType::kInt32) {
      return c.Error(absl::StrCat("unsupported input dtype ", DTypeName(c.in_dtype(0))));
    }
    c.SetOutput(0, c.in_dtype(1), c.in_shape(0));
  }
  return absl::OkStatus();
}

absl::Status DynamicQuantize(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  if (c.in_dtype(0) != DType::kFloat32) return c.Error("input must be float32");
  c.SetOutput(0, DType::kUInt8, c.in_shape(0));
  c.SetOutput(1, DType::kFloat32, {});
  c.SetOutput(2, DType::kUInt8, {});
  return absl::OkStatus();
}

// Numpy matmul shape of inputs a and b (rank-1 operands are promoted and the dim dropped).
absl::StatusOr<SymShape> MatMulShape(InferContext& c, size_t a, size_t b) {
  SymShape sa = c.in_shape(a), sb = c.in_shape(b);
  if (sa.empty() || sb.empty()) return c.Error("matmul operands must have rank >= 1");
  bool a_vec = sa.size() == 1, b_vec = sb.size() == 1;
  if (a_vec) sa.insert(sa.begin(), SymDim::Const(1));
  if (b_vec) sb.push_back(SymDim::Const(1));
  if (!(sa.back() == sb[sb.size() - 2])) {
    return c.Error(absl::StrCat("inner dims differ: ", SymShapeToString(c.in_shape(a)), " x ",
                                SymShapeToString(c.in_shape(b))));
  }
  auto batch =
      BroadcastShapes(SymShape(sa.begin(), sa.end() - 2), SymShape(sb.begin(), sb.end() - 2));
  if (!batch) return c.Error("matmul batch dims do not broadcast");
  SymShape out = *batch;
  if (!a_vec) out.push_back(sa[sa.size() - 2]);
  if (!b_vec) out.push_back(sb.back());
  return out;
}

// Rows of operand a (M) and columns of operand b (N), the extents per-row/column params index.
SymDim Rows(InferContext& c, size_t a) {
  return c.in_rank(a) == 1 ? SymDim::Const(1) : c.in_shape(a)[c.in_rank(a) - 2];
}
SymDim Cols(InferContext& c, size_t b) {
  return c.in_rank(b) == 1 ? SymDim::Const(1) : c.in_shape(b).back();
}

// MatMulInteger(A, B, a_zero_point?, b_zero_point?) -> int32.
absl::Status MatMulInteger(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 4); !s.ok()) return s;
  if (!IsQuantType(c.in_dtype(0)) || !IsQuantType(c.in_dtype(1)))
    return c.Error("inputs must be (u)int8");
  auto shape = MatMulShape(c, 0, 1);
  if (!shape.ok()) return shape.status();
  if (auto s = CheckParam(c, 2, Rows(c, 0), "a_zero_point"); !s.ok()) return s;
  if (auto s = CheckParam(c, 3, Cols(c, 1), "b_zero_point"); !s.ok()) return s;
  c.SetOutput(0, DType::kInt32, *shape);
  return absl::OkStatus();
}

// QLinearMatMul(a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) -> y_zp's dtype.
absl::Status QLinearMatMul(InferContext& c) {
  if (auto s = c.ExpectInputs(8, 8); !s.ok()) return s;
  if (!IsQuantType(c.in_dtype(0)) || !IsQuantType(c.in_dtype(3)) || !IsQuantType(c.in_dtype(7))) {
    return c.Error("a, b and y_zero_point must be (u)int8");
  }
  auto shape = MatMulShape(c, 0, 3);
  if (!shape.ok()) return shape.status();
  const std::pair<size_t, SymDim> params[] = {{1, Rows(c, 0)},       {2, Rows(c, 0)},
                                              {4, Cols(c, 3)},       {5, Cols(c, 3)},
                                              {6, SymDim::Const(1)}, {7, SymDim::Const(1)}};
  for (const auto& [i, channels] : params) {
    if (auto s = CheckParam(c, i, channels, "scale/zero point"); !s.ok()) return s;
  }
  c.SetOutput(0, c.in_dtype(7), *shape);
  return absl::OkStatus();
}

// Canonicalises the Conv attributes of a node with data input x and weight w and returns the
// output shape [N, M, spatial...]. Spatial dims must be static.
absl::StatusOr<SymShape> ConvShape(InferContext& c, size_t x, size_t w) {
  const SymShape& xs = c.in_shape(x);
  const SymShape& ws = c.in_shape(w);
  if (xs.size() < 3 || ws.size() != xs.size())
    return c.Error("x and w must have the same rank >= 3");
  size_t nsp = xs.size() - 2;
  Node& n = c.node();
  std::vector<int64_t> kernel, in;
  for (size_t i = 0; i < nsp; ++i) {
    if (!xs[2 + i].IsStatic() || !ws[2 + i].IsStatic())
      return c.Error("spatial dims must be static");
    kernel.push_back(ws[2 + i].coef());
    in.push_back(xs[2 + i].coef());
  }
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != kernel)
    return c.Error("kernel_shape differs from w");
  std::vector<int64_t> strides = n.attr_ints("strides", std::vector<int64_t>(nsp, 1));
  std::vector<int64_t> dilations = n.attr_ints("dilations", std::vector<int64_t>(nsp, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * nsp, 0));
  int64_t group = n.attr_int("group", 1);
  if (strides.size() != nsp || dilations.size() != nsp || pads.size() != 2 * nsp) {
    return c.Error("strides/dilations/pads do not match the spatial rank");
  }
  if (group < 1 || !xs[1].IsStatic() || !ws[0].IsStatic() ||
      CheckedMul(ws[1].coef(), group) != xs[1].coef() || ws[0].coef() % group != 0) {
    return c.Error("channel counts do not match group");
  }
  std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  SymShape out = {xs[0], ws[0]};
  // Attribute bound keeping the window formulas inside int64 (dims are below 2^40 already).
  constexpr int64_t kMaxAttr = int64_t{1} << 40;
  for (const std::vector<int64_t>* v : {&strides, &dilations, &pads}) {
    for (int64_t x : *v) {
      if (x > kMaxAttr || x < -kMaxAttr)
        return c.Error("strides/dilations/pads value is too large");
    }
  }
  for (size_t i = 0; i < nsp; ++i) {
    if (strides[i] < 1 || dilations[i] < 1)
      return c.Error("strides and dilations must be positive");
    if (kernel[i] < 1) return c.Error("w has an empty spatial dimension");
    auto span = CheckedMul(kernel[i] - 1, dilations[i]);
    if (!span || *span >= 4 * kMaxAttr) return c.Error("window (kernel * dilations) is too large");
    int64_t extent = *span + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t o = (in[i] + strides[i] - 1) / strides[i];
      int64_t total = std::max<int64_t>(0, (o - 1) * strides[i] + extent - in[i]);
      int64_t small = total / 2;
      pads[i] = auto_pad == "SAME_UPPER" ? small : total - small;
      pads[nsp + i] = total - pads[i];
    } else if (auto_pad == "VALID") {
      pads[i] = pads[nsp + i] = 0;
    } else if (auto_pad != "NOTSET") {
      return c.Error(absl::StrCat("unknown auto_pad ", auto_pad));
    }
    int64_t o = (in[i] + pads[i] + pads[nsp + i] - extent) / strides[i] + 1;
    if (o < 1) return c.Error("kernel is larger than the padded input");
    out.push_back(SymDim::Const(o));
  }
  n.attrs.erase("auto_pad");
  n.attrs["kernel_shape"] = kernel;
  n.attrs["strides"] = strides;
  n.attrs["dilations"] = dilations;
  n.attrs["pads"] = pads;
  n.attrs["group"] = group;
  return out;
}

// ConvInteger(x, w, x_zero_point?, w_zero_point?) -> int32.
absl::Status ConvInteger(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 4); !s.ok()) return s;
  if (!IsQuantType(c.in_dtype(0)) || !IsQuantType(c.in_dtype(1)))
    return c.Error("inputs must be (u)int8");
  auto shape = ConvShape(c, 0, 1);
  if (!shape.ok()) return shape.status();
  if (auto s = CheckParam(c, 2, SymDim::Const(1), "x_zero_point"); !s.ok()) return s;
  if (auto s = CheckParam(c, 3, c.in_shape(1)[0], "w_zero_point"); !s.ok()) return s;
  c.SetOutput(0, DType::kInt32, *shape);
  return absl::OkStatus();
}

// QLinearConv(x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, B?) -> y_zp's dtype.
absl::Status QLinearConv(InferContext& c) {
  if (auto s = c.ExpectInputs(8, 9); !s.ok()) return s;
  if (!IsQuantType(c.in_dtype(0)) || !IsQuantType(c.in_dtype(3)) || !IsQuantType(c.in_dtype(7))) {
    return c.Error("x, w and y_zero_point must be (u)int8");
  }
  auto shape = ConvShape(c, 0, 3);
  if (!shape.ok()) return shape.status();
  SymDim m = c.in_shape(3)[0];
  const std::pair<size_t, SymDim> params[] = {
      {1, SymDim::Const(1)}, {2, SymDim::Const(1)}, {4, m}, {5, m},
      {6, SymDim::Const(1)}, {7, SymDim::Const(1)}};
  for (const auto& [i, channels] : params) {
    if (auto s = CheckParam(c, i, channels, "scale/zero point"); !s.ok()) return s;
  }
  if (c.has_input(8) &&
      (c.in_dtype(8) != DType::kInt32 || c.in_rank(8) != 1 || !(c.in_shape(8)[0] == m))) {
    return c.Error("B must be int32 with one value per output channel");
  }
  c.SetOutput(0, c.in_dtype(7), *shape);
  return absl::OkStatus();
}

// The element type of a cuvil_uk_qout.
DType QOutDType(int64_t out_type) {
  switch (out_type) {
    case 1:
      return DType::kUInt8;
    case 2:
      return DType::kInt8;
    case 3:
      return DType::kInt32;
    default:
      return DType::kFloat32;
  }
}

// CuvilQConv(x, packed_w, comp, mult, bias, residual?): the integer convolution that the QDQ
// fusion (fuse_qdq.cc) makes of DequantizeLinear -> Conv (-> Add) (-> Relu/Clip)
// (-> QuantizeLinear); its attributes are the Conv's canonical ones plus out_channels, x_zero,
// out_type (cuvil_uk_qout) and the clamp lo/hi. Output: float32, uint8, int8 or int32 (ConvInteger)
// [N, M, OH, OW].
absl::Status QConvFused(InferContext& c) {
  if (auto s = c.ExpectInputs(5, 6); !s.ok()) return s;
  const Node& n = c.node();
  if (!IsQuantType(c.in_dtype(0)) || c.in_rank(0) != 4) return c.Error("x must be 4-D (u)int8");
  const std::vector<int64_t> k = n.attr_ints("kernel_shape"), st = n.attr_ints("strides"),
                             d = n.attr_ints("dilations"), pads = n.attr_ints("pads");
  if (k.size() != 2 || st.size() != 2 || d.size() != 2 || pads.size() != 4) {
    return c.Error("needs 2-D kernel_shape, strides, dilations and pads");
  }
  SymShape out = {c.in_shape(0)[0], SymDim::Const(n.attr_int(attr::kOutChannels, 0))};
  for (size_t j = 0; j < 2; ++j) {
    const SymDim& in = c.in_shape(0)[2 + j];
    if (!in.IsStatic()) return c.Error("spatial dims must be static");
    int64_t span = in.coef() + pads[j] + pads[2 + j] - d[j] * (k[j] - 1) - 1;
    if (span < 0 || st[j] <= 0) return c.Error("empty output");
    out.push_back(SymDim::Const(span / st[j] + 1));
  }
  const int64_t type = n.attr_int(attr::kOutType, 0);
  if (type == CUVIL_UK_QOUT_FLOAT_MEAN) {  // a GlobalAveragePool fused in: [N, M, 1, 1]
    if (c.num_inputs() > 5) return c.Error("a fused average takes no residual");
    out[2] = out[3] = SymDim::Const(1);
  }
  const DType dt = QOutDType(type);
  c.SetOutput(0, dt, out);
  return absl::OkStatus();
}

// CuvilQMatMul(x, packed_w, comp, mult, bias): the integer matrix product that the QDQ fusion
// (fuse_qdq.cc) makes of DequantizeLinear -> MatMul [-> Add] | Gemm (-> Relu/Clip)
// (-> QuantizeLinear); attributes out_columns, out_type (cuvil_uk_qout) and the clamp lo/hi.
// x: (u)int8 [M, K]. Output: float32, uint8, int8 or int32 (MatMulInteger) [M, out_columns].
absl::Status QMatMulFused(InferContext& c) {
  if (auto s = c.ExpectInputs(5, 5); !s.ok()) return s;
  const Node& n = c.node();
  if (!IsQuantType(c.in_dtype(0)) || c.in_rank(0) != 2 || !c.in_shape(0)[1].IsStatic()) {
    return c.Error("x must be 2-D (u)int8 with a static row length");
  }
  const int64_t cols = n.attr_int(attr::kOutColumns, 0);
  if (cols <= 0) return c.Error("out_columns must be positive");
  const int64_t type = n.attr_int(attr::kOutType, 0);
  const DType dt = QOutDType(type);
  c.SetOutput(0, dt, {c.in_shape(0)[0], SymDim::Const(cols)});
  return absl::OkStatus();
}

// MatMulNBits (com.microsoft; ONNX Runtime's block-quantized weights, bits = 4):
// (A [..., K] float32, B uint8 [N, blocks, block / 2], scales [N * blocks], zero_points?, g_idx?,
// bias? [N]) -> [..., N] float32. B, scales and zero points must be constants. Canonical form
// (attribute nbits_canonical): (A, B as stored, scales, offsets = -zero_point * scale per block,
// bias?), which cuvil_uk_matmul_nbits reads as they are.
absl::Status MatMulNBits(InferContext& c) {
  Node& n = c.node();
  const int64_t k_dim = n.attr_int("K", 0), n_dim = n.attr_int("N", 0);
  const int64_t bits = n.attr_int("bits", 4), block = n.attr_int("block_size", 0);
  if (bits != 4) return absl::UnimplementedError(c.Error("only bits = 4 is supported").message());
  if (k_dim <= 0 || n_dim <= 0 || k_dim > (int64_t{1} << 31) || n_dim > (int64_t{1} << 31)) {
    return c.Error("K and N must be positive");
  }
  if (block < 16 || block % 16 != 0 || block > (int64_t{1} << 20)) {
    return c.Error(absl::StrCat("block_size ", block, " is not a positive multiple of 16"));
  }
  const int64_t blocks = (k_dim + block - 1) / block;
  const bool canonical = n.has_attr(attr::kNbitsCanonical);
  if (auto s = c.ExpectInputs(canonical ? 4 : 3, canonical ? 5 : 6); !s.ok()) return s;
  if (c.in_dtype(0) != DType::kFloat32) return c.Error("A must be float32");
  const SymShape& a = c.in_shape(0);
  if (a.empty() || a.back() != SymDim::Const(k_dim)) {
    return c.Error(
        absl::StrCat("A has shape ", SymShapeToString(a), ", its last dim must be K = ", k_dim));
  }
  const size_t bias_at = canonical ? 4 : 5;
  if (c.has_input(bias_at) && (c.in_dtype(bias_at) != DType::kFloat32 ||
                               SymNumElements(c.in_shape(bias_at)) != SymDim::Const(n_dim))) {
    return c.Error("bias must be float32 with N values");
  }
  SymShape out(a.begin(), a.end() - 1);
  out.push_back(SymDim::Const(n_dim));
  if (canonical) {
    c.SetOutput(0, DType::kFloat32, out);
    return absl::OkStatus();
  }
  auto constant = [&](size_t i, DType dtype, int64_t count,
                      const char* role) -> absl::StatusOr<const HostTensor*> {
    if (!c.has_input(i) || !c.input(i)->is_constant()) {
      return absl::UnimplementedError(
          c.Error(absl::StrCat(role, " must be a constant (an initializer)")).message());
    }
    const HostTensor& t = *c.input(i)->constant;
    if (t.dtype() != dtype || t.num_elements() != count) {
      return c.Error(absl::StrCat(role, " is ", t.TypeString(), ", expected ", count, " ",
                                  DTypeName(dtype), " values"));
    }
    return &t;
  };
  auto q4 = constant(1, DType::kUInt8, n_dim * blocks * (block / 2), "B");
  if (!q4.ok()) return q4.status();
  auto scales = constant(2, DType::kFloat32, n_dim * blocks, "scales");
  if (!scales.ok()) return scales.status();
  if (c.has_input(4)) return absl::UnimplementedError(c.Error("g_idx is not supported").message());
  // Zero points: absent (8, the middle of 0..15), uint8 packed two per byte (blocks of one column
  // rounded up to a whole byte), or float32 one per block.
  std::vector<float> zero(static_cast<size_t>(n_dim * blocks), 8.0f);
  if (c.has_input(3)) {
    if (c.in_dtype(3) == DType::kUInt8) {
      const int64_t per_column = (blocks + 1) / 2;
      auto zp = constant(3, DType::kUInt8, n_dim * per_column, "zero_points");
      if (!zp.ok()) return zp.status();
      const uint8_t* z = (*zp)->data();
      for (int64_t col = 0; col < n_dim; ++col) {
        for (int64_t b = 0; b < blocks; ++b) {
          const uint8_t byte = z[col * per_column + b / 2];
          zero[col * blocks + b] = static_cast<float>(b % 2 == 0 ? byte & 0x0F : byte >> 4);
        }
      }
    } else {
      auto zp = constant(3, DType::kFloat32, n_dim * blocks, "zero_points");
      if (!zp.ok()) return zp.status();
      std::copy((*zp)->data_as<float>(), (*zp)->data_as<float>() + n_dim * blocks, zero.begin());
    }
  }
  std::vector<float> offsets(static_cast<size_t>(n_dim * blocks));
  const float* scale = (*scales)->data_as<float>();
  for (int64_t i = 0; i < n_dim * blocks; ++i) offsets[i] = -zero[i] * scale[i];
  // Packed once here into the column groups the microkernel reads (ukernels.h).
  const int64_t groups = (n_dim + CUVIL_UK_NBITS_GROUP - 1) / CUVIL_UK_NBITS_GROUP;
  HostTensor q4_packed(DType::kUInt8, {cuvil_uk_nbits_packed_bytes(k_dim, n_dim, block)});
  HostTensor scale_packed(DType::kFloat32, {groups * blocks * CUVIL_UK_NBITS_GROUP});
  HostTensor offset_packed(DType::kFloat32, {groups * blocks * CUVIL_UK_NBITS_GROUP});
  cuvil_uk_nbits_pack((*q4)->data(), scale, offsets.data(), k_dim, n_dim, block, q4_packed.data(),
                      scale_packed.data_as<float>(), offset_packed.data_as<float>());
  auto constant_value = [&](const std::string& name, HostTensor t) {
    Value* v = c.graph().NewValue(name);
    c.graph().MakeConstant(v, std::move(t));
    return v;
  };
  Value* bias = c.has_input(5) ? c.input(5) : nullptr;
  n.inputs = {c.input(0), constant_value(c.input(1)->name + ".packed", std::move(q4_packed)),
              constant_value(c.input(2)->name + ".packed", std::move(scale_packed)),
              constant_value(c.input(2)->name + ".offsets", std::move(offset_packed))};
  if (bias != nullptr) n.inputs.push_back(bias);
  n.attrs[attr::kNbitsCanonical] = int64_t{1};
  c.SetOutput(0, DType::kFloat32, out);
  return absl::OkStatus();
}

absl::Status Quantize(InferContext& c) { return QuantDequant(c, /*quantize=*/true); }
absl::Status Dequantize(InferContext& c) { return QuantDequant(c, /*quantize=*/false); }

}  // namespace

void RegisterQuantShapes(OpTable& r) {
  r.DefineShape("QuantizeLinear", Quantize).Batch(BatchClass::kUnary);
  r.DefineShape("DequantizeLinear", Dequantize).Batch(BatchClass::kUnary);
  r.DefineShape("DynamicQuantizeLinear", DynamicQuantize).Batch(BatchClass::kMixes);
  r.DefineShape("MatMulInteger", MatMulInteger).Batch(BatchClass::kMatMul);
  r.DefineShape("QLinearMatMul", QLinearMatMul).Batch(BatchClass::kQLinearMatMul);
  r.DefineShape("ConvInteger", ConvInteger).Batch(BatchClass::kBatchLeading);
  r.DefineShape("QLinearConv", QLinearConv).Batch(BatchClass::kBatchLeading);
  r.DefineShape("CuvilQConv", QConvFused)
      .Batch(BatchClass::kQConv)
      .Domain(OpDomain::kInternal)
      .Attributes({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"});
  r.DefineShape("CuvilQMatMul", QMatMulFused).Batch(BatchClass::kMixes).Domain(OpDomain::kInternal);
  r.DefineShape("MatMulNBits", MatMulNBits)
      .Batch(BatchClass::kMixes)
      .Domain(OpDomain::kMicrosoft)
      .Attributes({"K", "N", "bits", "block_size", "accuracy_level"});
}

}  // namespace cuvil::ir
