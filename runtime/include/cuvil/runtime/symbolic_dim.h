// Dimensions that are either constants or a multiple of the model's one symbolic dimension.
//
// Cuvil keeps exactly one runtime symbol per compiled model (the batch dimension, usually named
// "batch"). Every dimension and every shape-valued integer is the monomial coef * batch^power,
// which is closed under the arithmetic PyTorch exports use on shapes (Mul, Div, Gather, Concat).
// A SymDim stores its value as a DimExpr (symbol 0 = the batch), the representation that several
// free dimensions will use; the monomial accessors and arithmetic here are the one-symbol view.
#ifndef CUVIL_RUNTIME_SYMBOLIC_DIM_H_
#define CUVIL_RUNTIME_SYMBOLIC_DIM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cuvil/runtime/dim_expr.h"

namespace cuvil {

// Largest power of the symbolic dimension a SymDim may carry. Real models need batch^1 (rarely
// batch^2 in shape arithmetic); a cap keeps Eval and code generation (one multiply per power)
// bounded for hostile models that square a shape value repeatedly.
inline constexpr int32_t kMaxSymPower = 16;

// A dimension of the IR, held as a DimExpr. For now every SymDim the compiler builds is the
// monomial coef * batch^power in symbol 0 (the model's one symbolic dimension): the arithmetic
// below keeps that form, and coef()/power() read it. Thread-compatible value type (immutable
// DimExpr nodes are shared between copies).
class SymDim {
 public:
  // The constant 0.
  SymDim() = default;
  // coef * batch^power; power in [0, kMaxSymPower] (clamped), a zero coef gives the constant 0.
  SymDim(int64_t coef, int32_t power);

  static SymDim Const(int64_t v) { return SymDim(v, 0); }
  static SymDim Batch(int64_t coef = 1) { return SymDim(coef, 1); }

  // The expression (symbol 0 is the batch).
  const DimExpr& expr() const { return expr_; }
  // The value of a static dim; nullopt when it depends on the batch.
  std::optional<int64_t> AsConstant() const { return expr_.AsConstant(); }
  // True when the value does not depend on the batch.
  bool IsStatic() const { return expr_.IsStatic(); }
  // The monomial's coefficient (the value, for a static dim).
  int64_t coef() const;
  // The monomial's power of the batch (0 for a static dim).
  int32_t power() const;
  // The value for a concrete batch size; saturates at the int64 limits instead of wrapping.
  int64_t Eval(int64_t batch) const;
  // Renders "7", "batch", "4*batch" or "batch^2".
  std::string ToString(const std::string& symbol = "batch") const;

  friend bool operator==(const SymDim& a, const SymDim& b) { return a.expr_ == b.expr_; }

 private:
  DimExpr expr_;
};

// Product; nullopt when the coefficient overflows int64 or the power exceeds kMaxSymPower.
std::optional<SymDim> SymMulChecked(SymDim a, SymDim b);
// Product that saturates instead of wrapping: on overflow the coefficient becomes INT64_MAX (or
// INT64_MIN, by sign) and the power is capped at kMaxSymPower, so an oversized product can never
// wrap into a plausible size; shape validation then rejects it as too large.
SymDim SymMul(SymDim a, SymDim b);
// Sum; nullopt when the powers differ (e.g. batch + 1) or the coefficient overflows.
std::optional<SymDim> SymAdd(SymDim a, SymDim b);
std::optional<SymDim> SymSub(SymDim a, SymDim b);
// Truncating quotient (C and ONNX integer Div); nullopt when the result is not a monomial with
// integer coefficient or b is zero. INT64_MIN / -1 wraps to INT64_MIN, as the generated code does.
std::optional<SymDim> SymDiv(SymDim a, SymDim b);

using SymShape = std::vector<SymDim>;

// Product of all dims, saturating like SymMul.
SymDim SymNumElements(const SymShape& shape);
// Product of all dims; nullopt on overflow (see SymMulChecked).
std::optional<SymDim> SymNumElementsChecked(const SymShape& shape);
// Evaluates every dim.
std::vector<int64_t> EvalShape(const SymShape& shape, int64_t batch);
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
