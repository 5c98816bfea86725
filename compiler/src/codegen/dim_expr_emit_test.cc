#include "codegen/dim_expr_emit.h"

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/TargetSelect.h"

namespace cuvil {
namespace {

DimExpr U(std::optional<DimExpr> e) {
  EXPECT_TRUE(e.has_value());
  return e.value_or(DimExpr(-999999));
}

using Fn = int64_t (*)(const int64_t*);

// JIT-compiles one function per expression: i64 fK(ptr symbol_values), all through one emitter
// per function.
class Compiled {
 public:
  explicit Compiled(const std::vector<DimExpr>& exprs) {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    auto ctx = std::make_unique<llvm::LLVMContext>();
    auto mod = std::make_unique<llvm::Module>("dims", *ctx);
    llvm::IRBuilder<> b(*ctx);
    auto* fty = llvm::FunctionType::get(b.getInt64Ty(), {b.getPtrTy()}, false);
    for (size_t k = 0; k < exprs.size(); ++k) {
      auto* f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage,
                                       "f" + std::to_string(k), mod.get());
      b.SetInsertPoint(llvm::BasicBlock::Create(*ctx, "entry", f));
      llvm::Value* vals = f->getArg(0);
      DimExprEmitter emit(b, [&](int32_t id) {
        return b.CreateLoad(b.getInt64Ty(), b.CreateConstGEP1_64(b.getInt64Ty(), vals, id));
      });
      // Emitting twice through one emitter reuses the atoms; the second result is returned.
      emit.Emit(exprs[k]);
      b.CreateRet(emit.Emit(exprs[k]));
    }
    EXPECT_FALSE(llvm::verifyModule(*mod, &llvm::errs()));
    auto jit = llvm::orc::LLJITBuilder().create();
    EXPECT_TRUE(static_cast<bool>(jit));
    jit_ = std::move(*jit);
    EXPECT_FALSE(static_cast<bool>(
        jit_->addIRModule(llvm::orc::ThreadSafeModule(std::move(mod), std::move(ctx)))));
    for (size_t k = 0; k < exprs.size(); ++k) {
      auto sym = jit_->lookup("f" + std::to_string(k));
      EXPECT_TRUE(static_cast<bool>(sym));
      fns_.push_back(sym->toPtr<Fn>());
    }
  }
  int64_t operator()(size_t k, const std::vector<int64_t>& v) const { return fns_[k](v.data()); }

 private:
  std::unique_ptr<llvm::orc::LLJIT> jit_;
  std::vector<Fn> fns_;
};

TEST(DimExprEmitTest, GeneratedCodeMatchesEval) {
  DimExpr b = DimExpr::Symbol(0, "batch"), s = DimExpr::Symbol(1, "seq"),
          h = DimExpr::Symbol(2, "H");
  std::vector<DimExpr> exprs = {
      DimExpr(42),
      b,
      U(DimAdd(U(DimMul(U(DimMul(b, s)), 3)), -5)),
      U(DimMul(U(DimMul(s, s)), h)),
      U(DimFloorDiv(U(DimAdd(h, 1)), 2)),
      U(DimFloorDiv(U(DimSub(s, h)), 3)),
      U(DimTruncDiv(U(DimSub(h, 5)), 2)),
      U(DimFloorDiv(U(DimSub(s, 7)), U(DimAdd(b, 1)))),
      U(DimTruncDiv(U(DimSub(s, 7)), U(DimSub(b, 2)))),
      U(DimMin(U(DimMax(U(DimSub(s, 4)), 2)), 9)),
      U(DimMax(U(DimMin(b, s)), U(DimFloorDiv(h, 4)))),
      U(DimMod(U(DimSub(h, 10)), 3)),
  };
  Compiled fn(exprs);
  int checked = 0;
  for (size_t k = 0; k < exprs.size(); ++k) {
    for (int64_t x = 0; x < 6; ++x) {
      for (int64_t y = 0; y < 12; ++y) {
        for (int64_t z = 0; z < 12; ++z) {
          std::vector<int64_t> v = {x, y, z};
          auto want = exprs[k].Eval(v);
          if (!want) continue;
          ASSERT_EQ(fn(k, v), *want) << exprs[k].ToString() << " at " << x << "," << y << "," << z;
          ++checked;
        }
      }
    }
  }
  EXPECT_GT(checked, 8000);
  // Where Eval fails the code still returns: a division by zero (batch = 2 in the trunc).
  EXPECT_EQ(exprs[8].Eval(std::vector<int64_t>{2, 0, 0}), std::nullopt);
  (void)fn(8, {2, 0, 0});
}

}  // namespace
}  // namespace cuvil
