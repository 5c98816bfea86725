#include "codegen/kernel_context.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/Module.h"
#include "llvm/IR/Verifier.h"
#include "llvm/Support/TargetSelect.h"

namespace cuvil::codegen {
namespace {

DimExpr U(std::optional<DimExpr> e) {
  EXPECT_TRUE(e.has_value());
  return e.value_or(DimExpr(-999999));
}

using KernelFn = int32_t (*)(void* const* args, int64_t batch);

// True when `fn` contains an instruction named `name` (KernelContext names its symbols load).
bool HasValueNamed(const llvm::Function& fn, const std::string& name) {
  for (const llvm::BasicBlock& bb : fn) {
    for (const llvm::Instruction& inst : bb) {
      if (inst.getName() == name) return true;
    }
  }
  return false;
}

// Kernels read symbol values other than the batch through the args slot after their outputs
// (syms[id]); symbol 0 stays the batch argument, and a batch-only kernel never reads that slot.
TEST(KernelContextTest, KernelsReadSymbolValuesThroughTheArgsSlot) {
  llvm::InitializeNativeTarget();
  llvm::InitializeNativeTargetAsmPrinter();
  auto ctx = std::make_unique<llvm::LLVMContext>();
  auto mod = std::make_unique<llvm::Module>("kernels", *ctx);
  llvm::IRBuilder<> ib(*ctx);
  auto* kernel_ty =
      llvm::FunctionType::get(ib.getInt32Ty(), {ib.getPtrTy(), ib.getInt64Ty()}, false);

  // One node, one int64 output of 4 elements: args = {out, syms}.
  ir::Graph g;
  ir::Value* out = g.NewValue("y");
  out->type = ir::TensorType{DType::kInt64, {SymDim::Const(4)}, true};
  ir::Node* node = g.NewNode("Test", "t");
  node->outputs = {out};

  DimExpr batch = DimExpr::Symbol(0, "batch"), seq = DimExpr::Symbol(1, "seq"),
          h = DimExpr::Symbol(2, "H");
  DimExpr seq3_plus_batch = U(DimAdd(U(DimMul(seq, 3)), batch));
  DimExpr half_h = U(DimFloorDiv(h, 2));
  {
    auto* fn =
        llvm::Function::Create(kernel_ty, llvm::Function::ExternalLinkage, "uses_syms", mod.get());
    KernelContext k(*mod, fn, *node);
    k.Store(DType::kInt64, k.out(0), k.I64(0), k.Dim(seq3_plus_batch));
    // Symbol 2 is first needed inside a loop, after the entry block has its branch: its load
    // still goes into the entry block (the verifier checks it dominates the use).
    k.For(k.I64(1), k.I64(3), [&](llvm::Value* i) {
      k.Store(DType::kInt64, k.out(0), i, k.b().CreateAdd(k.Dim(half_h), i));
    });
    k.Store(DType::kInt64, k.out(0), k.I64(3), k.Dim(SymDim::Batch(5)));
    k.b().CreateRet(k.Status());
    EXPECT_TRUE(HasValueNamed(*fn, "syms"));
  }
  {
    auto* fn =
        llvm::Function::Create(kernel_ty, llvm::Function::ExternalLinkage, "batch_only", mod.get());
    KernelContext k(*mod, fn, *node);
    k.Store(DType::kInt64, k.out(0), k.I64(0), k.Dim(SymMul(SymDim::Batch(2), SymDim::Batch())));
    k.Store(DType::kInt64, k.out(0), k.I64(1), k.Dim(batch));
    k.b().CreateRet(k.Status());
    // No load of the symbols slot: args may be just {out}, as for a hand-written patch kernel.
    EXPECT_FALSE(HasValueNamed(*fn, "syms"));
  }
  ASSERT_FALSE(llvm::verifyModule(*mod, &llvm::errs()));

  auto jit = llvm::orc::LLJITBuilder().create();
  ASSERT_TRUE(static_cast<bool>(jit));
  ASSERT_FALSE(static_cast<bool>(
      (*jit)->addIRModule(llvm::orc::ThreadSafeModule(std::move(mod), std::move(ctx)))));
  auto uses_syms = (*jit)->lookup("uses_syms");
  auto batch_only = (*jit)->lookup("batch_only");
  ASSERT_TRUE(static_cast<bool>(uses_syms));
  ASSERT_TRUE(static_cast<bool>(batch_only));

  // syms[0] is the batch (the kernel reads the argument instead), seq = 7, H = 9.
  int64_t syms[3] = {5, 7, 9};
  int64_t y[4] = {-1, -1, -1, -1};
  void* args[2] = {y, syms};
  ASSERT_EQ(uses_syms->toPtr<KernelFn>()(args, 5), 0);
  EXPECT_EQ(y[0], 3 * 7 + 5);
  EXPECT_EQ(y[1], 9 / 2 + 1);
  EXPECT_EQ(y[2], 9 / 2 + 2);
  EXPECT_EQ(y[3], 5 * 5);
  // Other values in the slot give other results: the kernel really reads it.
  int64_t other[3] = {0, 2, 20};
  args[1] = other;
  ASSERT_EQ(uses_syms->toPtr<KernelFn>()(args, 3), 0);
  EXPECT_EQ(y[0], 3 * 2 + 3);
  EXPECT_EQ(y[1], 20 / 2 + 1);
  EXPECT_EQ(y[3], 5 * 3);

  void* short_args[1] = {y};
  ASSERT_EQ(batch_only->toPtr<KernelFn>()(short_args, 4), 0);
  EXPECT_EQ(y[0], 2 * 4 * 4);
  EXPECT_EQ(y[1], 4);
}

// Runtime calls take their callee types from cuvil/runtime/abi.def: a call with the declared
// types verifies; one passing an i32 where the ABI has an int64, or one argument short, makes
// IR the verifier (which every compile runs, lower.cc) refuses, and a name abi.def declares gets
// the same typing through CallC.
TEST(KernelContextTest, RuntimeCallsAreTypedByTheAbiDeclaration) {
  llvm::LLVMContext ctx;
  llvm::IRBuilder<> ib(ctx);
  auto* kernel_ty =
      llvm::FunctionType::get(ib.getInt32Ty(), {ib.getPtrTy(), ib.getInt64Ty()}, false);
  ir::Graph g;
  ir::Value* out = g.NewValue("y");
  out->type = ir::TensorType{DType::kFloat32, {SymDim::Const(4)}, true};
  ir::Node* node = g.NewNode("Test", "t");
  node->outputs = {out};
  auto build = [&](const std::function<void(KernelContext&)>& body) {
    auto mod = std::make_unique<llvm::Module>("abi", ctx);
    auto* fn = llvm::Function::Create(kernel_ty, llvm::Function::ExternalLinkage, "k", mod.get());
    KernelContext k(*mod, fn, *node);
    body(k);
    k.b().CreateRet(k.Status());
    std::string err;
    llvm::raw_string_ostream os(err);
    const bool broken = llvm::verifyModule(*mod, &os);
    return std::make_pair(broken, err);
  };
  auto good = build([](KernelContext& k) {
    llvm::Value* p = k.CallAbi(abi::Fn::cuvil_rt_alloc, {k.I64(64)});
    k.CallAbi(abi::Fn::cuvil_rt_free, {p});
  });
  EXPECT_FALSE(good.first) << good.second;
  auto narrow = build([](KernelContext& k) {
    k.CallAbi(abi::Fn::cuvil_rt_alloc, {k.b().getInt32(64)});  // abi.def: I64
  });
  EXPECT_TRUE(narrow.first);
  EXPECT_NE(narrow.second.find("cuvil_rt_alloc"), std::string::npos) << narrow.second;
  auto missing = build([](KernelContext& k) {
    llvm::Value* null = llvm::ConstantPointerNull::get(k.b().getPtrTy());
    k.CallAbi(abi::Fn::cuvil_uk_maxpool2d, {null, null, null});  // abi.def: 4 parameters
  });
  EXPECT_TRUE(missing.first);
  auto by_name = build([](KernelContext& k) {
    // Typed from abi.def even through CallC: the i32 does not become the callee's type.
    k.CallC("cuvil_rt_alloc", k.b().getPtrTy(), {k.b().getInt32(64)});
  });
  EXPECT_TRUE(by_name.first);
  // The table: every entry has a name, a parameter count in range, and a unique name.
  std::set<std::string> names;
  for (const abi::Function& f : abi::All()) {
    EXPECT_TRUE(names.insert(f.name).second) << f.name;
    EXPECT_GT(f.num_params, 0) << f.name;
    EXPECT_LE(f.num_params, 16) << f.name;
    EXPECT_EQ(abi::Find(f.name), &f);
  }
  EXPECT_EQ(abi::Find("expf"), nullptr);
}

}  // namespace
}  // namespace cuvil::codegen
