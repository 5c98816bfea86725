// Emits DimExprs as i64 arithmetic in LLVM IR.
#ifndef CUVIL_COMPILER_CODEGEN_DIM_EXPR_EMIT_H_
#define CUVIL_COMPILER_CODEGEN_DIM_EXPR_EMIT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <unordered_map>
#include <utility>

#include "cuvil/runtime/dim_expr.h"
#include "llvm/IR/IRBuilder.h"

namespace cuvil {

// Emits expressions at the builder's insertion point, sharing each atom (a symbol load, a
// division, a min) between the expressions it emits: use one emitter per insertion region whose
// first block dominates every later use (e.g. a kernel's entry block). Results match
// DimExpr::Eval where Eval succeeds; where it fails the code never traps: arithmetic wraps, a
// division by zero divides by 1 and INT64_MIN / -1 gives INT64_MIN (bindings are validated
// before kernels run). Thread-compatible (one emitter per function under construction).
class DimExprEmitter {
 public:
  // `symbol(id)` returns the i64 value of symbol id (e.g. a load from the symbol array); it is
  // called once per symbol per emitter.
  DimExprEmitter(llvm::IRBuilder<>& b, std::function<llvm::Value*(int32_t)> symbol)
      : b_(b), symbol_(std::move(symbol)) {}

  // The i64 value of e; a constant folds to an i64 constant.
  llvm::Value* Emit(const DimExpr& e);

 private:
  llvm::Value* EmitAtom(const std::shared_ptr<const DimAtom>& a);
  // Signed division (floor or trunc) that cannot trap.
  llvm::Value* Divide(llvm::Value* x, llvm::Value* y, bool floor);

  llvm::IRBuilder<>& b_;
  std::function<llvm::Value*(int32_t)> symbol_;
  // Keyed by address; the shared_ptrs keep each atom (and so its address) alive.
  std::unordered_map<const DimAtom*, std::pair<std::shared_ptr<const DimAtom>, llvm::Value*>>
      atoms_;
  std::unordered_map<int32_t, llvm::Value*> symbols_;
};

}  // namespace cuvil

#endif  // CUVIL_COMPILER_CODEGEN_DIM_EXPR_EMIT_H_
