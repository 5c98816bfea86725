#include "codegen/dim_expr_emit.h"

#include <limits>

#include "llvm/IR/Intrinsics.h"

namespace cuvil {

llvm::Value* DimExprEmitter::Emit(const DimExpr& e) {
  llvm::Value* sum = nullptr;
  for (const DimExpr::Term& t : e.terms()) {
    llvm::Value* prod = nullptr;
    for (const DimExpr::Factor& f : t.factors) {
      llvm::Value* a = EmitAtom(f.atom);
      for (int32_t p = 0; p < f.power; ++p) prod = prod == nullptr ? a : b_.CreateMul(prod, a);
    }
    if (t.coef != 1) prod = b_.CreateMul(prod, b_.getInt64(static_cast<uint64_t>(t.coef)));
    sum = sum == nullptr ? prod : b_.CreateAdd(sum, prod);
  }
  llvm::Value* c = b_.getInt64(static_cast<uint64_t>(e.constant_term()));
  if (sum == nullptr) return c;
  return e.constant_term() == 0 ? sum : b_.CreateAdd(sum, c);
}

llvm::Value* DimExprEmitter::EmitAtom(const std::shared_ptr<const DimAtom>& atom) {
  const DimAtom& a = *atom;
  if (a.kind == DimAtomKind::kSymbol) {
    auto [it, inserted] = symbols_.try_emplace(a.symbol, nullptr);
    if (inserted) it->second = symbol_(a.symbol);
    return it->second;
  }
  if (auto it = atoms_.find(&a); it != atoms_.end()) return it->second.second;
  llvm::Value* v = nullptr;
  switch (a.kind) {
    case DimAtomKind::kFloorDiv:
    case DimAtomKind::kTruncDiv:
      v = Divide(Emit(a.args[0]), Emit(a.args[1]), a.kind == DimAtomKind::kFloorDiv);
      break;
    case DimAtomKind::kMin:
    case DimAtomKind::kMax: {
      auto id = a.kind == DimAtomKind::kMin ? llvm::Intrinsic::smin : llvm::Intrinsic::smax;
      v = Emit(a.args[0]);
      for (size_t i = 1; i < a.args.size(); ++i) {
        v = b_.CreateBinaryIntrinsic(id, v, Emit(a.args[i]));
      }
      break;
    }
    case DimAtomKind::kSymbol:
      break;
  }
  atoms_[&a] = {atom, v};
  return v;
}

llvm::Value* DimExprEmitter::Divide(llvm::Value* x, llvm::Value* y, bool floor) {
  auto* cy = llvm::dyn_cast<llvm::ConstantInt>(y);
  if (cy == nullptr || cy->isZero() || cy->isMinusOne()) {
    // y == 0 divides by 1; x == INT64_MIN && y == -1 divides by 1 too (INT64_MIN, the wrapped
    // quotient). Neither can then trap.
    llvm::Value* min = b_.getInt64(static_cast<uint64_t>(std::numeric_limits<int64_t>::min()));
    llvm::Value* bad =
        b_.CreateOr(b_.CreateICmpEQ(y, b_.getInt64(0)),
                    b_.CreateAnd(b_.CreateICmpEQ(x, min),
                                 b_.CreateICmpEQ(y, b_.getInt64(static_cast<uint64_t>(-1)))));
    y = b_.CreateSelect(bad, b_.getInt64(1), y);
  }
  llvm::Value* q = b_.CreateSDiv(x, y);
  if (!floor) return q;
  if (cy != nullptr && cy->getSExtValue() > 0) {
    // Positive constant divisor: round down when the remainder is negative.
    llvm::Value* r = b_.CreateSRem(x, y);
    return b_.CreateSub(q, b_.CreateZExt(b_.CreateICmpSLT(r, b_.getInt64(0)), b_.getInt64Ty()));
  }
  llvm::Value* r = b_.CreateSRem(x, y);
  llvm::Value* adjust = b_.CreateAnd(b_.CreateICmpNE(r, b_.getInt64(0)),
                                     b_.CreateICmpSLT(b_.CreateXor(r, y), b_.getInt64(0)));
  return b_.CreateSub(q, b_.CreateZExt(adjust, b_.getInt64Ty()));
}

}  // namespace cuvil
