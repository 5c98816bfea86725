// Shape inference for the ops whose output size depends on the data: NonZero, Compress, Unique
// and NonMaxSuppression. Each such size is a fresh data-dependent symbol
// (InferContext::DataDependentDim) with an upper bound in the input's dims; the kernel writes its
// value.
//
// Canonical forms seen by code generation: Compress and Unique carry "axis" non-negative, or no
// "axis" to work on the flattened input; Unique's "sorted" is 0 or 1; NonMaxSuppression's
// "center_point_box" is 0 or 1.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "infer_context.h"

namespace cuvil::ir {
namespace {

bool IsScalarLike(const SymShape& s) {
  return std::all_of(s.begin(), s.end(), [](const SymDim& d) { return d == SymDim::Const(1); });
}

absl::Status NonZero(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  const SymShape& in = c.in_shape(0);
  if (in.empty()) return c.Error("input must have rank >= 1");
  if (c.in_dtype(0) == DType::kBFloat16 || c.in_dtype(0) == DType::kFloat16) {
    return c.Error("float16 and bfloat16 inputs are not supported");
  }
  auto count = c.DataDependentDim("count", SymNumElements(in));
  if (!count.ok()) return count.status();
  c.SetOutput(0, DType::kInt64, {SymDim::Const(static_cast<int64_t>(in.size())), *count});
  return absl::OkStatus();
}

absl::Status Compress(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  if (c.in_dtype(1) != DType::kBool || c.in_rank(1) != 1) {
    return c.Error("condition must be a 1-D bool tensor");
  }
  SymShape out = c.in_shape(0);
  SymDim extent = SymNumElements(out);
  if (c.node().has_attr("axis")) {
    auto axis = c.Axis(c.node().attr_int("axis", 0), c.in_rank(0));
    if (!axis.ok()) return axis.status();
    c.node().attrs["axis"] = int64_t{*axis};
    extent = out[*axis];
  }
  auto count = c.DataDependentDim("count", extent);
  if (!count.ok()) return count.status();
  if (c.node().has_attr("axis")) {
    out[c.node().attr_int("axis", 0)] = *count;
  } else {
    out = {*count};
  }
  c.SetOutput(0, c.in_dtype(0), std::move(out));
  return absl::OkStatus();
}

absl::Status Unique(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  const DType d = c.in_dtype(0);
  if (d == DType::kFloat16 || d == DType::kBFloat16) {
    return c.Error("float16 and bfloat16 inputs are not supported");
  }
  c.node().attrs["sorted"] = int64_t{c.node().attr_int("sorted", 1) != 0 ? 1 : 0};
  const SymShape& in = c.in_shape(0);
  SymShape y = {SymNumElements(in)};
  size_t axis_index = 0;
  if (c.node().has_attr("axis")) {
    auto axis = c.Axis(c.node().attr_int("axis", 0), c.in_rank(0));
    if (!axis.ok()) return axis.status();
    c.node().attrs["axis"] = int64_t{*axis};
    y = in;
    axis_index = static_cast<size_t>(*axis);
  }
  const SymDim slices = y[axis_index];
  auto count = c.DataDependentDim("count", slices);
  if (!count.ok()) return count.status();
  y[axis_index] = *count;
  c.SetOutput(0, d, std::move(y));
  c.SetOutput(1, DType::kInt64, {*count});
  c.SetOutput(2, DType::kInt64, {slices});
  c.SetOutput(3, DType::kInt64, {*count});
  return absl::OkStatus();
}

absl::Status NonMaxSuppression(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 5); !s.ok()) return s;
  const SymShape& boxes = c.in_shape(0);
  const SymShape& scores = c.in_shape(1);
  if (c.in_dtype(0) != DType::kFloat32 || c.in_dtype(1) != DType::kFloat32) {
    return c.Error("boxes and scores must be float32");
  }
  if (boxes.size() != 3 || !(boxes[2] == SymDim::Const(4))) {
    return c.Error("boxes must be [batches, boxes, 4]");
  }
  if (scores.size() != 3 || !(scores[0] == boxes[0]) || !(scores[2] == boxes[1])) {
    return c.Error(absl::StrCat("scores ", SymShapeToString(scores),
                                " must be [batches, classes, boxes] for boxes ",
                                SymShapeToString(boxes)));
  }
  const DType scalar_types[] = {DType::kInt64, DType::kFloat32, DType::kFloat32};
  const char* names[] = {"max_output_boxes_per_class", "iou_threshold", "score_threshold"};
  for (size_t i = 2; i < 5; ++i) {
    if (!c.has_input(i)) continue;
    if (c.in_dtype(i) != scalar_types[i - 2] || !IsScalarLike(c.in_shape(i))) {
      return c.Error(
          absl::StrCat(names[i - 2], " must be a ", DTypeName(scalar_types[i - 2]), " scalar"));
    }
  }
  const int64_t center = c.node().attr_int("center_point_box", 0);
  if (center != 0 && center != 1) return c.Error("center_point_box must be 0 or 1");
  c.node().attrs["center_point_box"] = center;
  // At most min(boxes, max per class) per batch and class; the limit counts when it is known.
  SymDim per_class = boxes[1];
  if (c.has_input(2) && c.input(2)->constant.has_value()) {
    const int64_t limit = std::max<int64_t>(c.input(2)->constant->data_as<int64_t>()[0], 0);
    if (auto min = DimMin(per_class.expr(), DimExpr(limit))) per_class = SymDim(*min);
  }
  auto count = c.DataDependentDim("count", SymMul(SymMul(boxes[0], scores[1]), per_class));
  if (!count.ok()) return count.status();
  c.SetOutput(0, DType::kInt64, {*count, SymDim::Const(3)});
  return absl::OkStatus();
}

}  // namespace

void RegisterSelectionShapes(OpTable& r) {
  r.DefineShape("Compress", Compress).Batch(BatchClass::kMixes);
  r.DefineShape("NonMaxSuppression", NonMaxSuppression).Batch(BatchClass::kMixes);
  r.DefineShape("NonZero", NonZero).Batch(BatchClass::kMixes);
  r.DefineShape("Unique", Unique).Batch(BatchClass::kMixes);
}

}  // namespace cuvil::ir
