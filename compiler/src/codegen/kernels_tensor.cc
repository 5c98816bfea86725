// Code generation for shape-only ops. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) copy
// their input; Shape/Size write runtime dims when the batch keeps them from folding.
#include "codegen/kernel_context.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

absl::Status CopyInput(KernelContext& k) {
  k.Memcpy(k.out(0), k.in(0), k.NumElements(k.in_shape(0)), k.in_dtype(0));
  return absl::OkStatus();
}

absl::Status Shape(KernelContext& k) {
  int64_t start = k.node().attr_int("start", 0), end = k.node().attr_int("end", 0);
  for (int64_t i = start; i < end; ++i) {
    k.Store(DType::kInt64, k.out(0), k.I64(i - start), k.Dim(k.in_shape(0)[i]));
  }
  return absl::OkStatus();
}

absl::Status Size(KernelContext& k) {
  k.Store(DType::kInt64, k.out(0), k.I64(0), k.NumElements(k.in_shape(0)));
  return absl::OkStatus();
}

absl::Status Dropout(KernelContext& k) {
  if (auto s = CopyInput(k); !s.ok()) return s;
  if (k.has_output(1)) {
    llvm::Value* n = k.NumElements(k.out_shape(1));
    k.b().CreateMemSet(k.out(1), k.b().getInt8(1), n, llvm::MaybeAlign(1));
  }
  return absl::OkStatus();
}

absl::Status ConstantOfShape(KernelContext& k) {
  DType d = k.out_dtype(0);
  double v = IsFloat(d) ? k.node().attr_float(attr::kFill, 0)
                        : static_cast<double>(k.node().attr_int(attr::kFillInt, 0));
  llvm::Value* value = k.Const(d, v);
  k.For(k.I64(0), k.NumElements(k.out_shape(0)),
        [&](llvm::Value* i) { k.Store(d, k.out(0), i, value); });
  return absl::OkStatus();
}

absl::Status Range(KernelContext& k) {
  DType d = k.out_dtype(0);
  llvm::Value* start = k.Load(d, k.in(0), k.I64(0));
  llvm::Value* delta = k.Load(d, k.in(2), k.I64(0));
  k.For(k.I64(0), k.NumElements(k.out_shape(0)), [&](llvm::Value* i) {
    llvm::Value* step = k.Convert(i, DType::kInt64, d);
    k.Store(d, k.out(0), i, k.Add(d, start, k.Mul(d, step, delta)));
  });
  return absl::OkStatus();
}

// EyeLike: ones on the diagonal shifted by k (column - row == k), zeros elsewhere.
absl::Status EyeLike(KernelContext& k) {
  DType d = k.out_dtype(0);
  auto& b = k.b();
  llvm::Value* cols = k.Dim(k.out_shape(0)[1]);
  llvm::Value* diag = k.I64(k.node().attr_int("k", 0));
  k.ForNest(k.Dims(k.out_shape(0)), [&](const Idx& at) {
    llvm::Value* on = b.CreateICmpEQ(b.CreateSub(at[1], at[0]), diag);
    k.Store(d, k.out(0), b.CreateAdd(b.CreateMul(at[0], cols), at[1]),
            b.CreateSelect(on, k.Const(d, 1), k.Const(d, 0)));
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterTensorKernels(OpTable& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
    r.DefineEmitter(op, CopyInput);
  r.DefineEmitter("Shape", Shape);
  r.DefineEmitter("Size", Size);
  r.DefineEmitter("Dropout", Dropout);
  r.DefineEmitter("ConstantOfShape", ConstantOfShape);
  r.DefineEmitter("Range", Range);
  r.DefineEmitter("EyeLike", EyeLike);
}

}  // namespace cuvil::codegen
