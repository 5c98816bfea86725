// Dimensions that are either constants or a multiple of the model's one symbolic dimension.
//
// Cuvil keeps exactly one runtime symbol per compiled model (the batch dimension, usually named
// "batch"). Every dimension and every shape-valued integer is the monomial coef * batch^power,
// which is closed under the arithmetic PyTorch exports use on shapes (Mul, Div, Gather, Concat).
#ifndef CUVIL_RUNTIME_SYMBOLIC_DIM_H_
#define CUVIL_RUNTIME_SYMBOLIC_DIM_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace cuvil {

// coef * batch^power. Thread-compatible value type.
struct SymDim {
  int64_t coef = 0;
  int32_t power = 0;

  static SymDim Const(int64_t v) { return {v, 0}; }
  static SymDim Batch(int64_t coef = 1) { return {coef, 1}; }

  // True when the value does not depend on the batch.
  bool IsStatic() const { return power == 0 || coef == 0; }
  // The value for a concrete batch size.
  int64_t Eval(int64_t batch) const;
  // Renders "7", "batch", "4*batch" or "batch^2".
  std::string ToString(const std::string& symbol = "batch") const;

  friend bool operator==(const SymDim& a, const SymDim& b) {
    if (a.coef == 0 && b.coef == 0) return true;
    return a.coef == b.coef && a.power == b.power;
  }
};

// Product; always representable.
SymDim SymMul(SymDim a, SymDim b);
// Sum; nullopt when the powers differ (e.g. batch + 1).
std::optional<SymDim> SymAdd(SymDim a, SymDim b);
std::optional<SymDim> SymSub(SymDim a, SymDim b);
// Exact or floor quotient; nullopt when the result is not a monomial with integer coefficient.
std::optional<SymDim> SymDiv(SymDim a, SymDim b);

using SymShape = std::vector<SymDim>;

// Product of all dims.
SymDim SymNumElements(const SymShape& shape);
// Evaluates every dim.
std::vector<int64_t> EvalShape(const SymShape& shape, int64_t batch);
// "[batch,3,224,224]".
std::string SymShapeToString(const SymShape& shape, const std::string& symbol = "batch");
// True when every dim is static.
bool IsStaticShape(const SymShape& shape);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_SYMBOLIC_DIM_H_
