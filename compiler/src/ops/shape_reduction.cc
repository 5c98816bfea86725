// Shape inference for the reduction op family: Reduce*, ArgMax/ArgMin, Softmax-like ops,
// normalisations and TopK.
//
// Canonical forms seen by code generation:
//   Reduce*: attrs "axes" (sorted, non-negative, exactly the reduced axes; empty = copy) and
//            "keepdims"; the axes input is folded away.
//   ArgMax/ArgMin, TopK, LayerNormalization: "axis" non-negative; TopK's K becomes attr "k".
//   Softmax/LogSoftmax/Hardmax: work over axes [axis, axis_end), so opset < 13's flattening
//            and opset >= 13's single axis are one form.
#include <algorithm>

#include "infer_context.h"
#include "internal_attrs.h"

namespace cuvil::ir {
namespace {

// Known values through a reduction of every element to one (ReduceMax of a shape's H and W,
// ReduceProd of a shape): max, min, sum and product, over integers or a float's numerators.
void ReduceKnown(InferContext& c) {
  const Value* in = c.input(0);
  const Value* out = c.node().outputs[0];
  if (!in->known || in->known->empty() || out == nullptr || !IsStaticShape(out->type.shape) ||
      SymNumElements(out->type.shape).coef() != 1 || !IsStaticShape(in->type.shape) ||
      static_cast<int64_t>(in->known->size()) != SymNumElements(in->type.shape).coef()) {
    return;
  }
  if (!IsInteger(in->type.dtype) && !IsFloat(in->type.dtype)) return;
  const std::string& op = c.node().op_type;
  if (op != "ReduceMax" && op != "ReduceMin" && op != "ReduceSum" && op != "ReduceProd") return;
  std::optional<DimExpr> acc = (*in->known)[0].expr();
  int64_t den = in->known_den;
  for (size_t i = 1; i < in->known->size() && acc; ++i) {
    const DimExpr& x = (*in->known)[i].expr();
    if (op == "ReduceMax") {
      acc = DimMax(*acc, x);
    } else if (op == "ReduceMin") {
      acc = DimMin(*acc, x);
    } else if (op == "ReduceSum") {
      acc = DimAdd(*acc, x);
    } else {  // ReduceProd
      acc = DimMul(*acc, x);
      if (__builtin_mul_overflow(den, in->known_den, &den)) return;
    }
  }
  if (!acc) return;
  c.SetKnownRational(0, {SymDim(*acc)}, den);
}

absl::Status Reduce(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  Node& n = c.node();
  int rank = c.in_rank(0);
  std::vector<int64_t> raw = n.attr_ints("axes");
  if (c.has_input(1)) {
    auto axes = c.StaticInts(1, "axes");
    if (!axes.ok()) return axes.status();
    raw = *axes;
    c.TruncateInputs(1);
  }
  bool noop = n.attr_int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> axes;
  for (int64_t a : raw) {
    auto axis = c.Axis(a, rank);
    if (!axis.ok()) return axis.status();
    axes.push_back(*axis);
  }
  if (axes.empty() && !noop) {
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  // An empty list now always means "reduce nothing"; keep that meaning if inference reruns.
  if (axes.empty()) n.attrs["noop_with_empty_axes"] = int64_t{1};
  bool keepdims = n.attr_int("keepdims", 1) != 0;
  n.attrs["axes"] = axes;
  n.attrs["keepdims"] = int64_t{keepdims ? 1 : 0};
  SymShape out;
  for (int i = 0; i < rank; ++i) {
    bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) {
      out.push_back(c.in_shape(0)[i]);
    } else if (keepdims) {
      out.push_back(SymDim::Const(1));
    }
  }
  c.SetOutput(0, c.in_dtype(0), out);
  ReduceKnown(c);
  return absl::OkStatus();
}

// Normalises attribute "axis" (default `fallback`) against the rank of input 0.
absl::StatusOr<int> NormaliseAxis(InferContext& c, int64_t fallback) {
  auto axis = c.Axis(c.node().attr_int("axis", fallback), c.in_rank(0));
  if (axis.ok()) c.node().attrs["axis"] = int64_t{*axis};
  return axis;
}

absl::Status ArgReduce(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  auto axis = NormaliseAxis(c, 0);
  if (!axis.ok()) return axis.status();
  SymShape out = c.in_shape(0);
  if (c.node().attr_int("keepdims", 1) != 0) {
    out[*axis] = SymDim::Const(1);
  } else {
    out.erase(out.begin() + *axis);
  }
  c.SetOutput(0, DType::kInt64, out);
  return absl::OkStatus();
}

absl::Status SoftmaxLike(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  Node& n = c.node();
  int rank = c.in_rank(0);
  if (!n.has_attr(attr::kAxisEnd)) {
    // Before opset 13 the input is coerced to 2D at `axis`: the op spans every later axis.
    bool coerce_2d = n.opset < 13;
    auto axis = NormaliseAxis(c, coerce_2d ? 1 : -1);
    if (!axis.ok()) return axis.status();
    n.attrs[attr::kAxisEnd] = int64_t{coerce_2d ? rank : *axis + 1};
  }
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

absl::Status LayerNormalization(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  auto axis = NormaliseAxis(c, -1);
  if (!axis.ok()) return axis.status();
  if (!IsFloat(c.in_dtype(0))) return c.Error("X must be floating point");
  SymShape stats = c.in_shape(0);
  for (size_t i = *axis; i < stats.size(); ++i) stats[i] = SymDim::Const(1);
  auto stash = DTypeFromOnnx(static_cast<int32_t>(c.node().attr_int("stash_type", 1)));
  if (!stash.ok() || !IsFloat(*stash)) return c.Error("unsupported stash_type");
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  c.SetOutput(1, *stash, stats);
  c.SetOutput(2, *stash, stats);
  return absl::OkStatus();
}

absl::Status InstanceNormalization(InferContext& c) {
  if (auto s = c.ExpectInputs(3, 3); !s.ok()) return s;
  if (c.in_rank(0) < 2) return c.Error("input must have rank >= 2");
  if (!IsFloat(c.in_dtype(0))) return c.Error("input must be floating point");
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

absl::Status BatchNormalization(InferContext& c) {
  if (auto s = c.ExpectInputs(5, 5); !s.ok()) return s;
  if (c.in_rank(0) < 2) return c.Error("input must have rank >= 2");
  if (!IsFloat(c.in_dtype(0))) return c.Error("input must be floating point");
  const SymShape& x = c.in_shape(0);
  for (size_t i = 1; i < 5; ++i) {
    if (c.in_rank(i) != 1 || c.in_shape(i)[0] != x[1]) {
      return c.Error(absl::StrCat("input ", i, " '", c.input(i)->name, "' must have shape [C]"));
    }
  }
  // Opset 14+: training_mode=1 normalises with the batch statistics (population variance over
  // every axis but 1) and outputs running_mean and running_var, each
  // `input * momentum + batch statistic * (1 - momentum)`.
  bool training = c.node().attr_int("training_mode", 0) != 0;
  if (training && c.node().opset < 14) return c.Error("training_mode needs opset 14 or later");
  if (training) {
    if (c.num_outputs() > 3) return c.Error("has at most 3 outputs in training mode");
    if (!IsFloat(c.in_dtype(3)) || c.in_dtype(4) != c.in_dtype(3)) {
      return c.Error("mean and var must be floating point of one type");
    }
    c.SetOutput(1, c.in_dtype(3), c.in_shape(3));
    c.SetOutput(2, c.in_dtype(4), c.in_shape(4));
  } else {
    for (size_t i = 1; i < c.num_outputs(); ++i) {
      if (c.has_output(i)) return c.Error("training outputs need training_mode=1 (opset 14+)");
    }
  }
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

absl::Status TopK(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  Node& n = c.node();
  if (c.has_input(1)) {
    auto known = c.Known(1, "K");
    if (!known.ok()) return known.status();
    if (known->size() != 1) return c.Error("K must hold one value");
    if (!(*known)[0].IsStatic()) {
      if (!(*known)[0].expr().IsProvablyNonNegative()) {
        return absl::UnimplementedError(
            absl::StrCat(n.Describe(), ": K ", (*known)[0].ToString(), " may be negative"));
      }
      // K from the input shapes (detection: min(300, number of candidates)): the output's
      // extent along the axis is K, which the kernel reads from the shape, and checks against
      // the axis at run time.
      auto axis = NormaliseAxis(c, -1);
      if (!axis.ok()) return axis.status();
      SymShape out = c.in_shape(0);
      out[*axis] = (*known)[0];
      n.attrs.erase("k");
      c.TruncateInputs(1);
      c.SetOutput(0, c.in_dtype(0), out);
      c.SetOutput(1, DType::kInt64, out);
      return absl::OkStatus();
    }
    n.attrs["k"] = (*known)[0].coef();
    c.TruncateInputs(1);
  }
  auto axis = NormaliseAxis(c, -1);
  if (!axis.ok()) return axis.status();
  SymShape out = c.in_shape(0);
  int64_t k = n.attr_int("k", -1);
  if (k < 0 || (out[*axis].IsStatic() && k > out[*axis].coef())) {
    return c.Error(absl::StrCat("K=", k, " is out of range"));
  }
  out[*axis] = SymDim::Const(k);
  c.SetOutput(0, c.in_dtype(0), out);
  c.SetOutput(1, DType::kInt64, out);
  return absl::OkStatus();
}

// MeanVarianceNormalization: "axes" normalised, sorted and unique (default [0, 2, 3]).
absl::Status MeanVarianceNormalization(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  if (!IsFloat(c.in_dtype(0))) return c.Error("input must be floating point");
  std::vector<int64_t> axes;
  for (int64_t a : c.node().attr_ints("axes", {0, 2, 3})) {
    auto axis = c.Axis(a, c.in_rank(0));
    if (!axis.ok()) return axis.status();
    axes.push_back(*axis);
  }
  std::sort(axes.begin(), axes.end());
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  c.node().attrs["axes"] = axes;
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

absl::Status Lrn(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  if (c.in_rank(0) < 2) return c.Error("input must have rank >= 2");
  if (!IsFloat(c.in_dtype(0))) return c.Error("input must be floating point");
  if (c.node().attr_int("size", 0) < 1) return c.Error("size must be positive");
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

// CumSum: the axis input becomes attribute "axis" (non-negative).
absl::Status CumSum(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  auto axis = c.StaticInts(1, "axis");
  if (!axis.ok()) return axis.status();
  if (axis->size() != 1) return c.Error("axis must hold one value");
  auto a = c.Axis((*axis)[0], c.in_rank(0));
  if (!a.ok()) return a.status();
  c.node().attrs["axis"] = int64_t{*a};
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

}  // namespace

void RegisterReductionShapes(OpTable& r) {
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    r.DefineShape(op, Reduce).Batch(BatchClass::kReduce);
  }
  r.DefineShape("ArgMax", ArgReduce).Batch(BatchClass::kAlongAxis);
  r.DefineShape("ArgMin", ArgReduce).Batch(BatchClass::kAlongAxis);
  for (const char* op : {"Softmax", "LogSoftmax", "Hardmax"}) {
    r.DefineShape(op, SoftmaxLike).Batch(BatchClass::kNormalize);
  }
  r.DefineShape("LayerNormalization", LayerNormalization).Batch(BatchClass::kNormalize);
  r.DefineShape("InstanceNormalization", InstanceNormalization).Batch(BatchClass::kBatchLeading);
  r.DefineShape("BatchNormalization", BatchNormalization).Batch(BatchClass::kBatchLeading);
  r.DefineShape("TopK", TopK).Batch(BatchClass::kAlongAxis);
  r.DefineShape("CumSum", CumSum).Batch(BatchClass::kAlongAxis).Attributes({"axis"});
  r.DefineShape("LRN", Lrn).Batch(BatchClass::kBatchLeading);
  r.DefineShape("MeanVarianceNormalization", MeanVarianceNormalization).Batch(BatchClass::kReduce);
}

}  // namespace cuvil::ir
