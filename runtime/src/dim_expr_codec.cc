#include "cuvil/runtime/dim_expr_codec.h"

#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

void Push(std::vector<int64_t>* out, DimOp op) { out->push_back(static_cast<int64_t>(op)); }

void Emit(const DimExpr& e, std::vector<int64_t>* out);

void EmitAtom(const DimAtom& a, std::vector<int64_t>* out) {
  switch (a.kind) {
    case DimAtomKind::kSymbol:
      Push(out, DimOp::kSymbol);
      out->push_back(a.symbol);
      return;
    case DimAtomKind::kFloorDiv:
    case DimAtomKind::kTruncDiv:
      Emit(a.args[0], out);
      Emit(a.args[1], out);
      Push(out, a.kind == DimAtomKind::kFloorDiv ? DimOp::kFloorDiv : DimOp::kTruncDiv);
      return;
    case DimAtomKind::kMin:
    case DimAtomKind::kMax:
      for (const DimExpr& arg : a.args) Emit(arg, out);
      Push(out, a.kind == DimAtomKind::kMin ? DimOp::kMin : DimOp::kMax);
      out->push_back(static_cast<int64_t>(a.args.size()));
      return;
  }
}

void Emit(const DimExpr& e, std::vector<int64_t>* out) {
  Push(out, DimOp::kConst);
  out->push_back(e.constant_term());
  for (const DimExpr::Term& t : e.terms()) {
    Push(out, DimOp::kConst);
    out->push_back(t.coef);
    for (const DimExpr::Factor& f : t.factors) {
      EmitAtom(*f.atom, out);
      if (f.power > 1) {
        Push(out, DimOp::kPow);
        out->push_back(f.power);
      }
      Push(out, DimOp::kMul);
    }
    Push(out, DimOp::kAdd);
  }
}

// Runs a program over values of type V with the given operations; the shared interpreter of
// decoding (V = DimExpr) and evaluation (V = int64_t). Ops returns nullopt/error on failure.
template <typename V, typename Ops>
absl::StatusOr<V> Run(absl::Span<const int64_t> words, Ops& ops) {
  std::vector<V> stack;
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("malformed dimension program: ", why));
  };
  for (size_t i = 0; i < words.size(); ++i) {
    int64_t w = words[i];
    auto operand = [&]() -> std::optional<int64_t> {
      if (i + 1 >= words.size()) return std::nullopt;
      return words[++i];
    };
    switch (static_cast<DimOp>(w)) {
      case DimOp::kConst: {
        auto v = operand();
        if (!v) return bad("truncated constant");
        stack.push_back(ops.Const(*v));
        break;
      }
      case DimOp::kSymbol: {
        auto id = operand();
        if (!id || *id < 0 || *id > std::numeric_limits<int32_t>::max()) return bad("symbol id");
        auto v = ops.Symbol(static_cast<int32_t>(*id));
        if (!v) return bad(absl::StrCat("symbol ", *id, " has no value"));
        stack.push_back(std::move(*v));
        break;
      }
      case DimOp::kPow: {
        auto p = operand();
        if (!p || *p < 2 || *p > kMaxDimExprPower || stack.empty()) return bad("power");
        V base = stack.back();
        for (int64_t k = 1; k < *p; ++k) {
          auto next = ops.Binary(DimOp::kMul, stack.back(), base);
          if (!next) return bad("power overflows");
          stack.back() = std::move(*next);
        }
        break;
      }
      case DimOp::kAdd:
      case DimOp::kMul:
      case DimOp::kFloorDiv:
      case DimOp::kTruncDiv: {
        if (stack.size() < 2) return bad("stack underflow");
        V y = std::move(stack.back());
        stack.pop_back();
        auto r = ops.Binary(static_cast<DimOp>(w), stack.back(), y);
        if (!r) return bad("arithmetic fails (overflow or division by zero)");
        stack.back() = std::move(*r);
        break;
      }
      case DimOp::kMin:
      case DimOp::kMax: {
        auto n = operand();
        if (!n || *n < 2 || static_cast<uint64_t>(*n) > stack.size()) return bad("min/max arity");
        size_t first = stack.size() - static_cast<size_t>(*n);
        V acc = stack[first];
        for (size_t k = first + 1; k < stack.size(); ++k) {
          auto r = ops.Binary(static_cast<DimOp>(w), acc, stack[k]);
          if (!r) return bad("min/max fails");
          acc = std::move(*r);
        }
        stack.resize(first);
        stack.push_back(std::move(acc));
        break;
      }
      default:
        return bad(absl::StrCat("unknown word ", w));
    }
  }
  if (stack.size() != 1) return bad("program must leave one value");
  return std::move(stack.back());
}

struct ExprOps {
  absl::Span<const std::string> names;
  DimExpr Const(int64_t v) { return DimExpr(v); }
  std::optional<DimExpr> Symbol(int32_t id) {
    if (static_cast<size_t>(id) >= names.size()) return std::nullopt;
    return DimExpr::Symbol(id, names[id]);
  }
  std::optional<DimExpr> Binary(DimOp op, const DimExpr& a, const DimExpr& b) {
    switch (op) {
      case DimOp::kAdd:
        return DimAdd(a, b);
      case DimOp::kMul:
        return DimMul(a, b);
      case DimOp::kFloorDiv:
        return DimFloorDiv(a, b);
      case DimOp::kTruncDiv:
        return DimTruncDiv(a, b);
      case DimOp::kMin:
        return DimMin(a, b);
      case DimOp::kMax:
        return DimMax(a, b);
      default:
        return std::nullopt;
    }
  }
};

struct ValueOps {
  absl::Span<const int64_t> values;
  int64_t Const(int64_t v) { return v; }
  std::optional<int64_t> Symbol(int32_t id) {
    if (static_cast<size_t>(id) >= values.size()) return std::nullopt;
    return values[id];
  }
  std::optional<int64_t> Binary(DimOp op, int64_t a, int64_t b) {
    int64_t r = 0;
    switch (op) {
      case DimOp::kAdd:
        if (__builtin_add_overflow(a, b, &r)) return std::nullopt;
        return r;
      case DimOp::kMul:
        if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
        return r;
      case DimOp::kFloorDiv:
      case DimOp::kTruncDiv:
        if (b == 0) return std::nullopt;
        if (a == kInt64Min && b == -1) {
          if (op == DimOp::kTruncDiv) return kInt64Min;  // Wraps, like DimExpr::Eval.
          return std::nullopt;
        }
        r = a / b;
        if (op == DimOp::kFloorDiv && a % b != 0 && ((a < 0) != (b < 0))) --r;
        return r;
      case DimOp::kMin:
        return a < b ? a : b;
      case DimOp::kMax:
        return a > b ? a : b;
      default:
        return std::nullopt;
    }
  }
};

}  // namespace

std::vector<int64_t> EncodeDimExpr(const DimExpr& e) {
  std::vector<int64_t> out;
  Emit(e, &out);
  return out;
}

absl::StatusOr<DimExpr> DecodeDimExpr(absl::Span<const int64_t> words,
                                      absl::Span<const std::string> symbol_names) {
  ExprOps ops{symbol_names};
  return Run<DimExpr>(words, ops);
}

std::optional<int64_t> EvalDimProgram(absl::Span<const int64_t> words,
                                      absl::Span<const int64_t> values) {
  ValueOps ops{values};
  auto r = Run<int64_t>(words, ops);
  if (!r.ok()) return std::nullopt;
  return *r;
}

}  // namespace cuvil
