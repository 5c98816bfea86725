// Shape inference for elementwise ops: unary math, broadcasting binary/variadic ops, comparisons,
// Where, Clip and Cast. Integer results of shape arithmetic are propagated as known values.
#include <limits>

#include "infer_context.h"

namespace cuvil::ir {
namespace {

absl::Status Unary(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

// Output type of a broadcast over every present input.
absl::StatusOr<SymShape> BroadcastAll(InferContext& c, size_t first = 0) {
  SymShape shape = c.in_shape(first);
  for (size_t i = first + 1; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    auto b = BroadcastShapes(shape, c.in_shape(i));
    if (!b) {
      return c.Error(absl::StrCat("shapes ", SymShapeToString(shape), " and ",
                                  SymShapeToString(c.in_shape(i)), " do not broadcast"));
    }
    shape = *b;
  }
  return shape;
}

// Applies `fn` elementwise over known inputs (broadcasting scalars), if all are known.
template <typename Fn>
void PropagateKnown(InferContext& c, Fn fn) {
  const Value* out = c.node().outputs[0];
  if (!IsStaticShape(out->type.shape)) return;
  int64_t n = SymNumElements(out->type.shape).coef();
  if (n > 64) return;
  std::vector<const std::vector<SymDim>*> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i) || !c.input(i)->known) return;
    const auto& k = *c.input(i)->known;
    if (static_cast<int64_t>(k.size()) != n && k.size() != 1) return;
    ins.push_back(&k);
  }
  std::vector<SymDim> result;
  for (int64_t e = 0; e < n; ++e) {
    std::vector<SymDim> args;
    for (const auto* k : ins) args.push_back(k->size() == 1 ? (*k)[0] : (*k)[e]);
    std::optional<SymDim> r = fn(args);
    if (!r) return;
    result.push_back(*r);
  }
  c.SetKnown(0, std::move(result));
}

absl::Status CheckSameDtype(InferContext& c, size_t first = 0) {
  DType d = c.in_dtype(first);
  for (size_t i = first + 1; i < c.num_inputs(); ++i) {
    if (c.has_input(i) && c.in_dtype(i) != d) {
      return c.Error(
          absl::StrCat("input dtypes differ: ", DTypeName(d), " and ", DTypeName(c.in_dtype(i))));
    }
  }
  return absl::OkStatus();
}

InferFn Binary(bool bool_result, std::optional<SymDim> (*known)(SymDim, SymDim)) {
  return [bool_result, known](InferContext& c) -> absl::Status {
    if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
    if (c.node().op_type != "Pow" && c.node().op_type != "BitShift") {
      if (auto s = CheckSameDtype(c); !s.ok()) return s;
    }
    auto shape = BroadcastAll(c);
    if (!shape.ok()) return shape.status();
    c.SetOutput(0, bool_result ? DType::kBool : c.in_dtype(0), *shape);
    if (known != nullptr && IsInteger(c.in_dtype(0))) {
      PropagateKnown(c, [known](const std::vector<SymDim>& a) { return known(a[0], a[1]); });
    }
    return absl::OkStatus();
  };
}

absl::Status Variadic(InferContext& c) {
  if (c.num_inputs() < 1) return c.Error("expects at least one input");
  if (auto s = CheckSameDtype(c); !s.ok()) return s;
  auto shape = BroadcastAll(c);
  if (!shape.ok()) return shape.status();
  c.SetOutput(0, c.in_dtype(0), *shape);
  return absl::OkStatus();
}

absl::Status Where(InferContext& c) {
  if (auto s = c.ExpectInputs(3, 3); !s.ok()) return s;
  if (c.in_dtype(0) != DType::kBool) return c.Error("condition must be bool");
  if (c.in_dtype(1) != c.in_dtype(2)) return c.Error("X and Y dtypes differ");
  auto shape = BroadcastAll(c);
  if (!shape.ok()) return shape.status();
  c.SetOutput(0, c.in_dtype(1), *shape);
  PropagateKnown(c, [](const std::vector<SymDim>& a) -> std::optional<SymDim> {
    return a[0].coef() != 0 ? a[1] : a[2];
  });
  return absl::OkStatus();
}

absl::Status Clip(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 3); !s.ok()) return s;
  if (c.node().opset < 11) {
    // Attribute form: normalise to min/max attributes (already there).
    c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
    return absl::OkStatus();
  }
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    if (c.has_input(i) && SymNumElements(c.in_shape(i)) != SymDim::Const(1)) {
      return c.Error("min/max must be scalars");
    }
  }
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

absl::Status Cast(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  auto to = DTypeFromOnnx(static_cast<int32_t>(c.node().attr_int("to", 0)));
  if (!to.ok()) return c.Error(std::string(to.status().message()));
  c.SetOutput(0, *to, c.in_shape(0));
  if (c.input(0)->known && IsInteger(*to)) c.SetKnown(0, *c.input(0)->known);
  return absl::OkStatus();
}

// CastLike becomes a Cast to the second input's type (which is then no longer an operand).
absl::Status CastLike(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  c.node().attrs["to"] = int64_t{static_cast<int32_t>(c.in_dtype(1))};
  c.node().op_type = "Cast";
  c.TruncateInputs(1);
  return Cast(c);
}

absl::Status PRelu(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  auto shape = BroadcastShapes(c.in_shape(0), c.in_shape(1));
  if (!shape || !(*shape == c.in_shape(0))) return c.Error("slope does not broadcast to X");
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

// Neg and Abs also appear in shape arithmetic (ONNX function expansions negate axes).
absl::Status IntegerUnary(InferContext& c) {
  if (auto s = Unary(c); !s.ok()) return s;
  bool neg = c.node().op_type == "Neg";
  if (IsInteger(c.in_dtype(0))) {
    PropagateKnown(c, [neg](const std::vector<SymDim>& a) -> std::optional<SymDim> {
      // -INT64_MIN overflows; leave such values to the generated code (which wraps).
      if (a[0].coef() == std::numeric_limits<int64_t>::min()) return std::nullopt;
      if (neg) return SymDim{-a[0].coef(), a[0].power()};
      return SymDim{a[0].coef() < 0 ? -a[0].coef() : a[0].coef(), a[0].power()};
    });
  }
  return absl::OkStatus();
}

absl::Status BoolUnary(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  c.SetOutput(0, DType::kBool, c.in_shape(0));
  return absl::OkStatus();
}

}  // namespace

void RegisterElementwiseShapes(OpTable& r) {
  for (const char* op : {"Abs",       "Neg",
                         "Exp",       "Log",
                         "Sqrt",      "Reciprocal",
                         "Floor",     "Ceil",
                         "Round",     "Sin",
                         "Cos",       "Tan",
                         "Asin",      "Acos",
                         "Atan",      "Sinh",
                         "Cosh",      "Asinh",
                         "Acosh",     "Atanh",
                         "Tanh",      "Sigmoid",
                         "Relu",      "LeakyRelu",
                         "Elu",       "Selu",
                         "Celu",      "HardSigmoid",
                         "HardSwish", "Softplus",
                         "Softsign",  "Erf",
                         "Sign",      "ThresholdedRelu",
                         "Mish",      "Gelu",
                         "Not",       "Shrink"}) {
    r.DefineShape(op, Unary);
  }
  r.DefineShape("Neg", IntegerUnary);
  r.DefineShape("Abs", IntegerUnary);
  r.DefineShape("IsNaN", BoolUnary);
  r.DefineShape("IsInf", BoolUnary);
  r.DefineShape("Add", Binary(false, [](SymDim a, SymDim b) { return SymAdd(a, b); }));
  r.DefineShape("Sub", Binary(false, [](SymDim a, SymDim b) { return SymSub(a, b); }));
  // Checked: a saturated product must not be folded into a value the runtime would compute
  // differently (it wraps).
  r.DefineShape("Mul", Binary(false, [](SymDim a, SymDim b) { return SymMulChecked(a, b); }));
  r.DefineShape("Div", Binary(false, [](SymDim a, SymDim b) { return SymDiv(a, b); }));
  r.DefineShape("Pow", Binary(false, nullptr));
  r.DefineShape("Mod", Binary(false, nullptr));
  r.DefineShape("BitShift", Binary(false, nullptr));
  for (const char* op : {"And", "Or", "Xor"}) r.DefineShape(op, Binary(true, nullptr));
  for (const char* op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    r.DefineShape(op, Binary(true, nullptr));
  }
  r.DefineShape("Equal", Binary(true, [](SymDim a, SymDim b) -> std::optional<SymDim> {
                  if (a == b) return SymDim::Const(1);
                  if (a.IsStatic() && b.IsStatic()) return SymDim::Const(0);
                  if ((a.IsStatic() && a.coef() <= 0) || (b.IsStatic() && b.coef() <= 0))
                    return SymDim::Const(0);
                  return std::nullopt;  // batch may or may not equal the constant.
                }));
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) r.DefineShape(op, Variadic);
  r.DefineShape("Where", Where);
  r.DefineShape("Clip", Clip);
  r.DefineShape("Cast", Cast);
  r.DefineRewrite("CastLike", CastLike, "Cast");
  r.DefineShape("PRelu", PRelu);
}

}  // namespace cuvil::ir
