// Code generation for the ops whose output size depends on the data (NonZero, Compress, Unique,
// NonMaxSuppression). Each kernel finds the size, writes it to its data-dependent symbol
// (KernelContext::StoreSymbol), then writes that many results packed at the start of its
// outputs, whose buffers are sized for the symbol's upper bound. NonZero and Compress are two
// passes in generated code (count, then copy); Unique and NonMaxSuppression, which sort, call
// the runtime (cuvil/runtime/selection_ops.h).
#include "absl/strings/str_cat.h"
#include "kernel_context.h"

namespace cuvil::codegen {
namespace {

// The data-dependent symbol that dim `dim` of output `output` is.
absl::StatusOr<int32_t> CountSymbol(KernelContext& k, size_t output, size_t dim) {
  std::optional<int32_t> id = k.out_shape(output)[dim].expr().AsSymbol();
  if (!id || *id == 0) return k.Error("its output size is not a data-dependent symbol");
  return *id;
}

// i1: element `i` of input `input` is not zero (NaN counts as not zero, as in numpy).
llvm::Value* NotZero(KernelContext& k, size_t input, llvm::Value* i) {
  const DType d = k.in_dtype(input);
  return k.b().CreateNot(k.Equal(d, k.Load(d, k.in(input), i), k.Const(d, 0)));
}

// Input 0 viewed as [outer, extent, inner] along the node's "axis" (flattened, [1, n, 1],
// without one), and the data-dependent symbol that dim of output 0 is.
struct AxisView {
  llvm::Value* outer;
  llvm::Value* extent;
  llvm::Value* inner;
  int32_t count_symbol;
};

absl::StatusOr<AxisView> ViewAlongAxis(KernelContext& k) {
  const bool has_axis = k.node().has_attr("axis");
  const size_t axis = has_axis ? static_cast<size_t>(k.node().attr_int("axis", 0)) : 0;
  auto id = CountSymbol(k, 0, axis);
  if (!id.ok()) return id.status();
  const SymShape& shape = k.in_shape(0);
  SymShape before(shape.begin(), shape.begin() + (has_axis ? axis : 0));
  SymShape after(shape.begin() + (has_axis ? axis + 1 : shape.size()), shape.end());
  return AxisView{k.NumElements(before), has_axis ? k.Dim(shape[axis]) : k.NumElements(shape),
                  k.NumElements(after), *id};
}

absl::Status EmitNonZero(KernelContext& k) {
  auto id = CountSymbol(k, 0, 1);
  if (!id.ok()) return id.status();
  auto& b = k.b();
  const SymShape& shape = k.in_shape(0);
  llvm::Value* n = k.NumElements(shape);
  ScalarVar count(k, k.I64(0));
  k.For(k.I64(0), n, [&](llvm::Value* i) {
    count.set(b.CreateAdd(count.get(), b.CreateZExt(NotZero(k, 0, i), k.I64Ty())));
  });
  llvm::Value* total = count.get();
  k.StoreSymbol(*id, total);
  // Output [rank, total]: row d holds the d-th coordinate of every non-zero, in row-major order.
  Idx dims = k.Dims(shape);
  Idx strides = k.Strides(shape);
  ScalarVar next(k, k.I64(0));
  k.ForNest(dims, [&](const Idx& idx) {
    k.If(NotZero(k, 0, k.Offset(idx, strides)), [&] {
      llvm::Value* at = next.get();
      for (size_t d = 0; d < idx.size(); ++d) {
        k.Store(DType::kInt64, k.out(0), b.CreateAdd(b.CreateMul(k.I64(d), total), at), idx[d]);
      }
      next.set(b.CreateAdd(at, k.I64(1)));
    });
  });
  return absl::OkStatus();
}

absl::Status EmitCompress(KernelContext& k) {
  auto view = ViewAlongAxis(k);
  if (!view.ok()) return view.status();
  auto& b = k.b();
  const DType d = k.in_dtype(0);
  llvm::Value *outer = view->outer, *extent = view->extent, *inner = view->inner;
  // Condition entries past the extent select nothing.
  llvm::Value* len = k.Dim(k.in_shape(1)[0]);
  llvm::Value* used = b.CreateSelect(b.CreateICmpSLT(len, extent), len, extent);
  ScalarVar count(k, k.I64(0));
  k.For(k.I64(0), used, [&](llvm::Value* j) {
    count.set(b.CreateAdd(count.get(), b.CreateZExt(NotZero(k, 1, j), k.I64Ty())));
  });
  llvm::Value* total = count.get();
  k.StoreSymbol(view->count_symbol, total);
  k.For(k.I64(0), outer, [&](llvm::Value* o) {
    ScalarVar next(k, k.I64(0));
    k.For(k.I64(0), used, [&](llvm::Value* j) {
      k.If(NotZero(k, 1, j), [&] {
        llvm::Value* at = next.get();
        llvm::Value* dst =
            k.ElemPtr(d, k.out(0), b.CreateMul(b.CreateAdd(b.CreateMul(o, total), at), inner));
        llvm::Value* src =
            k.ElemPtr(d, k.in(0), b.CreateMul(b.CreateAdd(b.CreateMul(o, extent), j), inner));
        k.Memcpy(dst, src, inner, d);
        next.set(b.CreateAdd(at, k.I64(1)));
      });
    });
  });
  return absl::OkStatus();
}

// An output's pointer, or null when the node omits it.
llvm::Value* OptionalOut(KernelContext& k, size_t i) {
  if (k.has_output(i)) return k.out(i);
  return llvm::ConstantPointerNull::get(k.b().getPtrTy());
}

absl::Status EmitUnique(KernelContext& k) {
  auto view = ViewAlongAxis(k);
  if (!view.ok()) return view.status();
  auto& b = k.b();
  llvm::Value* count = k.CallAbi(
      abi::Fn::cuvil_rt_unique,
      {k.in(0), b.getInt32(static_cast<uint32_t>(k.in_dtype(0))), view->outer, view->extent,
       view->inner, b.getInt32(static_cast<uint32_t>(k.node().attr_int("sorted", 1))), k.out(0),
       OptionalOut(k, 1), OptionalOut(k, 2), OptionalOut(k, 3)});
  // Shape inference admits only the dtypes the runtime sorts, so -1 cannot come back; clamp
  // anyway so a size is never negative.
  k.StoreSymbol(view->count_symbol,
                b.CreateSelect(b.CreateICmpSLT(count, k.I64(0)), k.I64(0), count));
  return absl::OkStatus();
}

absl::Status EmitNonMaxSuppression(KernelContext& k) {
  auto id = CountSymbol(k, 0, 0);
  if (!id.ok()) return id.status();
  auto& b = k.b();
  const SymShape& boxes = k.in_shape(0);
  llvm::Value* max_per_class = k.has_input(2) ? k.Load(DType::kInt64, k.in(2), k.I64(0)) : k.I64(0);
  llvm::Value* iou = k.has_input(3) ? k.Load(DType::kFloat32, k.in(3), k.I64(0)) : k.F32(0);
  llvm::Value* score = k.has_input(4) ? k.Load(DType::kFloat32, k.in(4), k.I64(0)) : k.F32(0);
  llvm::Value* count = k.CallAbi(
      abi::Fn::cuvil_rt_nms,
      {k.in(0), k.in(1), k.Dim(boxes[0]), k.Dim(k.in_shape(1)[1]), k.Dim(boxes[1]), max_per_class,
       iou, score, b.getInt32(k.has_input(4) ? 1 : 0),
       b.getInt32(static_cast<uint32_t>(k.node().attr_int("center_point_box", 0))), k.out(0)});
  k.StoreSymbol(*id, count);
  return absl::OkStatus();
}

}  // namespace

void RegisterSelectionKernels(OpTable& r) {
  r.DefineEmitter("Compress", EmitCompress);
  r.DefineEmitter("NonMaxSuppression", EmitNonMaxSuppression);
  r.DefineEmitter("NonZero", EmitNonZero);
  r.DefineEmitter("Unique", EmitUnique);
}

}  // namespace cuvil::codegen
