#include "cuvil/runtime/symbolic_dim.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// a * b clamped to the int64 range.
int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t r = 0;
  if (!__builtin_mul_overflow(a, b, &r)) return r;
  return (a < 0) != (b < 0) ? kInt64Min : kInt64Max;
}

// batch^p for p in [1, kMaxSymPower], built once: each DimExpr::Symbol allocates its atom, and
// sharing one atom keeps every SymDim's batch the same node.
const DimExpr& BatchPower(int32_t p) {
  static const std::vector<DimExpr>* const kPowers = [] {
    auto* v = new std::vector<DimExpr>;
    DimExpr batch = DimExpr::Symbol(0, "batch");
    DimExpr r(1);
    v->push_back(r);
    // batch^i for i <= kMaxSymPower == kMaxDimExprPower: never fails.
    for (int32_t i = 1; i <= kMaxSymPower; ++i) v->push_back(r = *DimMul(r, batch));
    return v;
  }();
  return (*kPowers)[p];
}

}  // namespace

SymDim::SymDim(int64_t coef, int32_t power) {
  if (coef == 0 || power <= 0) {
    expr_ = DimExpr(coef);
    return;
  }
  // A constant times batch^p (one term, coefficient 1) cannot overflow or grow too large.
  expr_ = *DimMul(DimExpr(coef), BatchPower(std::min(power, kMaxSymPower)));
}

SymDim SymDim::Symbol(int32_t id, const std::string& name) {
  if (id == 0 && name == "batch") return Batch();
  return SymDim(DimExpr::Symbol(id, name));
}

bool SymDim::IsMonomial() const {
  if (expr_.IsStatic()) return true;
  auto terms = expr_.terms();
  if (expr_.constant_term() != 0 || terms.size() != 1 || terms[0].factors.size() != 1) {
    return false;
  }
  const DimAtom& a = *terms[0].factors[0].atom;
  return a.kind == DimAtomKind::kSymbol && a.symbol == 0;
}

int64_t SymDim::coef() const {
  if (expr_.IsStatic()) return expr_.constant_term();
  if (!IsMonomial()) return 0;
  return expr_.terms()[0].coef;
}

int32_t SymDim::power() const {
  if (expr_.IsStatic()) return 0;
  if (!IsMonomial()) return -1;
  return expr_.terms()[0].factors[0].power;
}

int64_t SymDim::Eval(int64_t batch) const {
  if (!IsMonomial()) {
    const int64_t values[] = {batch};
    return expr_.Eval(values).value_or(kInt64Max);
  }
  int64_t v = coef();
  const int32_t p = power();
  for (int i = 0; i < p && v != 0; ++i) v = SaturatingMul(v, batch);
  return v;
}

std::string SymDim::ToString(const std::string& symbol) const {
  if (IsStatic()) return absl::StrCat(coef());
  if (!IsMonomial()) return expr_.ToString();
  const int32_t p = power();
  std::string sym = p == 1 ? symbol : absl::StrCat(symbol, "^", p);
  if (coef() == 1) return sym;
  return absl::StrCat(coef(), "*", sym);
}

std::optional<SymDim> SymMulChecked(SymDim a, SymDim b) {
  if (!a.IsMonomial() || !b.IsMonomial()) {
    auto r = DimMul(a.expr(), b.expr());
    if (!r) return std::nullopt;
    return SymDim(*std::move(r));
  }
  if (a.coef() == 0 || b.coef() == 0) return SymDim::Const(0);
  int64_t coef = 0;
  // Powers are non-negative and at most kMaxSymPower, so their sum cannot overflow.
  if (__builtin_mul_overflow(a.coef(), b.coef(), &coef)) return std::nullopt;
  const int32_t power = a.power() + b.power();
  if (power > kMaxSymPower || power < 0) return std::nullopt;
  return SymDim(coef, power);
}

SymDim SymMul(SymDim a, SymDim b) {
  if (auto r = SymMulChecked(a, b)) return *r;
  if (!a.IsMonomial() || !b.IsMonomial()) return SymDim(kInt64Max, kMaxSymPower);
  int32_t power = a.power() + b.power();
  if (power > kMaxSymPower || power < 0) power = kMaxSymPower;
  return SymDim((a.coef() < 0) != (b.coef() < 0) ? kInt64Min : kInt64Max, power);
}

namespace {

std::optional<SymDim> General(std::optional<DimExpr> e) {
  if (!e) return std::nullopt;
  return SymDim(*std::move(e));
}

}  // namespace

std::optional<SymDim> SymAdd(SymDim a, SymDim b) {
  if (!a.IsMonomial() || !b.IsMonomial() || a.power() != b.power()) {
    if (a.IsStatic() && a.coef() == 0) return b;
    if (b.IsStatic() && b.coef() == 0) return a;
    return General(DimAdd(a.expr(), b.expr()));
  }
  if (a.coef() == 0) return b;
  if (b.coef() == 0) return a;
  int64_t coef = 0;
  if (__builtin_add_overflow(a.coef(), b.coef(), &coef)) return std::nullopt;
  return SymDim(coef, a.power());
}

std::optional<SymDim> SymSub(SymDim a, SymDim b) {
  if (!a.IsMonomial() || !b.IsMonomial()) return General(DimSub(a.expr(), b.expr()));
  if (b.coef() == kInt64Min) return std::nullopt;  // -b would overflow.
  return SymAdd(a, SymDim(-b.coef(), b.power()));
}

std::optional<SymDim> SymDiv(SymDim a, SymDim b) {
  if (b.IsStatic() && b.coef() == 0) return std::nullopt;
  if (a.IsMonomial() && b.IsMonomial()) {
    if (a.coef() == 0) return SymDim::Const(0);
    if (b.coef() == -1) {
      // a / -1 is -a; INT64_MIN has no negation, so wrap like two's-complement hardware (numpy).
      if (a.power() != b.power() && a.coef() == kInt64Min) return std::nullopt;
      int64_t neg = a.coef() == kInt64Min ? kInt64Min : -a.coef();
      return a.power() == b.power() ? SymDim::Const(neg) : SymDim(neg, a.power() - b.power());
    }
    if (a.power() == b.power() && a.power() == 0) return SymDim::Const(a.coef() / b.coef());
    if (a.power() >= b.power() && a.coef() % b.coef() == 0) {
      return a.power() == b.power() ? SymDim::Const(a.coef() / b.coef())
                                    : SymDim(a.coef() / b.coef(), a.power() - b.power());
    }
  }
  return General(DimTruncDiv(a.expr(), b.expr()));
}

std::optional<SymDim> SymFloorDiv(SymDim a, SymDim b) {
  if (b.IsStatic() && b.coef() == 0) return std::nullopt;
  auto e = DimFloorDiv(a.expr(), b.expr());
  if (!e) return std::nullopt;
  SymDim r(*std::move(e));
  // Keep the monomial form where the quotient is one (its expression is the same either way).
  if (auto m = ToSymDim(r.expr()); m) return *m;
  return r;
}

SymDim SymNumElements(const SymShape& shape) {
  SymDim n = SymDim::Const(1);
  for (const SymDim& d : shape) n = SymMul(n, d);
  return n;
}

std::optional<SymDim> SymNumElementsChecked(const SymShape& shape) {
  SymDim n = SymDim::Const(1);
  for (const SymDim& d : shape) {
    auto next = SymMulChecked(n, d);
    if (!next) return std::nullopt;
    n = *next;
  }
  return n;
}

std::vector<int64_t> EvalShape(const SymShape& shape, int64_t batch) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const SymDim& d : shape) out.push_back(d.Eval(batch));
  return out;
}

std::optional<std::vector<int64_t>> EvalShape(const SymShape& shape,
                                              absl::Span<const int64_t> syms) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const SymDim& d : shape) {
    auto v = d.Eval(syms);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

int32_t SymbolCount(const SymShape& shape) {
  int32_t n = 0;
  for (const SymDim& d : shape) n = std::max(n, d.expr().SymbolCount());
  return n;
}

std::string SymShapeToString(const SymShape& shape, const std::string& symbol) {
  return absl::StrCat(
      "[",
      absl::StrJoin(shape, ",",
                    [&](std::string* out, const SymDim& d) { out->append(d.ToString(symbol)); }),
      "]");
}

bool IsStaticShape(const SymShape& shape) {
  for (const SymDim& d : shape) {
    if (!d.IsStatic()) return false;
  }
  return true;
}

DimExpr ToDimExpr(const SymDim& d, int32_t id, const std::string& name) {
  if (d.IsStatic() || (id == 0 && name == "batch") || !d.IsMonomial()) return d.expr();
  DimExpr sym = DimExpr::Symbol(id, name);
  DimExpr r(d.coef());
  // coef * batch^power with power <= kMaxSymPower == kMaxDimExprPower: never fails.
  for (int32_t i = 0; i < d.power(); ++i) r = *DimMul(r, sym);
  return r;
}

std::optional<SymDim> ToSymDim(const DimExpr& e, int32_t id) {
  if (e.IsStatic()) return SymDim::Const(e.constant_term());
  auto terms = e.terms();
  if (e.constant_term() != 0 || terms.size() != 1 || terms[0].factors.size() != 1) {
    return std::nullopt;
  }
  const DimExpr::Factor& f = terms[0].factors[0];
  if (f.atom->kind != DimAtomKind::kSymbol || f.atom->symbol != id) return std::nullopt;
  return SymDim(terms[0].coef, f.power);
}

}  // namespace cuvil
