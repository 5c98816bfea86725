// Shape inference for shape-only ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze,
// Identity, Dropout, ConstantOfShape and Range. These carry the known values of PyTorch's shape
// arithmetic so it folds to constants.
#include <algorithm>
#include <cmath>

#include "op_registry.h"

namespace cuvil::ir {
namespace {

// Passes known values through ops that only change the shape.
void ForwardKnown(InferContext& c) {
  if (c.input(0)->known) c.SetKnown(0, *c.input(0)->known);
}

absl::Status Shape(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  int rank = c.in_rank(0);
  int64_t start = c.node().attr_int("start", 0), end = c.node().attr_int("end", rank);
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clamp(start);
  end = std::max(clamp(end), start);
  std::vector<SymDim> dims(c.in_shape(0).begin() + start, c.in_shape(0).begin() + end);
  c.node().attrs["start"] = start;
  c.node().attrs["end"] = end;
  c.SetOutput(0, DType::kInt64, {SymDim::Const(static_cast<int64_t>(dims.size()))});
  c.SetKnown(0, std::move(dims));
  return absl::OkStatus();
}

absl::Status Size(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  c.SetOutput(0, DType::kInt64, {});
  c.SetKnown(0, {SymNumElements(c.in_shape(0))});
  return absl::OkStatus();
}

absl::Status Reshape(InferContext& c) {
  std::vector<SymDim> target;
  if (c.node().opset < 5) {
    for (int64_t v : c.node().attr_ints("shape")) target.push_back(SymDim::Const(v));
  } else {
    if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
    auto known = c.Known(1, "shape");
    if (!known.ok()) return known.status();
    target = *known;
  }
  bool allow_zero = c.node().attr_int("allowzero", 0) != 0;
  const SymShape& in = c.in_shape(0);
  SymShape out;
  int infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    const SymDim& d = target[i];
    if (d.IsStatic() && d.coef == 0 && !allow_zero) {
      if (i >= in.size()) return c.Error("shape copies a dimension the input does not have");
      out.push_back(in[i]);
    } else if (d.IsStatic() && d.coef == -1) {
      if (infer_at >= 0) return c.Error("shape has more than one -1");
      infer_at = static_cast<int>(i);
      out.push_back(SymDim::Const(1));
    } else if (d.IsStatic() && d.coef < 0) {
      return c.Error("shape has a negative dimension");
    } else {
      out.push_back(d);
    }
  }
  SymDim total = SymNumElements(in);
  if (infer_at >= 0) {
    auto q = SymDiv(total, SymNumElements(out));
    if (!q) {
      return c.Error(absl::StrCat("cannot infer -1: ", SymShapeToString(in), " does not divide into ",
                                  SymShapeToString(out)));
    }
    out[infer_at] = *q;
  }
  if (!(SymNumElements(out) == total)) {
    return c.Error(absl::StrCat("cannot reshape ", SymShapeToString(in), " to ", SymShapeToString(out)));
  }
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), out);
  ForwardKnown(c);
  return absl::OkStatus();
}

absl::Status Flatten(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  int rank = c.in_rank(0);
  int64_t axis = c.node().attr_int("axis", 1);
  if (axis < -rank || axis > rank) return c.Error(absl::StrCat("axis ", axis, " out of range"));
  if (axis < 0) axis += rank;
  SymShape in = c.in_shape(0);
  SymShape left(in.begin(), in.begin() + axis), right(in.begin() + axis, in.end());
  c.SetOutput(0, c.in_dtype(0), {SymNumElements(left), SymNumElements(right)});
  ForwardKnown(c);
  return absl::OkStatus();
}

// Reads axes from the attribute (old opsets) or the optional second input (opset >= 13).
absl::StatusOr<std::vector<int64_t>> AxesOperand(InferContext& c) {
  if (c.num_inputs() >= 2 && c.has_input(1)) {
    auto axes = c.StaticInts(1, "axes");
    if (!axes.ok()) return axes.status();
    c.TruncateInputs(1);
    c.node().attrs["axes"] = *axes;
    return axes;
  }
  return c.node().attr_ints("axes");
}

absl::Status Squeeze(InferContext& c) {
  auto axes = AxesOperand(c);
  if (!axes.ok()) return axes.status();
  const SymShape& in = c.in_shape(0);
  std::vector<bool> drop(in.size(), false);
  if (axes->empty()) {
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == SymDim::Const(1);
  }
  for (int64_t a : *axes) {
    auto axis = c.Axis(a, static_cast<int>(in.size()));
    if (!axis.ok()) return axis.status();
    if (!(in[*axis] == SymDim::Const(1))) return c.Error(absl::StrCat("cannot squeeze axis ", a, " of size ", in[*axis].ToString()));
    drop[*axis] = true;
  }
  SymShape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!drop[i]) out.push_back(in[i]);
  }
  c.SetOutput(0, c.in_dtype(0), out);
  ForwardKnown(c);
  return absl::OkStatus();
}

absl::Status Unsqueeze(InferContext& c) {
  auto axes = AxesOperand(c);
  if (!axes.ok()) return axes.status();
  const SymShape& in = c.in_shape(0);
  int out_rank = static_cast<int>(in.size() + axes->size());
  std::vector<bool> inserted(out_rank, false);
  for (int64_t a : *axes) {
    auto axis = c.Axis(a, out_rank);
    if (!axis.ok()) return axis.status();
    if (inserted[*axis]) return c.Error("axes contain a duplicate");
    inserted[*axis] = true;
  }
  SymShape out;
  size_t next = 0;
  for (int i = 0; i < out_rank; ++i) out.push_back(inserted[i] ? SymDim::Const(1) : in[next++]);
  c.SetOutput(0, c.in_dtype(0), out);
  ForwardKnown(c);
  return absl::OkStatus();
}

absl::Status Identity(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  ForwardKnown(c);
  return absl::OkStatus();
}

absl::Status Dropout(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 3); !s.ok()) return s;
  if (c.has_input(2)) {
    auto training = c.StaticInts(2, "training_mode");
    if (!training.ok()) return training.status();
    if (!training->empty() && (*training)[0] != 0) {
      return absl::UnimplementedError(absl::StrCat(c.node().Describe(), ": training mode is not supported"));
    }
  }
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  c.SetOutput(1, DType::kBool, c.in_shape(0));
  return absl::OkStatus();
}

absl::Status ConstantOfShape(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  auto dims = c.Known(0, "shape");
  if (!dims.ok()) return dims.status();
  DType dtype = DType::kFloat32;
  double value = 0;
  if (auto it = c.node().attrs.find("value"); it != c.node().attrs.end()) {
    const auto* t = std::get_if<HostTensor>(&it->second);
    if (t == nullptr || t->num_elements() != 1) return c.Error("value must be a one-element tensor");
    dtype = t->dtype();
    value = t->GetAsDouble(0);
  }
  c.node().attrs["fill"] = static_cast<float>(value);
  c.node().attrs["fill_int"] = static_cast<int64_t>(value);
  c.TruncateInputs(0);
  SymShape shape(dims->begin(), dims->end());
  c.SetOutput(0, dtype, shape);
  if (IsInteger(dtype) && IsStaticShape(shape) && SymNumElements(shape).coef <= 64) {
    c.SetKnown(0, std::vector<SymDim>(SymNumElements(shape).coef, SymDim::Const(static_cast<int64_t>(value))));
  }
  return absl::OkStatus();
}

absl::Status Range(InferContext& c) {
  if (auto s = c.ExpectInputs(3, 3); !s.ok()) return s;
  double v[3];
  for (int i = 0; i < 3; ++i) {
    auto t = c.ConstantInput(i, i == 0 ? "start" : i == 1 ? "limit" : "delta");
    if (!t.ok()) return t.status();
    if ((*t)->num_elements() != 1) return c.Error("start, limit and delta must be scalars");
    v[i] = (*t)->GetAsDouble(0);
  }
  if (v[2] == 0) return c.Error("delta is zero");
  int64_t n = std::max<int64_t>(static_cast<int64_t>(std::ceil((v[1] - v[0]) / v[2])), 0);
  c.SetOutput(0, c.in_dtype(0), {SymDim::Const(n)});
  if (IsInteger(c.in_dtype(0)) && n <= 64) {
    std::vector<SymDim> known;
    for (int64_t i = 0; i < n; ++i) known.push_back(SymDim::Const(static_cast<int64_t>(v[0] + i * v[2])));
    c.SetKnown(0, known);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorShapes(OpRegistry& r) {
  r.Register("Shape", Shape);
  r.Register("Size", Size);
  r.Register("Reshape", Reshape);
  r.Register("Flatten", Flatten);
  r.Register("Squeeze", Squeeze);
  r.Register("Unsqueeze", Unsqueeze);
  r.Register("Identity", Identity);
  r.Register("Dropout", Dropout);
  r.Register("ConstantOfShape", ConstantOfShape);
  r.Register("Range", Range);
}

}  // namespace cuvil::ir
