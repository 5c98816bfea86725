#include "window_dims.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace cuvil {

std::optional<WindowPad> SameWindowPad(const SymDim& in, int64_t stride, int64_t extent,
                                       bool upper) {
  const DimExpr& x = in.expr();
  auto out = DimCeilDiv(x, stride);
  auto reach = out ? DimMul(*out, stride) : std::nullopt;  // (out - 1) * stride + extent
  auto need = reach ? DimAdd(*reach, extent - stride) : std::nullopt;
  auto over = need ? DimSub(*need, x) : std::nullopt;
  auto total = over ? DimMax(*over, 0) : std::nullopt;
  auto half = total ? DimFloorDiv(*total, 2) : std::nullopt;
  if (!half) return std::nullopt;
  auto rest = DimSub(*total, *half);  // ceil(total / 2)
  if (!rest) return std::nullopt;
  return upper ? WindowPad{SymDim(*half), SymDim(*rest)} : WindowPad{SymDim(*rest), SymDim(*half)};
}

std::optional<SymDim> WindowOutputExtent(const SymDim& in, int64_t begin, int64_t end,
                                         int64_t extent, int64_t stride, bool ceil_mode) {
  const DimExpr& x = in.expr();
  auto span = DimAdd(x, begin + end - extent);
  if (!span) return std::nullopt;
  auto q = ceil_mode ? DimCeilDiv(*span, stride) : DimFloorDiv(*span, stride);
  // ceil(span / stride) never exceeds floor((in + begin - 1) / stride) when the two numerators
  // differ by extent - end - 1 >= stride - 1: no window can start past the input then.
  if (q && ceil_mode && extent - end - 1 < stride - 1) {
    auto start = DimAdd(x, begin - 1);
    auto last = start ? DimFloorDiv(*start, stride) : std::nullopt;
    q = last ? DimMin(*q, *last) : std::nullopt;
  }
  auto o = q ? DimAdd(*q, 1) : std::nullopt;
  if (!o) return std::nullopt;
  return SymDim(*o);
}

absl::StatusOr<std::vector<WindowPad>> NodeWindowPads(const ir::Node& n, const SymShape& in) {
  const size_t r = in.size();
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  std::vector<WindowPad> out(r);
  if (n.op_type == "ConvTranspose" && n.has_attr("output_shape")) {
    // total = stride * (in - 1) + output_padding + extent - output_shape, split as the ONNX
    // reference does (the odd pad at the end for SAME_UPPER, at the begin otherwise); the end
    // pad then gives back output_padding, as ops/shape_nn.cc stores static pads.
    const std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
    const std::vector<int64_t> strides = n.attr_ints("strides");
    const std::vector<int64_t> dilations = n.attr_ints("dilations");
    const std::vector<int64_t> output_shape = n.attr_ints("output_shape");
    const std::vector<int64_t> output_padding =
        n.attr_ints("output_padding", std::vector<int64_t>(r, 0));
    if (kernel.size() != r || strides.size() != r || dilations.size() != r ||
        output_shape.size() != r || output_padding.size() != r) {
      return absl::InternalError(absl::StrCat(n.Describe(), ": transposed window attributes of ",
                                              "the wrong rank for ", r, " spatial dims"));
    }
    for (size_t i = 0; i < r; ++i) {
      const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
      auto reach = DimMul(in[i].expr(), strides[i]);
      auto total = reach ? DimAdd(*reach, output_padding[i] + extent - strides[i] - output_shape[i])
                         : std::nullopt;
      auto half = total ? DimFloorDiv(*total, 2) : std::nullopt;
      auto rest = half ? DimSub(*total, *half) : std::nullopt;
      auto begin = auto_pad == "SAME_UPPER" ? half : rest;
      auto end = begin ? DimSub(*total, *begin) : std::nullopt;
      auto end_pad = end ? DimSub(*end, output_padding[i]) : std::nullopt;
      if (!end_pad) {
        return absl::InvalidArgumentError(absl::StrCat(n.Describe(), ": the pads of spatial dim ",
                                                       i, " are too large an expression"));
      }
      out[i] = {SymDim(*begin), SymDim(*end_pad)};
    }
    return out;
  }
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    const std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
    const std::vector<int64_t> strides = n.attr_ints("strides");
    const std::vector<int64_t> dilations = n.attr_ints("dilations");
    if (kernel.size() != r || strides.size() != r || dilations.size() != r) {
      return absl::InternalError(absl::StrCat(n.Describe(), ": window attributes of rank ",
                                              kernel.size(), " for ", r, " spatial dims"));
    }
    for (size_t i = 0; i < r; ++i) {
      // Shape inference checked these (positive, extent far inside int64).
      const int64_t extent = (kernel[i] - 1) * dilations[i] + 1;
      auto pad = SameWindowPad(in[i], strides[i], extent, auto_pad == "SAME_UPPER");
      if (!pad) {
        return absl::InvalidArgumentError(absl::StrCat(
            n.Describe(), ": the SAME padding of spatial dim ", i, " is too large an expression"));
      }
      out[i] = *pad;
    }
    return out;
  }
  const std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (pads.size() != 2 * r) {
    return absl::InternalError(
        absl::StrCat(n.Describe(), ": ", pads.size(), " pads for ", r, " spatial dims"));
  }
  for (size_t i = 0; i < r; ++i) out[i] = {SymDim::Const(pads[i]), SymDim::Const(pads[i + r])};
  return out;
}

}  // namespace cuvil
