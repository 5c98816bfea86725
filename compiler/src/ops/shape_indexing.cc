// Shape inference for the element-indexing ops: GatherElements, ScatterElements (and the
// deprecated Scatter, its opset-9 name) and GatherND, OneHot, ReverseSequence and MaxUnpool.
//
// Canonical forms seen by code generation: "axis" non-negative (GatherElements,
// ScatterElements); ScatterElements' "reduction" one of none/add/mul/max/min; GatherND's
// "batch_dims" non-negative.
#include <algorithm>

#include "infer_context.h"

namespace cuvil::ir {
namespace {

// Checks that every axis of `idx` other than `skip` fits inside the same axis of `data`.
absl::Status IndexShapeFits(InferContext& c, const SymShape& data, const SymShape& idx, int skip) {
  if (data.size() != idx.size()) return c.Error("indices must have the data's rank");
  for (size_t a = 0; a < data.size(); ++a) {
    if (static_cast<int>(a) == skip || idx[a] == data[a]) continue;
    if (!idx[a].IsStatic() || !data[a].IsStatic() || idx[a].coef() > data[a].coef()) {
      return c.Error("indices shape " + SymShapeToString(idx) + " does not fit in data shape " +
                     SymShapeToString(data));
    }
  }
  return absl::OkStatus();
}

absl::Status GatherElements(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  if (!IsInteger(c.in_dtype(1))) return c.Error("indices must be integers");
  auto axis = c.Axis(c.node().attr_int("axis", 0), c.in_rank(0));
  if (!axis.ok()) return axis.status();
  c.node().attrs["axis"] = int64_t{*axis};
  if (auto s = IndexShapeFits(c, c.in_shape(0), c.in_shape(1), *axis); !s.ok()) return s;
  c.SetOutput(0, c.in_dtype(0), c.in_shape(1));
  return absl::OkStatus();
}

absl::Status ScatterElements(InferContext& c) {
  if (auto s = c.ExpectInputs(3, 3); !s.ok()) return s;
  if (!IsInteger(c.in_dtype(1))) return c.Error("indices must be integers");
  if (c.in_dtype(2) != c.in_dtype(0)) return c.Error("updates must have the data's type");
  if (!(c.in_shape(2) == c.in_shape(1))) return c.Error("updates must have the indices' shape");
  auto axis = c.Axis(c.node().attr_int("axis", 0), c.in_rank(0));
  if (!axis.ok()) return axis.status();
  c.node().attrs["axis"] = int64_t{*axis};
  std::string red = c.node().attr_string("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min") {
    return c.Error("unknown reduction " + red);
  }
  c.node().attrs["reduction"] = red;
  if (auto s = IndexShapeFits(c, c.in_shape(0), c.in_shape(1), *axis); !s.ok()) return s;
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

absl::Status GatherND(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  if (!IsInteger(c.in_dtype(1))) return c.Error("indices must be integers");
  const SymShape& data = c.in_shape(0);
  const SymShape& idx = c.in_shape(1);
  int64_t batch = c.node().attr_int("batch_dims", 0);
  int64_t r = static_cast<int64_t>(data.size()), q = static_cast<int64_t>(idx.size());
  if (batch < 0 || batch >= std::min(r, q)) return c.Error("batch_dims is out of range");
  if (!idx.back().IsStatic()) return c.Error("indices' last dimension must be static");
  int64_t m = idx.back().coef();
  if (m < 1 || batch + m > r) return c.Error("indices' last dimension is out of range");
  for (int64_t a = 0; a < batch; ++a) {
    if (!(data[a] == idx[a])) return c.Error("batch dimensions of data and indices differ");
  }
  SymShape out(idx.begin(), idx.end() - 1);
  out.insert(out.end(), data.begin() + batch + m, data.end());
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

// OneHot: depth (a constant of any numeric type) becomes attribute "depth" and "axis" is
// normalised against the output rank; the values input [off, on] stays an operand.
absl::Status OneHot(InferContext& c) {
  if (auto s = c.ExpectInputs(3, 3); !s.ok()) return s;
  Node& n = c.node();
  if (!n.has_attr("depth")) {
    auto depth = c.ConstantInput(1, "depth");
    if (!depth.ok()) return depth.status();
    if ((*depth)->num_elements() != 1) return c.Error("depth must hold one value");
    double v = (*depth)->GetAsDouble(0);
    if (!(v >= 1 && v <= double{int64_t{1} << 40})) return c.Error("depth is out of range");
    n.attrs["depth"] = static_cast<int64_t>(v);
  }
  if (SymNumElements(c.in_shape(2)) != SymDim::Const(2)) {
    return c.Error("values must hold two elements [off, on]");
  }
  int rank = c.in_rank(0);
  auto axis = c.Axis(n.attr_int("axis", -1), rank + 1);
  if (!axis.ok()) return axis.status();
  n.attrs["axis"] = int64_t{*axis};
  SymShape out = c.in_shape(0);
  out.insert(out.begin() + *axis, SymDim::Const(n.attr_int("depth", 1)));
  c.SetOutput(0, c.in_dtype(2), out);
  return absl::OkStatus();
}

// ReverseSequence: "batch_axis" and "time_axis" normalised; they must be axes 0 and 1 in some
// order.
absl::Status ReverseSequence(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  Node& n = c.node();
  int rank = c.in_rank(0);
  if (rank < 2) return c.Error("input must have rank >= 2");
  auto batch = c.Axis(n.attr_int("batch_axis", 1), rank);
  if (!batch.ok()) return batch.status();
  auto time = c.Axis(n.attr_int("time_axis", 0), rank);
  if (!time.ok()) return time.status();
  if (*batch + *time != 1 || *batch == *time)
    return c.Error("batch_axis and time_axis must be 0 and 1");
  if (!IsInteger(c.in_dtype(1)) || c.in_rank(1) != 1 ||
      !(c.in_shape(1)[0] == c.in_shape(0)[*batch])) {
    return c.Error("sequence_lens must be an integer tensor [batch]");
  }
  n.attrs["batch_axis"] = int64_t{*batch};
  n.attrs["time_axis"] = int64_t{*time};
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

// MaxUnpool: the indices address the default output, whose spatial dims are
// (in - 1) * stride + kernel - pad_begin - pad_end (attr "index_shape"); output_shape (input 2,
// when given) folds into attr "output_shape", and each value keeps its coordinates there.
absl::Status MaxUnpool(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  Node& n = c.node();
  const SymShape& x = c.in_shape(0);
  if (!(c.in_shape(1) == x) || !IsInteger(c.in_dtype(1))) {
    return c.Error("indices must be integers shaped like X");
  }
  if (x.size() < 3 || !IsStaticShape(x)) return c.Error("X must be static [N, C, D1, ...]");
  size_t spatial = x.size() - 2;
  std::vector<int64_t> kernel = n.attr_ints("kernel_shape");
  std::vector<int64_t> strides = n.attr_ints("strides", std::vector<int64_t>(spatial, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * spatial, 0));
  if (kernel.size() != spatial || strides.size() != spatial || pads.size() != 2 * spatial) {
    return c.Error("kernel_shape, strides and pads must match X's spatial rank");
  }
  std::vector<int64_t> index_shape = {x[0].coef(), x[1].coef()};
  for (size_t a = 0; a < spatial; ++a) {
    int64_t v = (x[a + 2].coef() - 1) * strides[a] + kernel[a] - pads[a] - pads[a + spatial];
    if (v < 0) return c.Error("output size is negative");
    index_shape.push_back(v);
  }
  std::vector<int64_t> out = index_shape;
  if (c.has_input(2)) {
    auto shape = c.StaticInts(2, "output_shape");
    if (!shape.ok()) return shape.status();
    if (shape->size() != x.size()) return c.Error("output_shape must have X's rank");
    for (int64_t v : *shape) {
      if (v < 0) return c.Error("output_shape must be non-negative");
    }
    out = *shape;
    c.TruncateInputs(2);
  }
  n.attrs["index_shape"] = index_shape;
  n.attrs["output_shape"] = out;
  SymShape shape;
  for (int64_t v : out) shape.push_back(SymDim::Const(v));
  c.SetOutput(0, c.in_dtype(0), shape);
  return absl::OkStatus();
}

}  // namespace

void RegisterIndexingShapes(OpTable& r) {
  r.DefineShape("GatherElements", GatherElements).Batch(BatchClass::kGather);
  r.DefineShape("ScatterElements", ScatterElements).Batch(BatchClass::kMixes);
  r.DefineShape("Scatter", ScatterElements).Batch(BatchClass::kMixes).Attributes({"reduction"});
  r.DefineShape("GatherND", GatherND).Batch(BatchClass::kMixes);
  r.DefineShape("OneHot", OneHot).Batch(BatchClass::kPerItem).Attributes({"depth"});
  r.DefineShape("ReverseSequence", ReverseSequence).Batch(BatchClass::kMixes);
  r.DefineShape("MaxUnpool", MaxUnpool)
      .Batch(BatchClass::kMixes)
      .Attributes({"index_shape", "output_shape"});
}

}  // namespace cuvil::ir
