// Shape inference for the nn op family: Conv, ConvTranspose and the pooling ops.
//
// Every windowed op is canonicalised to explicit per-dimension attributes, so code generation
// never sees auto_pad, output_shape or output_padding: `kernel_shape`, `strides`, `dilations` and
// `pads` ([begin..., end...]) are always present and auto_pad is removed, except where pads
// depend on a symbolic input size: a Conv or pool keeps auto_pad SAME_UPPER / SAME_LOWER, a
// ConvTranspose its output_shape (with output_padding and auto_pad), and NodeWindowPads gives
// the pads as expressions. Spatial dims may be symbolic: output
// extents are then dim expressions (floor or ceil division of the padded span by the stride).
#include "infer_context.h"
#include "window_dims.h"

namespace cuvil::ir {
namespace {

using Ints = std::vector<int64_t>;

// Bound on window attributes (kernel taps, strides, dilations, |pads|, output_shape) and, times
// 4, on a window's extent: spatial dims are below 2^40 (validated tensors), so with these bounds
// every window formula below stays far inside int64.
constexpr int64_t kMaxWindowAttr = int64_t{1} << 40;

// (kernel - 1) * dilation + 1, the span of one window; nullopt when it exceeds 4 * kMaxWindowAttr
// (no input, even padded, is that large).
std::optional<int64_t> WindowExtent(int64_t kernel, int64_t dilation) {
  auto span = CheckedMul(kernel - 1, dilation);
  if (!span || *span >= 4 * kMaxWindowAttr) return std::nullopt;
  return *span + 1;
}

// Checks that every value of `v` has magnitude at most kMaxWindowAttr.
absl::Status CheckWindowAttr(InferContext& c, const char* name, const Ints& v) {
  for (int64_t x : v) {
    if (x > kMaxWindowAttr || x < -kMaxWindowAttr) {
      return c.Error(absl::StrCat(name, " value ", x, " is too large"));
    }
  }
  return absl::OkStatus();
}

// Python-style floor division (pads may be negative for ConvTranspose).
int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

// The spatial dims (everything after N and C) of input i, static or symbolic.
absl::StatusOr<SymShape> SpatialDims(InferContext& c, size_t i) {
  const SymShape& s = c.in_shape(i);
  if (s.size() < 3) return c.Error("expects an input of rank >= 3 (N, C, spatial...)");
  return SymShape(s.begin() + 2, s.end());
}

// Reads an optional per-spatial-dimension attribute, checking its length.
absl::StatusOr<Ints> SpatialAttr(InferContext& c, const char* name, size_t rank, int64_t fallback) {
  Ints v = c.node().attr_ints(name, Ints(rank, fallback));
  if (v.size() != rank) return c.Error(absl::StrCat(name, " must have ", rank, " values"));
  return v;
}

// Stores the canonical window attributes on the node.
void SetWindowAttrs(Node& n, const Ints& kernel, const Ints& strides, const Ints& dilations,
                    const Ints& pads) {
  n.attrs["kernel_shape"] = kernel;
  n.attrs["strides"] = strides;
  n.attrs["dilations"] = dilations;
  n.attrs["pads"] = pads;
  n.attrs.erase("auto_pad");
}

// Output spatial dims of a sliding window (Conv and pools); canonicalises the node's attributes.
absl::StatusOr<SymShape> WindowOutput(InferContext& c, const SymShape& in, const Ints& kernel) {
  size_t r = in.size();
  if (kernel.size() != r) return c.Error(absl::StrCat("kernel_shape must have ", r, " values"));
  auto strides = SpatialAttr(c, "strides", r, 1);
  if (!strides.ok()) return strides.status();
  auto dilations = SpatialAttr(c, "dilations", r, 1);
  if (!dilations.ok()) return dilations.status();
  auto pads = SpatialAttr(c, "pads", 2 * r, 0);
  if (!pads.ok()) return pads.status();
  std::string auto_pad = c.node().attr_string("auto_pad", "NOTSET");
  bool ceil_mode = c.node().attr_int("ceil_mode", 0) != 0;
  for (const auto& [name, v] : {std::pair<const char*, const Ints*>{"kernel_shape", &kernel},
                                {"strides", &*strides},
                                {"dilations", &*dilations},
                                {"pads", &*pads}}) {
    if (auto st = CheckWindowAttr(c, name, *v); !st.ok()) return st;
  }
  SymShape out(r);
  bool symbolic_same = false;
  for (size_t i = 0; i < r; ++i) {
    int64_t s = (*strides)[i];
    if (s <= 0 || (*dilations)[i] <= 0 || kernel[i] <= 0) {
      return c.Error("kernel_shape, strides and dilations must be positive");
    }
    // Operands are below 2^40 (dims are validated), so only the product can overflow.
    auto checked_extent = WindowExtent(kernel[i], (*dilations)[i]);
    if (!checked_extent) return c.Error("window (kernel_shape * dilations) is too large");
    int64_t extent = *checked_extent;
    int64_t& begin = (*pads)[i];
    int64_t& end = (*pads)[i + r];
    if (!in[i].IsStatic()) {
      // Output extents as expressions in the input's symbols. Requests that make one negative
      // are refused before the code runs (CompiledModel::dim_constraints).
      std::optional<SymDim> o;
      if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
        // ceil(in / s); the pads depend on in mod s, so the node keeps auto_pad (below) and
        // code generation takes them from NodeWindowPads.
        auto up = SymAdd(in[i], SymDim::Const(s - 1));
        o = up ? SymFloorDiv(*up, SymDim::Const(s)) : std::nullopt;
        begin = end = 0;
      } else if (auto_pad == "VALID" || auto_pad == "NOTSET" || auto_pad.empty()) {
        if (auto_pad == "VALID") begin = end = 0;
        if (ceil_mode && end >= extent) {
          return absl::UnimplementedError(absl::StrCat(
              c.node().Describe(),
              ": ceil_mode over a symbolic spatial dim needs its end pad smaller than the window"));
        }
        o = WindowOutputExtent(in[i], begin, end, extent, s, ceil_mode);
      } else {
        return c.Error(absl::StrCat("unknown auto_pad '", auto_pad, "'"));
      }
      if (!o) return c.Error("window output extent is too large an expression");
      out[i] = *o;
      symbolic_same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
      continue;
    }
    const int64_t in_i = *in[i].AsConstant();
    int64_t out_i = 0;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out_i = CeilDiv(in_i, s);
      int64_t total = std::max<int64_t>(0, (out_i - 1) * s + extent - in_i);
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      end = total - begin;
    } else if (auto_pad == "VALID") {
      begin = end = 0;
      out_i = FloorDiv(in_i - extent, s) + 1;
    } else if (auto_pad == "NOTSET" || auto_pad.empty()) {
      int64_t span = in_i + begin + end - extent;
      out_i = (ceil_mode ? CeilDiv(span, s) : FloorDiv(span, s)) + 1;
      // A ceil_mode window must start inside the input or its begin padding.
      if (ceil_mode && (out_i - 1) * s >= in_i + begin) --out_i;
    } else {
      return c.Error(absl::StrCat("unknown auto_pad '", auto_pad, "'"));
    }
    if (out_i <= 0) return c.Error("window is larger than the padded input");
    out[i] = SymDim::Const(out_i);
  }
  SetWindowAttrs(c.node(), kernel, *strides, *dilations, *pads);
  // Pads that depend on a symbolic input size stay SAME_* (static dims' pads are in `pads` too).
  if (symbolic_same) c.node().attrs["auto_pad"] = auto_pad;
  // ceil_mode only applies to explicit pads; drop it so re-inference gives the same shape.
  if (auto_pad != "NOTSET" && !auto_pad.empty()) c.node().attrs.erase("ceil_mode");
  return out;
}

SymShape WithSpatial(SymDim n, SymDim ch, const SymShape& spatial) {
  SymShape s = {n, ch};
  s.insert(s.end(), spatial.begin(), spatial.end());
  return s;
}

SymShape WithSpatial(SymDim n, SymDim ch, const Ints& spatial) {
  SymShape s = {n, ch};
  for (int64_t d : spatial) s.push_back(SymDim::Const(d));
  return s;
}

// The static dims of W (Conv/ConvTranspose weights).
absl::StatusOr<Ints> WeightDims(InferContext& c, size_t rank) {
  const SymShape& w = c.in_shape(1);
  if (w.size() != rank) return c.Error("X and W ranks differ");
  Ints out;
  for (const SymDim& d : w) {
    if (!d.IsStatic()) return c.Error("W must have a static shape");
    out.push_back(d.coef());
  }
  return out;
}

absl::Status CheckConvInputs(InferContext& c, int64_t out_channels) {
  if (!IsFloat(c.in_dtype(0)) || c.in_dtype(1) != c.in_dtype(0)) {
    return c.Error("X and W must share a float dtype");
  }
  if (c.has_input(2) && !(c.in_shape(2) == SymShape{SymDim::Const(out_channels)})) {
    return c.Error("B must have shape [M]");
  }
  return absl::OkStatus();
}

absl::Status Conv(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  auto in = SpatialDims(c, 0);
  if (!in.ok()) return in.status();
  auto w = WeightDims(c, in->size() + 2);
  if (!w.ok()) return w.status();
  const SymDim& ch = c.in_shape(0)[1];
  int64_t group = c.node().attr_int("group", 1);
  if (!ch.IsStatic() || group <= 0 || CheckedMul((*w)[1], group) != ch.coef() ||
      (*w)[0] % group != 0) {
    return c.Error(absl::StrCat("channels of X (", SymShapeToString(c.in_shape(0)), "), W (",
                                SymShapeToString(c.in_shape(1)), ") and group (", group,
                                ") do not match"));
  }
  if (auto s = CheckConvInputs(c, (*w)[0]); !s.ok()) return s;
  Ints kernel = c.node().attr_ints("kernel_shape", Ints(w->begin() + 2, w->end()));
  if (kernel != Ints(w->begin() + 2, w->end())) return c.Error("kernel_shape does not match W");
  auto out = WindowOutput(c, *in, kernel);
  if (!out.ok()) return out.status();
  c.node().attrs["group"] = group;
  c.SetOutput(0, c.in_dtype(0), WithSpatial(c.in_shape(0)[0], SymDim::Const((*w)[0]), *out));
  return absl::OkStatus();
}

// ConvTranspose: output_shape / auto_pad / output_padding all fold into (possibly negative) pads
// so that out = stride * (in - 1) + extent - pad_begin - pad_end.
absl::Status ConvTranspose(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  auto in = SpatialDims(c, 0);
  if (!in.ok()) return in.status();
  size_t r = in->size();
  auto w = WeightDims(c, r + 2);
  if (!w.ok()) return w.status();
  const SymDim& ch = c.in_shape(0)[1];
  int64_t group = c.node().attr_int("group", 1);
  if (!ch.IsStatic() || group <= 0 || ch.coef() != (*w)[0] || (*w)[0] % group != 0) {
    return c.Error("channels of X, W and group do not match");
  }
  auto checked_channels = CheckedMul((*w)[1], group);
  if (!checked_channels) return c.Error("group is too large");
  int64_t out_channels = *checked_channels;
  if (auto s = CheckConvInputs(c, out_channels); !s.ok()) return s;
  Ints kernel = c.node().attr_ints("kernel_shape", Ints(w->begin() + 2, w->end()));
  if (kernel != Ints(w->begin() + 2, w->end())) return c.Error("kernel_shape does not match W");
  auto strides = SpatialAttr(c, "strides", r, 1);
  if (!strides.ok()) return strides.status();
  auto dilations = SpatialAttr(c, "dilations", r, 1);
  if (!dilations.ok()) return dilations.status();
  auto pads = SpatialAttr(c, "pads", 2 * r, 0);
  if (!pads.ok()) return pads.status();
  auto output_padding = SpatialAttr(c, "output_padding", r, 0);
  if (!output_padding.ok()) return output_padding.status();
  Ints output_shape = c.node().attr_ints("output_shape");
  if (output_shape.size() == r + 2)
    output_shape.erase(output_shape.begin(), output_shape.begin() + 2);
  if (!output_shape.empty() && output_shape.size() != r) {
    return c.Error(absl::StrCat("output_shape must have ", r, " values"));
  }
  std::string auto_pad = c.node().attr_string("auto_pad", "NOTSET");
  bool same = auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER";
  for (const auto& [name, v] : {std::pair<const char*, const Ints*>{"strides", &*strides},
                                {"dilations", &*dilations},
                                {"pads", &*pads},
                                {"output_padding", &*output_padding},
                                {"output_shape", &output_shape}}) {
    if (auto st = CheckWindowAttr(c, name, *v); !st.ok()) return st;
  }
  SymShape out(r);
  bool symbolic_output_shape = false;
  for (size_t i = 0; i < r; ++i) {
    if ((*strides)[i] <= 0 || (*dilations)[i] <= 0 || kernel[i] <= 0) {
      return c.Error("kernel_shape, strides and dilations must be positive");
    }
    auto checked_extent = WindowExtent(kernel[i], (*dilations)[i]);
    if (!in->at(i).IsStatic()) {
      // stride * (in - 1) + output_padding + extent - begin - end; SAME makes it in * stride,
      // whose pads (output_padding + extent - stride in all) do not depend on in.
      if (!checked_extent) return c.Error("kernel_shape * dilations is too large");
      int64_t& begin = (*pads)[i];
      int64_t& end = (*pads)[i + r];
      if (!output_shape.empty()) {
        // A fixed output from a symbolic input: the pads depend on the input size, so the node
        // keeps output_shape and output_padding (below) and NodeWindowPads computes them.
        if (output_shape[i] <= 0) return c.Error("output size is not positive");
        out[i] = SymDim::Const(output_shape[i]);
        begin = end = 0;
        symbolic_output_shape = true;
        continue;
      }
      if (same) {
        const int64_t total = (*output_padding)[i] + *checked_extent - (*strides)[i];
        begin = auto_pad == "SAME_UPPER" ? FloorDiv(total, 2) : total - FloorDiv(total, 2);
        end = total - begin;
      }
      auto reach =
          SymSub(SymMul(in->at(i), SymDim::Const((*strides)[i])), SymDim::Const((*strides)[i]));
      auto o = reach ? SymAdd(*reach,
                              SymDim::Const((*output_padding)[i] + *checked_extent - begin - end))
                     : std::nullopt;
      if (!o) return c.Error("output extent is too large an expression");
      out[i] = *o;
      end -= (*output_padding)[i];
      continue;
    }
    const int64_t in_i = *in->at(i).AsConstant();
    // stride * (in - 1) is the one product of two unbounded-by-each-other 2^40 values.
    auto reach = CheckedMul((*strides)[i], in_i - 1);
    if (!checked_extent || !reach || *reach >= 4 * kMaxWindowAttr) {
      return c.Error("output extent (strides * input + kernel_shape * dilations) is too large");
    }
    int64_t extent = *checked_extent;
    int64_t full = *reach + (*output_padding)[i] + extent;
    int64_t& begin = (*pads)[i];
    int64_t& end = (*pads)[i + r];
    int64_t out_i = 0;
    if (!output_shape.empty() || same) {
      out_i = output_shape.empty() ? in_i * (*strides)[i] : output_shape[i];
      // Split as the ONNX reference does: SAME_UPPER puts the extra pad at the end.
      int64_t total = full - out_i;
      begin = auto_pad == "SAME_UPPER" ? FloorDiv(total, 2) : total - FloorDiv(total, 2);
      end = total - begin;
    } else {
      out_i = full - begin - end;
    }
    end -= (*output_padding)[i];
    if (out_i <= 0) return c.Error("output size is not positive");
    out[i] = SymDim::Const(out_i);
  }
  Node& n = c.node();
  SetWindowAttrs(n, kernel, *strides, *dilations, *pads);
  n.attrs["group"] = group;
  if (symbolic_output_shape) {
    // NodeWindowPads derives every dim's pads from these (static dims' are in `pads` too).
    n.attrs["output_shape"] = output_shape;
    n.attrs["output_padding"] = *output_padding;
    if (same) n.attrs["auto_pad"] = auto_pad;
  } else {
    n.attrs.erase("output_shape");
    n.attrs.erase("output_padding");
  }
  c.SetOutput(0, c.in_dtype(0), WithSpatial(c.in_shape(0)[0], SymDim::Const(out_channels), out));
  return absl::OkStatus();
}

// MaxPool (optional int64 Indices output) and AveragePool.
absl::Status Pool(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  auto in = SpatialDims(c, 0);
  if (!in.ok()) return in.status();
  if (!c.node().has_attr("kernel_shape")) return c.Error("kernel_shape is required");
  auto out = WindowOutput(c, *in, c.node().attr_ints("kernel_shape"));
  if (!out.ok()) return out.status();
  SymShape shape = WithSpatial(c.in_shape(0)[0], c.in_shape(0)[1], *out);
  c.SetOutput(0, c.in_dtype(0), shape);
  c.SetOutput(1, DType::kInt64, shape);
  return absl::OkStatus();
}

absl::Status GlobalPool(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  if (c.in_rank(0) < 3) return c.Error("expects an input of rank >= 3 (N, C, spatial...)");
  c.SetOutput(0, c.in_dtype(0),
              WithSpatial(c.in_shape(0)[0], c.in_shape(0)[1], Ints(c.in_rank(0) - 2, 1)));
  return absl::OkStatus();
}

// Multiply-adds per output element (OpDef::macs): W is [Cout, Cin/group, k...], and every output
// element reads all of one filter.
double ConvMacs(const Node& n, absl::Span<const int64_t> syms) {
  if (n.inputs[0]->type.rank() < 3 || !n.has_input(1)) return 0.0;
  const SymShape& w = n.inputs[1]->type.shape;
  return ElementsAt(SymShape(w.begin() + 1, w.end()), syms);
}

}  // namespace

void RegisterNnShapes(OpTable& r) {
  r.DefineShape("Conv", Conv).Batch(BatchClass::kBatchLeading).Macs(ConvMacs);
  r.DefineShape("ConvTranspose", ConvTranspose).Batch(BatchClass::kBatchLeading);
  r.DefineShape("MaxPool", Pool).Batch(BatchClass::kBatchLeading);
  r.DefineShape("AveragePool", Pool).Batch(BatchClass::kBatchLeading).Attributes({"dilations"});
  r.DefineShape("GlobalAveragePool", GlobalPool).Batch(BatchClass::kBatchLeading);
  r.DefineShape("GlobalMaxPool", GlobalPool).Batch(BatchClass::kBatchLeading);
}

}  // namespace cuvil::ir
