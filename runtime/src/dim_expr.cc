#include "cuvil/runtime/dim_expr.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil {
namespace {

using Term = DimExpr::Term;
using Factor = DimExpr::Factor;
using AtomPtr = std::shared_ptr<const DimAtom>;

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

size_t Mix(size_t h, size_t v) { return h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)); }

template <typename T>
int Cmp(const T& a, const T& b) {
  return a < b ? -1 : (b < a ? 1 : 0);
}

int CompareAtoms(const DimAtom& a, const DimAtom& b) {
  if (&a == &b) return 0;
  if (int c = Cmp(a.kind, b.kind)) return c;
  if (a.kind == DimAtomKind::kSymbol) return Cmp(a.symbol, b.symbol);
  if (a.hash != b.hash) return Cmp(a.hash, b.hash);  // Cheap and consistent with equality.
  if (int c = Cmp(a.args.size(), b.args.size())) return c;
  for (size_t i = 0; i < a.args.size(); ++i) {
    if (int c = DimExpr::Compare(a.args[i], b.args[i])) return c;
  }
  return 0;
}

// Orders monomials (factor lists): lexicographic on (atom, power), shorter first.
int CompareMonomials(const std::vector<Factor>& a, const std::vector<Factor>& b) {
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (int c = CompareAtoms(*a[i].atom, *b[i].atom)) return c;
    if (int c = Cmp(a[i].power, b[i].power)) return c;
  }
  return Cmp(a.size(), b.size());
}

// A polynomial under construction: terms sorted by monomial, distinct, non-zero coefficients.
struct Poly {
  int64_t constant = 0;
  std::vector<Term> terms;
};

Poly ToPoly(const DimExpr& e) {
  Poly p;
  p.constant = e.constant_term();
  auto t = e.terms();
  p.terms.assign(t.begin(), t.end());
  return p;
}

int32_t TermNodes(const Term& t) {
  int32_t n = 1;
  for (const Factor& f : t.factors) n += f.atom->nodes;
  return n;
}

}  // namespace

// Builds canonical expressions; the one place that touches DimExpr's representation.
class DimExprBuilder {
 public:
  static std::optional<DimExpr> FromPoly(Poly p) {
    if (p.terms.empty()) return DimExpr(p.constant);
    int64_t nodes = 1;
    for (const Term& t : p.terms) nodes += TermNodes(t);
    if (nodes > kMaxDimExprNodes) return std::nullopt;
    return DimExpr(p.constant, std::make_shared<const std::vector<Term>>(std::move(p.terms)));
  }
};

namespace {

std::optional<DimExpr> FromPoly(Poly p) { return DimExprBuilder::FromPoly(std::move(p)); }

std::optional<DimExpr> AtomExpr(AtomPtr atom) {
  if (atom->nodes + 1 > kMaxDimExprNodes) return std::nullopt;
  Poly p;
  p.terms.push_back(Term{1, {Factor{std::move(atom), 1}}});
  return FromPoly(std::move(p));
}

bool ComputeNonNegative(DimAtomKind kind, const std::vector<DimExpr>& args) {
  switch (kind) {
    case DimAtomKind::kSymbol:
      return true;
    case DimAtomKind::kFloorDiv:
    case DimAtomKind::kTruncDiv:
      return args[0].IsProvablyNonNegative() && args[1].IsProvablyNonNegative();
    case DimAtomKind::kMin:
      return std::all_of(args.begin(), args.end(),
                         [](const DimExpr& a) { return a.IsProvablyNonNegative(); });
    case DimAtomKind::kMax:
      return std::any_of(args.begin(), args.end(),
                         [](const DimExpr& a) { return a.IsProvablyNonNegative(); });
  }
  return false;
}

std::optional<AtomPtr> MakeAtom(DimAtomKind kind, std::vector<DimExpr> args) {
  auto atom = std::make_shared<DimAtom>();
  atom->kind = kind;
  int64_t nodes = 1;
  size_t h = Mix(0, static_cast<size_t>(kind) + 1);
  for (const DimExpr& a : args) {
    nodes += a.NodeCount();
    h = Mix(h, a.Hash());
  }
  if (nodes > kMaxDimExprNodes) return std::nullopt;
  atom->nodes = static_cast<int32_t>(nodes);
  atom->hash = h;
  atom->non_negative = ComputeNonNegative(kind, args);
  atom->args = std::move(args);
  return AtomPtr(std::move(atom));
}

// Sum of two sorted term lists; nullopt on coefficient overflow.
std::optional<Poly> AddPolys(const Poly& a, const Poly& b) {
  Poly r;
  if (__builtin_add_overflow(a.constant, b.constant, &r.constant)) return std::nullopt;
  size_t i = 0, j = 0;
  while (i < a.terms.size() || j < b.terms.size()) {
    int c = i == a.terms.size()   ? 1
            : j == b.terms.size() ? -1
                                  : CompareMonomials(a.terms[i].factors, b.terms[j].factors);
    if (c < 0) {
      r.terms.push_back(a.terms[i++]);
    } else if (c > 0) {
      r.terms.push_back(b.terms[j++]);
    } else {
      int64_t coef = 0;
      if (__builtin_add_overflow(a.terms[i].coef, b.terms[j].coef, &coef)) return std::nullopt;
      if (coef != 0) r.terms.push_back(Term{coef, a.terms[i].factors});
      ++i;
      ++j;
    }
  }
  return r;
}

std::optional<Poly> NegPoly(const Poly& a) {
  Poly r = a;
  if (r.constant == kInt64Min) return std::nullopt;
  r.constant = -r.constant;
  for (Term& t : r.terms) {
    if (t.coef == kInt64Min) return std::nullopt;
    t.coef = -t.coef;
  }
  return r;
}

// Product of two monomials (sorted factor lists); nullopt when a power exceeds the caps.
std::optional<std::vector<Factor>> MulMonomials(const std::vector<Factor>& a,
                                                const std::vector<Factor>& b) {
  std::vector<Factor> r;
  r.reserve(a.size() + b.size());
  size_t i = 0, j = 0;
  int64_t degree = 0;
  while (i < a.size() || j < b.size()) {
    int c = i == a.size() ? 1 : j == b.size() ? -1 : CompareAtoms(*a[i].atom, *b[j].atom);
    if (c < 0) {
      r.push_back(a[i++]);
    } else if (c > 0) {
      r.push_back(b[j++]);
    } else {
      r.push_back(Factor{a[i].atom, a[i].power + b[j].power});
      ++i;
      ++j;
    }
    if (r.back().power > kMaxDimExprPower) return std::nullopt;
    degree += r.back().power;
  }
  if (degree > kMaxDimExprPower) return std::nullopt;
  return r;
}

std::optional<Poly> MulPolys(const Poly& a, const Poly& b) {
  // Every term of a (the constant as a term without factors) times every term of b.
  std::vector<Term> ta = a.terms, tb = b.terms;
  if (a.constant != 0) ta.push_back(Term{a.constant, {}});
  if (b.constant != 0) tb.push_back(Term{b.constant, {}});
  std::vector<Term> products;
  products.reserve(ta.size() * tb.size());
  for (const Term& x : ta) {
    for (const Term& y : tb) {
      Term t;
      if (__builtin_mul_overflow(x.coef, y.coef, &t.coef)) return std::nullopt;
      auto m = MulMonomials(x.factors, y.factors);
      if (!m) return std::nullopt;
      t.factors = std::move(*m);
      products.push_back(std::move(t));
    }
  }
  std::stable_sort(products.begin(), products.end(), [](const Term& x, const Term& y) {
    return CompareMonomials(x.factors, y.factors) < 0;
  });
  Poly r;
  for (Term& t : products) {
    if (t.factors.empty()) {
      if (__builtin_add_overflow(r.constant, t.coef, &r.constant)) return std::nullopt;
    } else if (!r.terms.empty() && CompareMonomials(r.terms.back().factors, t.factors) == 0) {
      if (__builtin_add_overflow(r.terms.back().coef, t.coef, &r.terms.back().coef)) {
        return std::nullopt;
      }
    } else {
      r.terms.push_back(std::move(t));
    }
  }
  std::erase_if(r.terms, [](const Term& t) { return t.coef == 0; });
  return r;
}

// gcd(a, b) for b > 0 and any a (INT64_MIN included, whose magnitude has no int64).
int64_t Gcd(int64_t b, int64_t a) {
  uint64_t x = a < 0 ? 0 - static_cast<uint64_t>(a) : static_cast<uint64_t>(a);
  return static_cast<int64_t>(std::gcd(static_cast<uint64_t>(b), x));
}

int64_t FloorDivInt(int64_t a, int64_t b) {  // b > 0
  int64_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

// The atom of e when e is exactly 1 * atom^1 (no constant).
const DimAtom* SoleAtom(const DimExpr& e) {
  auto t = e.terms();
  if (e.constant_term() != 0 || t.size() != 1 || t[0].coef != 1 || t[0].factors.size() != 1 ||
      t[0].factors[0].power != 1) {
    return nullptr;
  }
  return t[0].factors[0].atom.get();
}

std::optional<DimExpr> FloorDivConst(const DimExpr& num, int64_t c);

// floor(r / c) for c > 1, r with terms, r's constant in [0, c) and no term coefficient divisible
// by c: divides out the common factor of c and the coefficients, folds nested floors, and
// otherwise makes the atom.
std::optional<DimExpr> FloorDivReduced(Poly r, int64_t c) {
  int64_t g = c;
  for (const Term& t : r.terms) g = Gcd(g, t.coef);
  if (g > 1) {
    // floor((g*y + k) / (g*c')) == floor((y + floor(k/g)) / c') for integer y.
    for (Term& t : r.terms) t.coef /= g;
    r.constant /= g;
    c /= g;
    if (c == 1) return FromPoly(std::move(r));
  }
  auto re = FromPoly(r);
  if (!re) return std::nullopt;
  // floor((floor(x / d) + k) / c) == floor((x + k*d) / (d*c)) for positive constants d and c.
  if (r.terms.size() == 1 && r.terms[0].coef == 1 && r.terms[0].factors.size() == 1 &&
      r.terms[0].factors[0].power == 1) {
    const DimAtom& inner = *r.terms[0].factors[0].atom;
    if (inner.kind == DimAtomKind::kFloorDiv && inner.args[1].IsStatic()) {
      int64_t d = *inner.args[1].AsConstant(), dc = 0, kd = 0;
      if (!__builtin_mul_overflow(d, c, &dc) && !__builtin_mul_overflow(r.constant, d, &kd)) {
        auto x = DimAdd(inner.args[0], DimExpr(kd));
        if (x) return FloorDivConst(*x, dc);
      }
    }
  }
  auto atom = MakeAtom(DimAtomKind::kFloorDiv, {std::move(*re), DimExpr(c)});
  if (!atom) return std::nullopt;
  return AtomExpr(std::move(*atom));
}

// floor(num / c) for a constant c > 0.
std::optional<DimExpr> FloorDivConst(const DimExpr& num, int64_t c) {
  if (c == 1) return num;
  if (num.IsStatic()) return DimExpr(FloorDivInt(num.constant_term(), c));
  // num = c*q + r with r's coefficients not divisible by c and r's constant in [0, c); then
  // floor(num / c) == q + floor(r / c).
  Poly q, r;
  for (const Term& t : num.terms()) {
    if (t.coef % c == 0) {
      q.terms.push_back(Term{t.coef / c, t.factors});
    } else {
      r.terms.push_back(t);
    }
  }
  q.constant = FloorDivInt(num.constant_term(), c);
  int64_t qc = 0;
  if (__builtin_mul_overflow(q.constant, c, &qc)) return std::nullopt;
  r.constant = num.constant_term() - qc;
  auto qe = FromPoly(q);
  if (!qe) return std::nullopt;
  if (r.terms.empty()) return qe;
  if (r.terms[0].coef < 0) {
    // floor(-y / c) == -floor((y + c - 1) / c): numerators keep a positive leading coefficient.
    auto ny = NegPoly(r);
    if (!ny) return std::nullopt;
    ny->constant += c - 1;  // In [0, c) again, since r.constant was.
    auto inner = FloorDivReduced(std::move(*ny), c);
    if (!inner) return std::nullopt;
    return DimSub(*qe, *inner);
  }
  auto inner = FloorDivReduced(std::move(r), c);
  if (!inner) return std::nullopt;
  return DimAdd(*qe, *inner);
}

// a / b when b is a single term dividing every term of a exactly (so both divisions agree);
// nullopt otherwise. Assumes b != 0.
std::optional<DimExpr> ExactMonomialQuotient(const DimExpr& a, const DimExpr& b) {
  auto bt = b.terms();
  if (b.constant_term() != 0 || bt.size() != 1 || a.constant_term() != 0) return std::nullopt;
  const Term& d = bt[0];
  Poly q;
  for (const Term& t : a.terms()) {
    if ((t.coef == kInt64Min && d.coef == -1) || t.coef % d.coef != 0) return std::nullopt;
    Term r{t.coef / d.coef, {}};
    // Subtract d's powers from t's; every factor of d must appear in t with at least its power.
    size_t j = 0;
    for (const Factor& f : t.factors) {
      if (j < d.factors.size() && CompareAtoms(*f.atom, *d.factors[j].atom) == 0) {
        int32_t p = f.power - d.factors[j].power;
        if (p < 0) return std::nullopt;
        if (p > 0) r.factors.push_back(Factor{f.atom, p});
        ++j;
      } else {
        r.factors.push_back(f);
      }
    }
    if (j != d.factors.size()) return std::nullopt;
    if (r.factors.empty()) {
      if (__builtin_add_overflow(q.constant, r.coef, &q.constant)) return std::nullopt;
    } else {
      q.terms.push_back(std::move(r));
    }
  }
  // Dividing by one monomial keeps distinct monomials distinct but may reorder them.
  std::sort(q.terms.begin(), q.terms.end(), [](const Term& x, const Term& y) {
    return CompareMonomials(x.factors, y.factors) < 0;
  });
  return FromPoly(std::move(q));
}

// Evaluates one atom.
std::optional<int64_t> EvalAtom(const DimAtom& a, absl::Span<const int64_t> values) {
  switch (a.kind) {
    case DimAtomKind::kSymbol:
      if (a.symbol < 0 || static_cast<size_t>(a.symbol) >= values.size()) return std::nullopt;
      return values[a.symbol];
    case DimAtomKind::kFloorDiv:
    case DimAtomKind::kTruncDiv: {
      auto x = a.args[0].Eval(values), y = a.args[1].Eval(values);
      if (!x || !y || *y == 0) return std::nullopt;
      if (*x == kInt64Min && *y == -1) {
        if (a.kind == DimAtomKind::kTruncDiv) return kInt64Min;
        return std::nullopt;
      }
      int64_t q = *x / *y;
      if (a.kind == DimAtomKind::kFloorDiv && *x % *y != 0 && ((*x < 0) != (*y < 0))) --q;
      return q;
    }
    case DimAtomKind::kMin:
    case DimAtomKind::kMax: {
      std::optional<int64_t> best;
      for (const DimExpr& e : a.args) {
        auto v = e.Eval(values);
        if (!v) return std::nullopt;
        if (!best || (a.kind == DimAtomKind::kMin ? *v < *best : *v > *best)) best = v;
      }
      return best;
    }
  }
  return std::nullopt;
}

void CollectSymbols(const DimExpr& e, std::vector<int32_t>* out) {
  for (const Term& t : e.terms()) {
    for (const Factor& f : t.factors) {
      if (f.atom->kind == DimAtomKind::kSymbol) {
        out->push_back(f.atom->symbol);
      } else {
        for (const DimExpr& a : f.atom->args) CollectSymbols(a, out);
      }
    }
  }
}

// Prints an operand: parenthesised unless it is a constant or a single unscaled atom.
std::string Operand(const DimExpr& e) {
  if (e.IsStatic() || SoleAtom(e) != nullptr) return e.ToString();
  return absl::StrCat("(", e.ToString(), ")");
}

std::string AtomToString(const DimAtom& a) {
  switch (a.kind) {
    case DimAtomKind::kSymbol:
      return a.name.empty() ? absl::StrCat("s", a.symbol) : a.name;
    case DimAtomKind::kFloorDiv:
      return absl::StrCat("floor(", Operand(a.args[0]), " / ", Operand(a.args[1]), ")");
    case DimAtomKind::kTruncDiv:
      return absl::StrCat("trunc(", Operand(a.args[0]), " / ", Operand(a.args[1]), ")");
    case DimAtomKind::kMin:
    case DimAtomKind::kMax:
      return absl::StrCat(
          a.kind == DimAtomKind::kMin ? "min(" : "max(",
          absl::StrJoin(a.args, ", ",
                        [](std::string* out, const DimExpr& e) { out->append(e.ToString()); }),
          ")");
  }
  return "?";
}

// The operands of a min (or max) to merge: a nested min of the same kind plus a constant
// contributes its operands shifted by that constant (min(x, y) + k == min(x + k, y + k)).
bool FlattenInto(DimAtomKind kind, const DimExpr& e, std::vector<DimExpr>* out) {
  auto t = e.terms();
  if (t.size() == 1 && t[0].coef == 1 && t[0].factors.size() == 1 && t[0].factors[0].power == 1 &&
      t[0].factors[0].atom->kind == kind) {
    for (const DimExpr& a : t[0].factors[0].atom->args) {
      auto shifted = DimAdd(a, DimExpr(e.constant_term()));
      if (!shifted) return false;
      out->push_back(std::move(*shifted));
    }
    return true;
  }
  out->push_back(e);
  return true;
}

std::optional<DimExpr> MinMax(DimAtomKind kind, const DimExpr& a, const DimExpr& b) {
  std::vector<DimExpr> ops;
  if (!FlattenInto(kind, a, &ops) || !FlattenInto(kind, b, &ops)) return std::nullopt;
  // `x dominates y` when x is never the answer: x >= y for min, x <= y for max.
  auto dominated = [&](const DimExpr& x, const DimExpr& y) {
    auto d = kind == DimAtomKind::kMin ? DimSub(x, y) : DimSub(y, x);
    return d.has_value() && d->IsProvablyNonNegative();
  };
  std::vector<DimExpr> kept;
  for (DimExpr& x : ops) {
    if (std::any_of(kept.begin(), kept.end(), [&](const DimExpr& y) { return dominated(x, y); })) {
      continue;
    }
    std::erase_if(kept, [&](const DimExpr& y) { return dominated(y, x); });
    kept.push_back(std::move(x));
  }
  if (kept.size() == 1) return kept[0];
  // Pull the smallest constant term out so that shifted operand lists share one atom.
  int64_t k = kept[0].constant_term();
  for (const DimExpr& x : kept) k = std::min(k, x.constant_term());
  for (DimExpr& x : kept) {
    auto shifted = DimSub(x, DimExpr(k));
    if (!shifted) return std::nullopt;
    x = std::move(*shifted);
  }
  std::sort(kept.begin(), kept.end(),
            [](const DimExpr& x, const DimExpr& y) { return DimExpr::Compare(x, y) < 0; });
  auto atom = MakeAtom(kind, std::move(kept));
  if (!atom) return std::nullopt;
  auto e = AtomExpr(std::move(*atom));
  if (!e) return std::nullopt;
  return DimAdd(*e, DimExpr(k));
}

std::optional<DimExpr> Power(const DimExpr& base, int32_t power) {
  DimExpr r(1);
  for (int32_t i = 0; i < power; ++i) {
    auto next = DimMul(r, base);
    if (!next) return std::nullopt;
    r = std::move(*next);
  }
  return r;
}

}  // namespace

DimExpr DimExpr::Symbol(int32_t id, std::string name) {
  auto atom = std::make_shared<DimAtom>();
  atom->kind = DimAtomKind::kSymbol;
  atom->symbol = id;
  atom->name = std::move(name);
  atom->hash = Mix(0x5eed, static_cast<size_t>(id));
  atom->non_negative = true;
  Poly p;
  p.terms.push_back(Term{1, {Factor{std::move(atom), 1}}});
  return *DimExprBuilder::FromPoly(std::move(p));
}

absl::Span<const DimExpr::Term> DimExpr::terms() const {
  if (terms_ == nullptr) return {};
  return *terms_;
}

std::optional<int32_t> DimExpr::AsSymbol() const {
  const DimAtom* a = SoleAtom(*this);
  if (a == nullptr || a->kind != DimAtomKind::kSymbol) return std::nullopt;
  return a->symbol;
}

std::vector<int32_t> DimExpr::Symbols() const {
  std::vector<int32_t> out;
  CollectSymbols(*this, &out);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

int32_t DimExpr::SymbolCount() const {
  auto s = Symbols();
  return s.empty() ? 0 : s.back() + 1;
}

std::optional<int64_t> DimExpr::Eval(absl::Span<const int64_t> values) const {
  int64_t sum = constant_;
  for (const Term& t : terms()) {
    int64_t prod = t.coef;
    for (const Factor& f : t.factors) {
      auto v = EvalAtom(*f.atom, values);
      if (!v) return std::nullopt;
      for (int32_t p = 0; p < f.power; ++p) {
        if (__builtin_mul_overflow(prod, *v, &prod)) return std::nullopt;
      }
    }
    if (__builtin_add_overflow(sum, prod, &sum)) return std::nullopt;
  }
  return sum;
}

bool DimExpr::IsProvablyNonNegative() const {
  if (constant_ < 0) return false;
  for (const Term& t : terms()) {
    if (t.coef < 0) return false;
    for (const Factor& f : t.factors) {
      if (!f.atom->non_negative && f.power % 2 != 0) return false;
    }
  }
  return true;
}

std::string DimExpr::ToString() const {
  std::string out;
  for (const Term& t : terms()) {
    int64_t coef = t.coef;
    if (out.empty()) {
      if (coef < 0) out += "-";
    } else {
      out += coef < 0 ? " - " : " + ";
    }
    // |coef| without overflow for INT64_MIN.
    uint64_t mag = coef < 0 ? 0 - static_cast<uint64_t>(coef) : static_cast<uint64_t>(coef);
    std::vector<std::string> parts;
    if (mag != 1) parts.push_back(absl::StrCat(mag));
    for (const Factor& f : t.factors) {
      std::string a = AtomToString(*f.atom);
      parts.push_back(f.power == 1 ? a : absl::StrCat(a, "^", f.power));
    }
    out += absl::StrJoin(parts, "*");
  }
  if (out.empty()) return absl::StrCat(constant_);
  if (constant_ > 0) absl::StrAppend(&out, " + ", constant_);
  if (constant_ < 0) {
    absl::StrAppend(&out, " - ", 0 - static_cast<uint64_t>(constant_));
  }
  return out;
}

int32_t DimExpr::NodeCount() const {
  int32_t n = 1;
  for (const Term& t : terms()) n += TermNodes(t);
  return n;
}

size_t DimExpr::Hash() const {
  size_t h = Mix(0, static_cast<size_t>(constant_));
  for (const Term& t : terms()) {
    h = Mix(h, static_cast<size_t>(t.coef));
    for (const Factor& f : t.factors) h = Mix(Mix(h, f.atom->hash), f.power);
  }
  return h;
}

int DimExpr::Compare(const DimExpr& a, const DimExpr& b) {
  if (int c = Cmp(a.constant_, b.constant_)) return c;
  if (a.terms_ == b.terms_) return 0;
  auto ta = a.terms(), tb = b.terms();
  if (int c = Cmp(ta.size(), tb.size())) return c;
  for (size_t i = 0; i < ta.size(); ++i) {
    if (int c = CompareMonomials(ta[i].factors, tb[i].factors)) return c;
    if (int c = Cmp(ta[i].coef, tb[i].coef)) return c;
  }
  return 0;
}

std::optional<DimExpr> DimAdd(const DimExpr& a, const DimExpr& b) {
  if (a.IsStatic() && b.IsStatic()) {
    int64_t r = 0;
    if (__builtin_add_overflow(a.constant_term(), b.constant_term(), &r)) return std::nullopt;
    return DimExpr(r);
  }
  auto p = AddPolys(ToPoly(a), ToPoly(b));
  if (!p) return std::nullopt;
  return FromPoly(std::move(*p));
}

std::optional<DimExpr> DimNeg(const DimExpr& a) {
  auto p = NegPoly(ToPoly(a));
  if (!p) return std::nullopt;
  return FromPoly(std::move(*p));
}

std::optional<DimExpr> DimSub(const DimExpr& a, const DimExpr& b) {
  auto nb = DimNeg(b);
  if (!nb) return std::nullopt;
  return DimAdd(a, *nb);
}

std::optional<DimExpr> DimMul(const DimExpr& a, const DimExpr& b) {
  if (a.IsStatic() && b.IsStatic()) {
    int64_t r = 0;
    if (__builtin_mul_overflow(a.constant_term(), b.constant_term(), &r)) return std::nullopt;
    return DimExpr(r);
  }
  auto p = MulPolys(ToPoly(a), ToPoly(b));
  if (!p) return std::nullopt;
  return FromPoly(std::move(*p));
}

std::optional<DimExpr> DimFloorDiv(const DimExpr& a, const DimExpr& b) {
  if (b.IsStatic()) {
    int64_t c = b.constant_term();
    if (c == 0 || c == kInt64Min) return std::nullopt;
    if (c > 0) return FloorDivConst(a, c);
    // floor(a / -c) == floor(-a / c).
    auto na = DimNeg(a);
    if (!na) return std::nullopt;
    return FloorDivConst(*na, -c);
  }
  if (a == DimExpr(0)) return DimExpr(0);
  if (a == b) return DimExpr(1);
  if (auto q = ExactMonomialQuotient(a, b)) return q;
  auto bt = b.terms();
  if (b.constant_term() == 0 && bt.size() == 1 && bt[0].coef < 0) {
    // floor(a / b) == floor(-a / -b): divisors keep a positive coefficient.
    auto na = DimNeg(a), nb = DimNeg(b);
    if (!na || !nb) return std::nullopt;
    return DimFloorDiv(*na, *nb);
  }
  auto atom = MakeAtom(DimAtomKind::kFloorDiv, {a, b});
  if (!atom) return std::nullopt;
  return AtomExpr(std::move(*atom));
}

std::optional<DimExpr> DimCeilDiv(const DimExpr& a, const DimExpr& b) {
  auto na = DimNeg(a);
  if (!na) return std::nullopt;
  auto q = DimFloorDiv(*na, b);
  if (!q) return std::nullopt;
  return DimNeg(*q);
}

std::optional<DimExpr> DimTruncDiv(const DimExpr& a, const DimExpr& b) {
  if (b.IsStatic()) {
    int64_t c = b.constant_term();
    if (c == 0) return std::nullopt;
    if (a.IsStatic()) {
      int64_t x = a.constant_term();
      if (x == kInt64Min && c == -1) return DimExpr(kInt64Min);  // Wraps, as the hardware does.
      return DimExpr(x / c);
    }
    if (c == 1) return a;
    if (c < 0 && c != kInt64Min) {
      // a / -c == -(a / c) when rounding toward zero.
      auto q = DimTruncDiv(a, DimExpr(-c));
      if (!q) return std::nullopt;
      return DimNeg(*q);
    }
  }
  if (a == DimExpr(0)) return DimExpr(0);
  if (!b.IsStatic() && a == b) return DimExpr(1);
  if (b.IsStatic() && b.constant_term() > 0) {
    int64_t c = b.constant_term();
    bool exact = a.constant_term() % c == 0;
    for (const DimExpr::Term& t : a.terms()) exact = exact && t.coef % c == 0;
    if (exact) return FloorDivConst(a, c);  // Exact: every rounding agrees.
  } else if (auto q = ExactMonomialQuotient(a, b)) {
    return q;
  }
  if (b.IsProvablyNonNegative()) {
    // Both roundings agree for a non-negative numerator; for a non-positive one,
    // trunc(a / b) == -floor(-a / b).
    if (a.IsProvablyNonNegative()) return DimFloorDiv(a, b);
    auto na = DimNeg(a);
    if (na && na->IsProvablyNonNegative()) {
      auto q = DimFloorDiv(*na, b);
      if (!q) return std::nullopt;
      return DimNeg(*q);
    }
  }
  auto atom = MakeAtom(DimAtomKind::kTruncDiv, {a, b});
  if (!atom) return std::nullopt;
  return AtomExpr(std::move(*atom));
}

std::optional<DimExpr> DimMod(const DimExpr& a, const DimExpr& b) {
  auto q = DimFloorDiv(a, b);
  if (!q) return std::nullopt;
  auto bq = DimMul(b, *q);
  if (!bq) return std::nullopt;
  return DimSub(a, *bq);
}

std::optional<DimExpr> DimMin(const DimExpr& a, const DimExpr& b) {
  return MinMax(DimAtomKind::kMin, a, b);
}

std::optional<DimExpr> DimMax(const DimExpr& a, const DimExpr& b) {
  return MinMax(DimAtomKind::kMax, a, b);
}

std::optional<DimExpr> DimSubstitute(const DimExpr& e, int32_t id, const DimExpr& value) {
  std::optional<DimExpr> sum = DimExpr(e.constant_term());
  for (const DimExpr::Term& t : e.terms()) {
    std::optional<DimExpr> prod = DimExpr(t.coef);
    for (const DimExpr::Factor& f : t.factors) {
      const DimAtom& a = *f.atom;
      std::optional<DimExpr> x;
      if (a.kind == DimAtomKind::kSymbol) {
        x = a.symbol == id ? value : DimExpr::Symbol(a.symbol, a.name);
      } else {
        std::vector<DimExpr> args;
        for (const DimExpr& arg : a.args) {
          auto s = DimSubstitute(arg, id, value);
          if (!s) return std::nullopt;
          args.push_back(std::move(*s));
        }
        switch (a.kind) {
          case DimAtomKind::kFloorDiv:
            x = DimFloorDiv(args[0], args[1]);
            break;
          case DimAtomKind::kTruncDiv:
            x = DimTruncDiv(args[0], args[1]);
            break;
          case DimAtomKind::kMin:
          case DimAtomKind::kMax:
            x = args[0];
            for (size_t i = 1; i < args.size() && x; ++i) {
              x = a.kind == DimAtomKind::kMin ? DimMin(*x, args[i]) : DimMax(*x, args[i]);
            }
            break;
          case DimAtomKind::kSymbol:
            break;
        }
      }
      if (!x) return std::nullopt;
      auto p = Power(*x, f.power);
      if (!p) return std::nullopt;
      prod = DimMul(*prod, *p);
      if (!prod) return std::nullopt;
    }
    sum = DimAdd(*sum, *prod);
    if (!sum) return std::nullopt;
  }
  return sum;
}

}  // namespace cuvil
