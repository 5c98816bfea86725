// Code generation for the loss ops. NegativeLogLikelihoodLoss reads log-probabilities; for
// SoftmaxCrossEntropyLoss each (n, d1..dk) position first takes the log-softmax over the class
// axis (max, then log of the sum of exponentials), optionally writing it as the second output.
// A target outside [0, C) that is not ignore_index fails the execution (kEntryIndexOutOfBounds)
// and reads nothing.
#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil::codegen {
namespace {

absl::Status EmitLoss(KernelContext& k) {
  const ir::Node& node = k.node();
  bool softmax = node.op_type == "SoftmaxCrossEntropyLoss";
  DType d = k.in_dtype(0);
  DType td = k.in_dtype(1);
  if (!IsFloat(d)) return k.Unsupported(std::string("dtype ") + DTypeName(d));
  const SymShape& scores = k.in_shape(0);
  std::string reduction = node.attr_string("reduction", "mean");
  bool has_ii = node.has_attr("ignore_index");
  int64_t ii = node.attr_int("ignore_index", 0);
  auto& b = k.b();
  llvm::Value* n_count = k.Dim(scores[0]);
  llvm::Value* classes = k.Dim(scores[1]);
  llvm::Value* inner = k.NumElements(SymShape(scores.begin() + 2, scores.end()));
  ScalarVar total(k, k.Const(d, 0));
  ScalarVar weight_sum(k, k.Const(d, 0));
  k.For(k.I64(0), n_count, [&](llvm::Value* n) {
    k.For(k.I64(0), inner, [&](llvm::Value* j) {
      llvm::Value* pos = b.CreateAdd(b.CreateMul(n, inner), j);
      llvm::Value* row = b.CreateMul(n, classes);
      auto at = [&](llvm::Value* c) {
        return b.CreateAdd(b.CreateMul(b.CreateAdd(row, c), inner), j);
      };
      llvm::Value* shift = nullptr;  // log-sum-exp of the scores over classes
      if (softmax) {
        ScalarVar m(k, k.Lowest(d));
        k.For(k.I64(0), classes,
              [&](llvm::Value* c) { m.set(k.Max(d, m.get(), k.Load(d, k.in(0), at(c)))); });
        llvm::Value* max = m.get();
        ScalarVar sum(k, k.Const(d, 0));
        k.For(k.I64(0), classes, [&](llvm::Value* c) {
          llvm::Value* e =
              k.Intrinsic(llvm::Intrinsic::exp, b.CreateFSub(k.Load(d, k.in(0), at(c)), max));
          sum.set(b.CreateFAdd(sum.get(), e));
        });
        shift = b.CreateFAdd(max, k.Intrinsic(llvm::Intrinsic::log, sum.get()));
        if (k.has_output(1)) {
          k.For(k.I64(0), classes, [&](llvm::Value* c) {
            k.Store(d, k.out(1), at(c), b.CreateFSub(k.Load(d, k.in(0), at(c)), shift));
          });
        }
      }
      llvm::Value* t = k.Convert(k.Load(td, k.in(1), pos), td, DType::kInt64);
      llvm::Value* ignored = has_ii ? b.CreateICmpEQ(t, k.I64(ii)) : b.getFalse();
      llvm::Value* in_range =
          b.CreateAnd(b.CreateICmpSGE(t, k.I64(0)), b.CreateICmpSLT(t, classes));
      k.FailIf(b.CreateNot(b.CreateOr(ignored, in_range)), kEntryIndexOutOfBounds);
      ScalarVar loss(k, k.Const(d, 0));
      ScalarVar w(k, k.Const(d, 0));
      k.If(b.CreateAnd(b.CreateNot(ignored), in_range), [&] {
        llvm::Value* x = k.Load(d, k.in(0), at(t));
        if (softmax) x = b.CreateFSub(x, shift);
        llvm::Value* wt = k.has_input(2) ? k.Load(d, k.in(2), t) : k.Const(d, 1);
        loss.set(b.CreateFNeg(b.CreateFMul(x, wt)));
        w.set(wt);
      });
      if (reduction == "none") {
        k.Store(d, k.out(0), pos, loss.get());
      } else {
        total.set(b.CreateFAdd(total.get(), loss.get()));
        weight_sum.set(b.CreateFAdd(weight_sum.get(), w.get()));
      }
    });
  });
  if (reduction == "sum") k.Store(d, k.out(0), k.I64(0), total.get());
  if (reduction == "mean") {
    k.Store(d, k.out(0), k.I64(0), b.CreateFDiv(total.get(), weight_sum.get()));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLossKernels(OpTable& r) {
  r.DefineEmitter("NegativeLogLikelihoodLoss", EmitLoss);
  r.DefineEmitter("SoftmaxCrossEntropyLoss", EmitLoss);
}

}  // namespace cuvil::codegen
