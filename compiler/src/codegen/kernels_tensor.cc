// Code generation for shape-only ops. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) copy
// their input; Shape/Size write runtime dims when the batch keeps them from folding.
#include "codegen/kernel_context.h"

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
  double v = IsFloat(d) ? k.node().attr_float("fill", 0)
                        : static_cast<double>(k.node().attr_int("fill_int", 0));
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

}  // namespace

void RegisterTensorKernels(KernelRegistry& r) {
  for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
    r.Register(op, CopyInput);
  r.Register("Shape", Shape);
  r.Register("Size", Size);
  r.Register("Dropout", Dropout);
  r.Register("ConstantOfShape", ConstantOfShape);
  r.Register("Range", Range);
}

}  // namespace cuvil::codegen
