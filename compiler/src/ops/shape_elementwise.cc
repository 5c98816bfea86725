// Shape inference for elementwise ops: unary math, broadcasting binary/variadic ops, comparisons,
// Where, Clip and Cast. Integer results of shape arithmetic are propagated as known values.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

// A float tensor's known element: num / den exactly (den > 0), see Value::known_den.
struct Rational {
  SymDim num;
  int64_t den = 1;
};

std::optional<SymDim> Lift(std::optional<DimExpr> e) {
  if (!e) return std::nullopt;
  return SymDim(*std::move(e));
}

// num / den in lowest terms where the division is exact.
Rational Reduce(Rational r) {
  if (r.den == 1) return r;
  if (auto q = DimFloorDiv(r.num.expr(), DimExpr(r.den))) {
    if (auto back = DimMul(*q, DimExpr(r.den)); back && *back == r.num.expr())
      return {SymDim(*q), 1};
  }
  if (auto v = r.num.AsConstant()) {
    int64_t g = std::gcd(*v < 0 ? -*v : *v, r.den);
    if (g > 1) return {SymDim::Const(*v / g), r.den / g};
  }
  return r;
}

// The float analogue of PropagateKnown: `fn` maps the inputs' elements (as rationals) to the
// output's; the results are brought to one denominator.
template <typename Fn>
void PropagateRational(InferContext& c, Fn fn) {
  const Value* out = c.node().outputs[0];
  if (out == nullptr || !IsStaticShape(out->type.shape)) return;
  int64_t n = SymNumElements(out->type.shape).coef();
  if (n > 64) return;
  std::vector<const Value*> ins;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const Value* v = c.input(i);
    if (v == nullptr || !v->known) return;
    if (static_cast<int64_t>(v->known->size()) != n && v->known->size() != 1) return;
    ins.push_back(v);
  }
  std::vector<Rational> results;
  int64_t den = 1;
  for (int64_t e = 0; e < n; ++e) {
    std::vector<Rational> args;
    for (const Value* v : ins) {
      args.push_back({v->known->size() == 1 ? (*v->known)[0] : (*v->known)[e], v->known_den});
    }
    std::optional<Rational> r = fn(args);
    if (!r || r->den <= 0 || r->den > kMaxKnownDen) return;
    results.push_back(Reduce(*r));
    den = std::lcm(den, results.back().den);
    if (den > kMaxKnownDen) return;
  }
  std::vector<SymDim> nums;
  for (const Rational& r : results) {
    auto scaled = SymMulChecked(r.num, SymDim::Const(den / r.den));
    if (!scaled) return;
    nums.push_back(*scaled);
  }
  c.SetKnownRational(0, std::move(nums), den);
}

// a and b over their common denominator; nullopt on overflow.
std::optional<std::pair<Rational, Rational>> Common(const Rational& a, const Rational& b) {
  int64_t den = std::lcm(a.den, b.den);
  if (den > kMaxKnownDen) return std::nullopt;
  auto an = SymMulChecked(a.num, SymDim::Const(den / a.den));
  auto bn = SymMulChecked(b.num, SymDim::Const(den / b.den));
  if (!an || !bn) return std::nullopt;
  return std::make_pair(Rational{*an, den}, Rational{*bn, den});
}

// Exact float arithmetic on rationals for Add, Sub, Mul and Div (a divisor must be a non-zero
// constant), Max and Min.
std::optional<Rational> RationalBinary(const std::string& op, const Rational& a,
                                       const Rational& b) {
  if (op == "Mul") {
    auto num = SymMulChecked(a.num, b.num);
    int64_t den = 0;
    if (!num || __builtin_mul_overflow(a.den, b.den, &den)) return std::nullopt;
    return Rational{*num, den};
  }
  if (op == "Div") {
    auto d = b.num.AsConstant();
    if (!d || *d == 0) return std::nullopt;
    auto num = SymMulChecked(a.num, SymDim::Const(*d < 0 ? -b.den : b.den));
    int64_t den = 0;
    if (!num || __builtin_mul_overflow(a.den, *d < 0 ? -*d : *d, &den)) return std::nullopt;
    return Rational{*num, den};
  }
  auto common = Common(a, b);
  if (!common) return std::nullopt;
  const DimExpr& x = common->first.num.expr();
  const DimExpr& y = common->second.num.expr();
  std::optional<SymDim> num;
  if (op == "Add") num = Lift(DimAdd(x, y));
  if (op == "Sub") num = Lift(DimSub(x, y));
  if (op == "Max") num = Lift(DimMax(x, y));
  if (op == "Min") num = Lift(DimMin(x, y));
  if (!num) return std::nullopt;
  return Rational{*num, common->first.den};
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
    } else if (!bool_result && IsFloat(c.in_dtype(0))) {
      const std::string op = c.node().op_type;
      PropagateRational(
          c, [&op](const std::vector<Rational>& a) { return RationalBinary(op, a[0], a[1]); });
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
  // max(H, W) and min(...) of shape values (detection transforms pick a scale from them).
  const std::string op = c.node().op_type;
  if (op != "Max" && op != "Min") return absl::OkStatus();
  auto fold = [&op](const std::vector<Rational>& a) -> std::optional<Rational> {
    Rational r = a[0];
    for (size_t i = 1; i < a.size(); ++i) {
      auto next = RationalBinary(op, r, a[i]);
      if (!next) return std::nullopt;
      r = *next;
    }
    return r;
  };
  // Integers are rationals over 1 (PropagateRational keeps den 1 for integer outputs).
  if (IsInteger(c.in_dtype(0)) || IsFloat(c.in_dtype(0))) PropagateRational(c, fold);
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
  const Value* in = c.input(0);
  if (!in->known || (!IsInteger(in->type.dtype) && !IsFloat(in->type.dtype)))
    return absl::OkStatus();
  if (IsInteger(*to)) {
    if (in->known_den == 1) {
      c.SetKnown(0, *in->known);
    } else {  // float -> integer truncates toward zero.
      PropagateKnown(c, [den = in->known_den](const std::vector<SymDim>& a) {
        return Lift(DimTruncDiv(a[0].expr(), DimExpr(den)));
      });
    }
  } else if (IsFloat(*to)) {
    c.SetKnownRational(0, *in->known, in->known_den);
  }
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
// The absolute value where its sign is known; nullopt otherwise.
std::optional<SymDim> KnownAbs(const SymDim& d) {
  if (auto v = d.AsConstant()) {
    // -INT64_MIN overflows; leave such values to the generated code (which wraps).
    if (*v == std::numeric_limits<int64_t>::min()) return std::nullopt;
    return SymDim::Const(*v < 0 ? -*v : *v);
  }
  if (d.expr().IsProvablyNonNegative()) return d;
  if (auto neg = DimNeg(d.expr()); neg && neg->IsProvablyNonNegative()) return SymDim(*neg);
  return std::nullopt;
}

// Unary ops of shape arithmetic: Neg and Abs (ONNX function expansions negate axes), and for
// float values Floor, Ceil, Round and Relu (exporters' ceil(H / stride) and friends).
absl::Status KnownUnary(InferContext& c) {
  if (auto s = Unary(c); !s.ok()) return s;
  const std::string op = c.node().op_type;
  auto unary = [&op](const SymDim& num, int64_t den) -> std::optional<SymDim> {
    if (op == "Neg") {
      if (num.AsConstant() == std::numeric_limits<int64_t>::min()) return std::nullopt;
      return Lift(DimNeg(num.expr()));
    }
    if (op == "Abs") return KnownAbs(num);
    if (op == "Relu") return Lift(DimMax(num.expr(), DimExpr(0)));
    if (op == "Floor") return Lift(DimFloorDiv(num.expr(), DimExpr(den)));
    if (op == "Ceil") return Lift(DimCeilDiv(num.expr(), DimExpr(den)));
    if (op == "Round" && den == 1) return num;
    return std::nullopt;
  };
  if (IsInteger(c.in_dtype(0))) {
    if (op != "Neg" && op != "Abs") return absl::OkStatus();
    PropagateKnown(c, [&unary](const std::vector<SymDim>& a) { return unary(a[0], 1); });
  } else if (IsFloat(c.in_dtype(0))) {
    const bool integral = op == "Floor" || op == "Ceil" || op == "Round";
    PropagateRational(c, [&](const std::vector<Rational>& a) -> std::optional<Rational> {
      auto r = unary(a[0].num, a[0].den);
      if (!r) return std::nullopt;
      return Rational{*r, integral ? 1 : a[0].den};
    });
  }
  return absl::OkStatus();
}

absl::Status BoolUnary(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  c.SetOutput(0, DType::kBool, c.in_shape(0));
  return absl::OkStatus();
}

absl::Status Mod(InferContext& c) {
  // fmod=0: the remainder takes the divisor's sign (DimMod); fmod=1: the dividend's (C's %).
  const bool fmod = c.node().attr_int("fmod", 0) != 0;
  auto mod =
      fmod ? Binary(false,
                    [](SymDim a, SymDim b) -> std::optional<SymDim> {
                      auto q = DimTruncDiv(a.expr(), b.expr());
                      if (!q) return std::nullopt;
                      auto qb = DimMul(*q, b.expr());
                      if (!qb) return std::nullopt;
                      return Lift(DimSub(a.expr(), *qb));
                    })
           : Binary(false, [](SymDim a, SymDim b) { return Lift(DimMod(a.expr(), b.expr())); });
  return mod(c);
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
    r.DefineShape(op, Unary).Batch(BatchClass::kUnary);
  }
  for (const char* op : {"Neg", "Abs", "Floor", "Ceil", "Round", "Relu"}) {
    r.DefineShape(op, KnownUnary).Batch(BatchClass::kUnary);
  }
  r.DefineShape("IsNaN", BoolUnary).Batch(BatchClass::kUnary);
  r.DefineShape("IsInf", BoolUnary).Batch(BatchClass::kUnary);
  r.DefineShape("Add", Binary(false, [](SymDim a, SymDim b) { return SymAdd(a, b); }))
      .Batch(BatchClass::kBroadcast);
  r.DefineShape("Sub", Binary(false, [](SymDim a, SymDim b) { return SymSub(a, b); }))
      .Batch(BatchClass::kBroadcast);
  // Checked: a saturated product must not be folded into a value the runtime would compute
  // differently (it wraps).
  r.DefineShape("Mul", Binary(false, [](SymDim a, SymDim b) { return SymMulChecked(a, b); }))
      .Batch(BatchClass::kBroadcast);
  r.DefineShape("Div", Binary(false, [](SymDim a, SymDim b) { return SymDiv(a, b); }))
      .Batch(BatchClass::kBroadcast);
  r.DefineShape("Pow", Binary(false, nullptr)).Batch(BatchClass::kBroadcast);
  r.DefineShape("Mod", Mod).Batch(BatchClass::kBroadcast);
  r.DefineShape("BitShift", Binary(false, nullptr)).Batch(BatchClass::kBroadcast);
  for (const char* op : {"And", "Or", "Xor"}) {
    r.DefineShape(op, Binary(true, nullptr)).Batch(BatchClass::kBroadcast);
  }
  for (const char* op : {"Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    r.DefineShape(op, Binary(true, nullptr)).Batch(BatchClass::kBroadcast);
  }
  r.DefineShape("Equal",
                Binary(true,
                       [](SymDim a, SymDim b) -> std::optional<SymDim> {
                         if (a == b) return SymDim::Const(1);
                         if (a.IsStatic() && b.IsStatic()) return SymDim::Const(0);
                         if ((a.IsStatic() && a.coef() <= 0) || (b.IsStatic() && b.coef() <= 0))
                           return SymDim::Const(0);
                         return std::nullopt;  // batch may or may not equal the constant.
                       }))
      .Batch(BatchClass::kBroadcast);
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) {
    r.DefineShape(op, Variadic).Batch(BatchClass::kBroadcast);
  }
  r.DefineShape("Where", Where).Batch(BatchClass::kBroadcast);
  r.DefineShape("Clip", Clip).Batch(BatchClass::kUnary);
  r.DefineShape("Cast", Cast).Batch(BatchClass::kUnary);
  r.DefineRewrite("CastLike", CastLike, "Cast").Batch(BatchClass::kUnary);
  r.DefineShape("PRelu", PRelu).Batch(BatchClass::kBroadcast);

  // What the host folds (constant_fold.cc): casts and tiny arithmetic between a size and its use.
  auto unary = [](double (*fn)(double, double)) { return HostFold{1, fn}; };
  auto binary = [](double (*fn)(double, double)) { return HostFold{2, fn}; };
  r.Row("Cast").Fold(HostFold{1, [](double a, double) { return a; }, false, /*to_bool=*/true});
  r.Row("Neg").Fold(unary([](double a, double) { return -a; }));
  r.Row("Ceil").Fold(unary([](double a, double) { return std::ceil(a); }));
  r.Row("Floor").Fold(unary([](double a, double) { return std::floor(a); }));
  r.Row("Abs").Fold(unary([](double a, double) { return std::fabs(a); }));
  r.Row("Relu").Fold(unary([](double a, double) { return std::max(a, 0.0); }));
  r.Row("Add").Fold(binary([](double a, double b) { return a + b; }));
  r.Row("Sub").Fold(binary([](double a, double b) { return a - b; }));
  r.Row("Mul").Fold(binary([](double a, double b) { return a * b; }));
  // Integer Div rounds differently across runtimes: floats only.
  r.Row("Div").Fold(HostFold{2, [](double a, double b) { return a / b; }, /*floats_only=*/true});
  r.Row("Max").Fold(binary([](double a, double b) { return std::max(a, b); }));
  r.Row("Min").Fold(binary([](double a, double b) { return std::min(a, b); }));
}

}  // namespace cuvil::ir
