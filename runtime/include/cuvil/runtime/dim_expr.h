// Symbolic dimension expressions over any number of named free dimensions.
//
// A DimExpr is an integer-valued expression in canonical form: a polynomial with int64
// coefficients whose variables ("atoms") are either free symbols (a model's batch, seq, H, W, ...)
// or opaque sub-expressions that a polynomial cannot express: floor division, truncating division,
// min and max of DimExprs. Every constructor below simplifies to the canonical form, so two
// expressions that the rules prove equal compare equal with ==, e.g.
//   floor((H - 1) / 2) + 1  ==  floor((H + 1) / 2)
//   (H + 2*1 - 3) / 1 + 1   ==  H
//   min(s + 3, s + 5)       ==  s + 3
// The rules are sound but not complete (equality of such expressions is undecidable in general);
// an unproven equality simply compares unequal.
//
// Symbols stand for tensor dimensions and are assumed non-negative; that assumption lets
// truncating division of dimensions become floor division and lets min/max drop dominated
// operands. Values are immutable and share their sub-expressions, so copies are cheap.
#ifndef CUVIL_RUNTIME_DIM_EXPR_H_
#define CUVIL_RUNTIME_DIM_EXPR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"

namespace cuvil {

class DimExpr;

// Kinds of polynomial variables.
enum class DimAtomKind : uint8_t {
  kSymbol = 0,    // A free dimension, identified by its id within a model.
  kFloorDiv = 1,  // floor(args[0] / args[1]); args[1] is a positive constant or symbolic.
  kTruncDiv = 2,  // args[0] / args[1] rounded toward zero (C and ONNX integer Div).
  kMin = 3,       // min(args...), at least two operands, sorted, none dominated.
  kMax = 4,       // max(args...), as kMin.
};

// One polynomial variable. Immutable once built; shared between expressions.
struct DimAtom;

// Largest power of one atom within a term, and largest total degree of a term. Shapes need
// degree 1 or 2; the caps keep evaluation and code generation bounded for hostile models.
inline constexpr int32_t kMaxDimExprPower = 16;
// Largest expression (atoms plus terms, counted over the whole tree). An operation whose result
// would be larger fails (nullopt) instead of growing without bound.
inline constexpr int32_t kMaxDimExprNodes = 4096;

// A canonical dimension expression. Thread-compatible value type (immutable; copies share nodes,
// and concurrent reads of shared nodes are safe).
class DimExpr {
 public:
  // x^power within a term; atoms are sorted and distinct within a term.
  struct Factor {
    std::shared_ptr<const DimAtom> atom;
    int32_t power = 1;
  };
  // coef * product of factors; factors is never empty (the constant term is kept apart).
  struct Term {
    int64_t coef = 0;
    std::vector<Factor> factors;
  };

  // The constant 0.
  DimExpr() = default;
  // The constant v (implicit so that shape code can mix literals and expressions).
  DimExpr(int64_t v) : constant_(v) {}  // NOLINT(google-explicit-constructor)

  // A constant.
  static DimExpr Const(int64_t v) { return DimExpr(v); }
  // The free symbol number `id` (>= 0; the index into the values Eval takes), printed as `name`.
  // Two symbols are the same exactly when their ids are; callers give one id one name.
  static DimExpr Symbol(int32_t id, std::string name);

  // True when the expression has no symbols (it is a constant).
  bool IsStatic() const { return terms_ == nullptr; }
  // The value of a static expression; nullopt when it has symbols.
  std::optional<int64_t> AsConstant() const {
    if (!IsStatic()) return std::nullopt;
    return constant_;
  }
  // The constant term of the polynomial (the whole value for a static expression).
  int64_t constant_term() const { return constant_; }
  // The non-constant terms, sorted canonically; empty for a static expression.
  absl::Span<const Term> terms() const;
  // When the expression is exactly one symbol (coefficient 1, power 1, no constant), its id.
  std::optional<int32_t> AsSymbol() const;

  // Ids of every symbol the expression mentions (including inside divisions and min/max),
  // ascending and without duplicates.
  std::vector<int32_t> Symbols() const;
  // Highest symbol id mentioned plus one (0 for a static expression): the length of the value
  // array Eval needs.
  int32_t SymbolCount() const;

  // The value for the given symbol values (values[id] for symbol id). nullopt when a symbol id is
  // out of range, a division by zero occurs, or an intermediate overflows int64. Truncating
  // division of INT64_MIN by -1 wraps to INT64_MIN, as the generated code does.
  std::optional<int64_t> Eval(absl::Span<const int64_t> values) const;

  // True when the rules prove the value >= 0 for every non-negative assignment of the symbols.
  bool IsProvablyNonNegative() const;

  // Renders canonically, e.g. "2*batch*seq + 3", "floor((H + 1) / 2)", "min(s, 7)".
  std::string ToString() const;

  // Number of atoms plus terms over the whole tree (bounded by kMaxDimExprNodes).
  int32_t NodeCount() const;

  // Structural hash, consistent with ==.
  size_t Hash() const;
  template <typename H>
  friend H AbslHashValue(H h, const DimExpr& e) {
    return H::combine(std::move(h), e.Hash());
  }

  // Structural equality of canonical forms.
  friend bool operator==(const DimExpr& a, const DimExpr& b) { return Compare(a, b) == 0; }
  friend bool operator!=(const DimExpr& a, const DimExpr& b) { return !(a == b); }
  // A total order consistent with == (for sorting and canonical operand order); -1, 0 or 1.
  static int Compare(const DimExpr& a, const DimExpr& b);

 private:
  friend class DimExprBuilder;
  DimExpr(int64_t constant, std::shared_ptr<const std::vector<Term>> terms)
      : constant_(constant), terms_(std::move(terms)) {}

  int64_t constant_ = 0;
  // Non-empty when set; null for a static expression.
  std::shared_ptr<const std::vector<Term>> terms_;
};

struct DimAtom {
  DimAtomKind kind = DimAtomKind::kSymbol;
  int32_t symbol = -1;        // kSymbol: the id.
  std::string name;           // kSymbol: the printed name.
  std::vector<DimExpr> args;  // Operands of the other kinds.
  int32_t nodes = 1;          // NodeCount of this atom's subtree.
  size_t hash = 0;            // Structural hash of this atom.
  bool non_negative = false;  // Proven >= 0 for non-negative symbols.
};

// Arithmetic. Each returns the canonical result, or nullopt when a coefficient overflows int64,
// the result would exceed kMaxDimExprNodes or a power kMaxDimExprPower, or (for divisions) the
// divisor is the constant 0.
std::optional<DimExpr> DimAdd(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> DimSub(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> DimNeg(const DimExpr& a);
std::optional<DimExpr> DimMul(const DimExpr& a, const DimExpr& b);
// floor(a / b) (rounding toward negative infinity, Python's //).
std::optional<DimExpr> DimFloorDiv(const DimExpr& a, const DimExpr& b);
// ceil(a / b).
std::optional<DimExpr> DimCeilDiv(const DimExpr& a, const DimExpr& b);
// a / b rounded toward zero (C, ONNX integer Div).
std::optional<DimExpr> DimTruncDiv(const DimExpr& a, const DimExpr& b);
// a - b * floor(a / b): the remainder with the divisor's sign (ONNX Mod with fmod=0).
std::optional<DimExpr> DimMod(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> DimMin(const DimExpr& a, const DimExpr& b);
std::optional<DimExpr> DimMax(const DimExpr& a, const DimExpr& b);
// Replaces symbol `id` with `value` everywhere and re-simplifies.
std::optional<DimExpr> DimSubstitute(const DimExpr& e, int32_t id, const DimExpr& value);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_DIM_EXPR_H_
