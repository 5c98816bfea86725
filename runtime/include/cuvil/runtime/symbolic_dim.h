// Dimensions of the IR: constants or expressions in a model's free dimensions.
//
// Symbol 0 is the batch (usually named "batch"); a model may have more free dimensions (seq,
// height, width), each a symbol of its own. Most dims of most models are constants or the
// monomial coef * batch^power, and the passes that care about the batch (batch splitting, the
// linear memory plan) read that form through coef()/power(). Any other value (seq, batch*seq,
// floor((H + 1) / 2)) is a general DimExpr; the arithmetic below keeps the monomial form when it
// can and falls back to DimExpr arithmetic otherwise.
#ifndef CUVIL_RUNTIME_SYMBOLIC_DIM_H_
#define CUVIL_RUNTIME_SYMBOLIC_DIM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "cuvil/runtime/dim_expr.h"

namespace cuvil {

// Largest power of the symbolic dimension a SymDim may carry. Real models need batch^1 (rarely
// batch^2 in shape arithmetic); a cap keeps Eval and code generation (one multiply per power)
// bounded for hostile models that square a shape value repeatedly.
inline constexpr int32_t kMaxSymPower = 16;

// A dimension of the IR, held as a DimExpr. IsMonomial() tells whether it is a constant or
// coef * batch^power (symbol 0); coef()/power() read that form. Thread-compatible value type
// (immutable DimExpr nodes are shared between copies).
class SymDim {
 public:
  // The constant 0.
  SymDim() = default;
  // coef * batch^power; power in [0, kMaxSymPower] (clamped), a zero coef gives the constant 0.
  SymDim(int64_t coef, int32_t power);

  // Any expression (e.g. a symbol other than the batch).
  explicit SymDim(DimExpr e) : expr_(std::move(e)) {}

  static SymDim Const(int64_t v) { return SymDim(v, 0); }
  static SymDim Batch(int64_t coef = 1) { return SymDim(coef, 1); }
  // The free dimension `id` named `name` (id 0 is the batch, see BatchSymbol).
  static SymDim Symbol(int32_t id, const std::string& name);

  // The expression (symbol 0 is the batch).
  const DimExpr& expr() const { return expr_; }
  // The value of a static dim; nullopt when it depends on the batch.
  std::optional<int64_t> AsConstant() const { return expr_.AsConstant(); }
  // True when the value does not depend on the batch.
  bool IsStatic() const { return expr_.IsStatic(); }
  // True for a constant or coef * batch^power (power >= 1) in symbol 0 alone.
  bool IsMonomial() const;
  // The monomial's coefficient (the value, for a static dim); 0 when !IsMonomial().
  int64_t coef() const;
  // The monomial's power of the batch (0 for a static dim); -1 when !IsMonomial().
  int32_t power() const;
  // The value for a concrete batch size when the dim mentions no symbol but the batch; saturates
  // at the int64 limits instead of wrapping (INT64_MAX for an expression that cannot be
  // evaluated from the batch alone).
  int64_t Eval(int64_t batch) const;
  // The value for symbol values syms[id]; nullopt on overflow, a division by zero or a symbol
  // without a value.
  std::optional<int64_t> Eval(absl::Span<const int64_t> syms) const { return expr_.Eval(syms); }
  // Renders "7", "batch", "4*batch" or "batch^2" (`symbol` names the batch); any other expression
  // renders with its own symbol names ("batch*seq", "floor((H + 1) / 2)").
  std::string ToString(const std::string& symbol = "batch") const;

  friend bool operator==(const SymDim& a, const SymDim& b) { return a.expr_ == b.expr_; }

 private:
  DimExpr expr_;
};

// Arithmetic: monomials in the batch stay monomials where the result is one; otherwise the
// DimExpr operation gives the canonical expression.
// Product; nullopt when the coefficient overflows int64 or the power exceeds kMaxSymPower.
std::optional<SymDim> SymMulChecked(SymDim a, SymDim b);
// Product that saturates instead of wrapping: on overflow the coefficient becomes INT64_MAX (or
// INT64_MIN, by sign) and the power is capped at kMaxSymPower, so an oversized product can never
// wrap into a plausible size; shape validation then rejects it as too large.
SymDim SymMul(SymDim a, SymDim b);
// Sum (batch + 1 is a general expression); nullopt when a coefficient overflows.
std::optional<SymDim> SymAdd(SymDim a, SymDim b);
std::optional<SymDim> SymSub(SymDim a, SymDim b);
// Truncating quotient (C and ONNX integer Div); nullopt when b is zero or the expression would
// grow past DimExpr's caps. INT64_MIN / -1 wraps to INT64_MIN, as the generated code does.
std::optional<SymDim> SymDiv(SymDim a, SymDim b);
// Floor quotient (rounding toward negative infinity, as window extents use); nullopt when b is
// zero or the expression would grow past DimExpr's caps.
std::optional<SymDim> SymFloorDiv(SymDim a, SymDim b);

using SymShape = std::vector<SymDim>;

// Product of all dims, saturating like SymMul.
SymDim SymNumElements(const SymShape& shape);
// Product of all dims; nullopt on overflow (see SymMulChecked).
std::optional<SymDim> SymNumElementsChecked(const SymShape& shape);
// Evaluates every dim.
std::vector<int64_t> EvalShape(const SymShape& shape, int64_t batch);
// Evaluates every dim for symbol values syms[id]; nullopt when a dim cannot be evaluated.
std::optional<std::vector<int64_t>> EvalShape(const SymShape& shape,
                                              absl::Span<const int64_t> syms);
// Highest symbol id any dim mentions plus one (0 for a static shape).
int32_t SymbolCount(const SymShape& shape);
// "[batch,3,224,224]".
std::string SymShapeToString(const SymShape& shape, const std::string& symbol = "batch");
// True when every dim is static.
bool IsStaticShape(const SymShape& shape);

// The general expression for d, with the batch as symbol `id` named `name`.
DimExpr ToDimExpr(const SymDim& d, int32_t id = 0, const std::string& name = "batch");
// The monomial coef * batch^power equal to e, when e is a constant or a monomial in the symbol
// `id` alone; nullopt otherwise.
std::optional<SymDim> ToSymDim(const DimExpr& e, int32_t id = 0);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_SYMBOLIC_DIM_H_
