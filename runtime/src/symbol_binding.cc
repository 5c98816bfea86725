#include "cuvil/runtime/symbol_binding.h"

#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

// The name of symbol `id` as e prints it (searching inside atoms too), or "s<id>".
std::string SymbolName(const DimExpr& e, int32_t id) {
  for (const DimExpr::Term& t : e.terms()) {
    for (const DimExpr::Factor& f : t.factors) {
      if (f.atom->kind == DimAtomKind::kSymbol) {
        if (f.atom->symbol == id) return f.atom->name;
        continue;
      }
      for (const DimExpr& arg : f.atom->args) {
        std::string name = SymbolName(arg, id);
        if (name != absl::StrCat("s", id)) return name;
      }
    }
  }
  return absl::StrCat("s", id);
}

// When e is c*x + r with x appearing once, as a whole term of power 1 and nowhere else (not in
// another term, not inside a division or min/max): writes c and returns true. Then r is e at x = 0.
bool IsLinearIn(const DimExpr& e, int32_t x, int64_t* c) {
  bool found = false;
  for (const DimExpr::Term& t : e.terms()) {
    const DimAtom& first = *t.factors[0].atom;
    if (t.factors.size() == 1 && t.factors[0].power == 1 && first.kind == DimAtomKind::kSymbol &&
        first.symbol == x) {
      if (found) return false;
      found = true;
      *c = t.coef;
      continue;
    }
    for (const DimExpr::Factor& f : t.factors) {
      if (f.atom->kind == DimAtomKind::kSymbol) {
        if (f.atom->symbol == x) return false;
        continue;
      }
      for (const DimExpr& arg : f.atom->args) {
        for (int32_t id : arg.Symbols()) {
          if (id == x) return false;
        }
      }
    }
  }
  return found;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> BindSymbols(absl::Span<const TensorDims> signature,
                                                 absl::Span<const std::vector<int64_t>> shapes,
                                                 int32_t symbol_count) {
  if (shapes.size() != signature.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", signature.size(), " inputs, got ", shapes.size()));
  }
  for (size_t i = 0; i < signature.size(); ++i) {
    if (shapes[i].size() != signature[i].dims.size()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", signature[i].name, "' has rank ",
                                                     shapes[i].size(), "; the model expects ",
                                                     signature[i].dims.size()));
    }
    for (size_t d = 0; d < shapes[i].size(); ++d) {
      if (shapes[i][d] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("input '", signature[i].name, "' dim ", d,
                                                       " is negative (", shapes[i][d], ")"));
      }
    }
  }
  std::vector<std::optional<int64_t>> known(symbol_count);
  // Values for evaluation: unknown symbols are never read by the expressions evaluated below.
  std::vector<int64_t> values(symbol_count, 0);
  auto unknown_in = [&](const DimExpr& e, int32_t* which) {
    int n = 0;
    for (int32_t id : e.Symbols()) {
      if (id >= symbol_count || !known[id]) {
        *which = id;
        ++n;
      }
    }
    return n;
  };
  // Solve dims with one unknown symbol until nothing changes.
  bool progress = true;
  while (progress) {
    progress = false;
    for (size_t i = 0; i < signature.size(); ++i) {
      for (size_t d = 0; d < signature[i].dims.size(); ++d) {
        const DimExpr& e = signature[i].dims[d];
        int32_t x = -1;
        if (unknown_in(e, &x) != 1 || x >= symbol_count) continue;
        int64_t c = 0;
        if (!IsLinearIn(e, x, &c) || c <= 0) continue;
        auto r = e.Eval(values);  // values[x] is 0 while x is unknown.
        int64_t got = shapes[i][d], diff = 0;
        if (!r || __builtin_sub_overflow(got, *r, &diff) || diff % c != 0 || diff / c < 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input '", signature[i].name, "' dim ", d, " is ", got, ", which no value of ",
              SymbolName(e, x), " >= 0 gives (the model expects ", e.ToString(), ")"));
        }
        known[x] = diff / c;
        values[x] = diff / c;
        progress = true;
      }
    }
  }
  // Every dim must now evaluate to the request's value.
  for (size_t i = 0; i < signature.size(); ++i) {
    for (size_t d = 0; d < signature[i].dims.size(); ++d) {
      const DimExpr& e = signature[i].dims[d];
      int32_t x = -1;
      if (unknown_in(e, &x) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", signature[i].name, "' dim ", d, " (", e.ToString(), "): the value of ",
            SymbolName(e, x), " cannot be determined from the input shapes"));
      }
      auto v = e.Eval(values);
      if (!v || *v != shapes[i][d]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", signature[i].name, "' dim ", d, " is ", shapes[i][d], "; the model expects ",
            e.ToString(), v ? absl::StrCat(" = ", *v) : "", " for these input shapes"));
      }
    }
  }
  for (int32_t id = 0; id < symbol_count; ++id) {
    if (!known[id]) {
      return absl::InvalidArgumentError(
          absl::StrCat("symbol ", id, " appears in no input dimension and cannot be bound"));
    }
  }
  return values;
}

}  // namespace cuvil
