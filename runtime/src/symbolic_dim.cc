#include "cuvil/runtime/symbolic_dim.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil {

int64_t SymDim::Eval(int64_t batch) const {
  int64_t v = coef;
  for (int i = 0; i < power; ++i) v *= batch;
  return v;
}

std::string SymDim::ToString(const std::string& symbol) const {
  if (IsStatic()) return absl::StrCat(coef);
  std::string sym = power == 1 ? symbol : absl::StrCat(symbol, "^", power);
  if (coef == 1) return sym;
  return absl::StrCat(coef, "*", sym);
}

SymDim SymMul(SymDim a, SymDim b) {
  if (a.coef == 0 || b.coef == 0) return SymDim::Const(0);
  return {a.coef * b.coef, a.power + b.power};
}

std::optional<SymDim> SymAdd(SymDim a, SymDim b) {
  if (a.coef == 0) return b;
  if (b.coef == 0) return a;
  if (a.power != b.power) return std::nullopt;
  SymDim r{a.coef + b.coef, a.power};
  if (r.coef == 0) r.power = 0;
  return r;
}

std::optional<SymDim> SymSub(SymDim a, SymDim b) { return SymAdd(a, {-b.coef, b.power}); }

std::optional<SymDim> SymDiv(SymDim a, SymDim b) {
  if (b.coef == 0) return std::nullopt;
  if (a.coef == 0) return SymDim::Const(0);
  if (a.power < b.power) return std::nullopt;
  if (a.power == b.power) {
    // Static quotient: floor division as ONNX integer Div does (C truncation for same signs).
    if (a.power == 0 || a.coef % b.coef == 0) return SymDim::Const(a.coef / b.coef);
    return std::nullopt;
  }
  if (a.coef % b.coef != 0) return std::nullopt;
  return SymDim{a.coef / b.coef, a.power - b.power};
}

SymDim SymNumElements(const SymShape& shape) {
  SymDim n = SymDim::Const(1);
  for (const SymDim& d : shape) n = SymMul(n, d);
  return n;
}

std::vector<int64_t> EvalShape(const SymShape& shape, int64_t batch) {
  std::vector<int64_t> out;
  out.reserve(shape.size());
  for (const SymDim& d : shape) out.push_back(d.Eval(batch));
  return out;
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

}  // namespace cuvil
