// Code generation for the element-indexing ops: GatherElements, ScatterElements (Scatter) and
// GatherND. Every index is checked against its axis: one outside [-len, len) fails the execution
// with kEntryIndexOutOfBounds and is neither read nor written.
#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil::codegen {
namespace {

// A negative index counted from the end; only used once InRange holds.
llvm::Value* Wrap(KernelContext& k, llvm::Value* idx, llvm::Value* len) {
  auto& b = k.b();
  return b.CreateSelect(b.CreateICmpSLT(idx, k.I64(0)), b.CreateAdd(idx, len), idx);
}

// GatherElements and ScatterElements walk the indices tensor; `body` gets the indices offset and
// the data offset the index names (only called for valid indices).
void ForElements(KernelContext& k, const std::function<void(llvm::Value*, llvm::Value*)>& body) {
  auto& b = k.b();
  size_t axis = static_cast<size_t>(k.node().attr_int("axis", 0));
  const SymShape& data = k.in_shape(0);
  const SymShape& idx = k.in_shape(1);
  Idx data_strides = k.Strides(data), idx_strides = k.Strides(idx);
  llvm::Value* len = k.Dim(data[axis]);
  k.ForNest(k.Dims(idx), [&](const Idx& at) {
    llvm::Value* pos = k.Offset(at, idx_strides);
    llvm::Value* raw = LoadIndex(k, 1, pos);
    llvm::Value* valid = IndexInRange(k, raw, len);
    k.FailIf(b.CreateNot(valid), kEntryIndexOutOfBounds);
    k.If(valid, [&] {
      Idx src = at;
      src[axis] = Wrap(k, raw, len);
      body(pos, k.Offset(src, data_strides));
    });
  });
}

absl::Status GatherElements(KernelContext& k) {
  DType d = k.in_dtype(0);
  ForElements(k, [&](llvm::Value* pos, llvm::Value* src) {
    k.Store(d, k.out(0), pos, k.Load(d, k.in(0), src));
  });
  return absl::OkStatus();
}

absl::Status ScatterElements(KernelContext& k) {
  DType d = k.in_dtype(0);
  std::string reduction = k.node().attr_string("reduction", "none");
  k.Memcpy(k.out(0), k.in(0), k.NumElements(k.in_shape(0)), d);
  ForElements(k, [&](llvm::Value* pos, llvm::Value* dst) {
    llvm::Value* v = k.Load(d, k.in(2), pos);
    llvm::Value* old = reduction == "none" ? nullptr : k.Load(d, k.out(0), dst);
    k.Store(d, k.out(0), dst, ScatterCombine(k, d, reduction, old, v));
  });
  return absl::OkStatus();
}

absl::Status GatherND(KernelContext& k) {
  auto& b = k.b();
  DType d = k.in_dtype(0);
  const SymShape& data = k.in_shape(0);
  const SymShape& idx = k.in_shape(1);
  size_t batch = static_cast<size_t>(k.node().attr_int("batch_dims", 0));
  size_t m = static_cast<size_t>(idx.back().coef());
  SymShape data_rest(data.begin() + batch, data.end());
  Idx rest_dims = k.Dims(data_rest), rest_strides = k.Strides(data_rest);
  llvm::Value* batches = k.NumElements(SymShape(data.begin(), data.begin() + batch));
  llvm::Value* per_batch_data = k.NumElements(data_rest);
  llvm::Value* tuples = k.NumElements(SymShape(idx.begin() + batch, idx.end() - 1));
  llvm::Value* slice = k.NumElements(SymShape(data.begin() + batch + m, data.end()));
  k.For(k.I64(0), batches, [&](llvm::Value* bi) {
    k.For(k.I64(0), tuples, [&](llvm::Value* t) {
      llvm::Value* tuple = b.CreateAdd(b.CreateMul(bi, tuples), t);
      llvm::Value* offset = b.CreateMul(bi, per_batch_data);
      llvm::Value* valid = b.getTrue();
      for (size_t j = 0; j < m; ++j) {
        llvm::Value* raw = LoadIndex(k, 1,
                                     b.CreateAdd(b.CreateMul(tuple, k.I64(static_cast<int64_t>(m))),
                                                 k.I64(static_cast<int64_t>(j))));
        llvm::Value* ok = IndexInRange(k, raw, rest_dims[j]);
        valid = b.CreateAnd(valid, ok);
        llvm::Value* at = b.CreateSelect(ok, Wrap(k, raw, rest_dims[j]), k.I64(0));
        offset = b.CreateAdd(offset, b.CreateMul(at, rest_strides[j]));
      }
      k.FailIf(b.CreateNot(valid), kEntryIndexOutOfBounds);
      k.If(valid, [&] {
        k.Memcpy(k.ElemPtr(d, k.out(0), b.CreateMul(tuple, slice)), k.ElemPtr(d, k.in(0), offset),
                 slice, d);
      });
    });
  });
  return absl::OkStatus();
}

// OneHot: out[..., j, ...] = on if the index (wrapped from the end when negative) equals j, else
// off; an index outside [-depth, depth) gives a row of off values, as ONNX specifies.
absl::Status OneHot(KernelContext& k) {
  auto& b = k.b();
  DType d = k.out_dtype(0);
  size_t axis = static_cast<size_t>(k.node().attr_int("axis", 0));
  llvm::Value* depth = k.I64(k.node().attr_int("depth", 1));
  const SymShape& idx = k.in_shape(0);
  llvm::Value* outer = k.NumElements(SymShape(idx.begin(), idx.begin() + axis));
  llvm::Value* inner = k.NumElements(SymShape(idx.begin() + axis, idx.end()));
  llvm::Value* off = k.Load(d, k.in(2), k.I64(0));
  llvm::Value* on = k.Load(d, k.in(2), k.I64(1));
  DType id = k.in_dtype(0);
  k.ForNest({outer, depth, inner}, [&](const Idx& at) {
    llvm::Value* pos = b.CreateAdd(b.CreateMul(at[0], inner), at[2]);
    llvm::Value* raw = k.Load(id, k.in(0), pos);
    llvm::Value* v = IsFloat(id) ? k.Convert(raw, id, DType::kInt64) : LoadIndex(k, 0, pos);
    v = Wrap(k, v, depth);
    llvm::Value* dst =
        b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(at[0], depth), at[1]), inner), at[2]);
    k.Store(d, k.out(0), dst, b.CreateSelect(b.CreateICmpEQ(v, at[1]), on, off));
  });
  return absl::OkStatus();
}

// ReverseSequence: for batch entry j, the first len[j] time steps are reversed, the rest copied.
// A length outside [0, time steps] fails the execution and that entry is copied unreversed.
absl::Status ReverseSequence(KernelContext& k) {
  auto& b = k.b();
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  bool time_first = k.node().attr_int("time_axis", 0) == 0;
  llvm::Value* steps = k.Dim(shape[time_first ? 0 : 1]);
  llvm::Value* batch = k.Dim(shape[time_first ? 1 : 0]);
  llvm::Value* inner = k.NumElements(SymShape(shape.begin() + 2, shape.end()));
  k.ForNest({batch, steps}, [&](const Idx& at) {
    llvm::Value* j = at[0];
    llvm::Value* t = at[1];
    llvm::Value* len = LoadIndex(k, 1, j);
    llvm::Value* ok = b.CreateAnd(b.CreateICmpSGE(len, k.I64(0)), b.CreateICmpSLE(len, steps));
    k.FailIf(b.CreateNot(ok), kEntryIndexOutOfBounds);
    llvm::Value* reversed = b.CreateAnd(ok, b.CreateICmpSLT(t, len));
    llvm::Value* src_t = b.CreateSelect(reversed, b.CreateSub(b.CreateSub(len, k.I64(1)), t), t);
    auto offset = [&](llvm::Value* time) {
      llvm::Value* outer = time_first ? b.CreateAdd(b.CreateMul(time, batch), j)
                                      : b.CreateAdd(b.CreateMul(j, steps), time);
      return b.CreateMul(outer, inner);
    };
    k.Memcpy(k.ElemPtr(d, k.out(0), offset(t)), k.ElemPtr(d, k.in(0), offset(src_t)), inner, d);
  });
  return absl::OkStatus();
}

// MaxUnpool: a zeroed output with X's values scattered to their indices. An index names a flat
// position in the default output ("index_shape"); its coordinates there are kept in the output.
// An index outside the default output, or coordinates outside the output, fail the execution.
absl::Status MaxUnpool(KernelContext& k) {
  auto& b = k.b();
  DType d = k.in_dtype(0);
  std::vector<int64_t> index_shape = k.node().attr_ints("index_shape");
  std::vector<int64_t> out_shape = k.node().attr_ints("output_shape");
  int64_t index_total = 1, out_total = 1;
  for (int64_t v : index_shape) index_total *= v;
  for (int64_t v : out_shape) out_total *= v;
  k.Memset0(k.out(0), k.I64(out_total), d);
  k.For(k.I64(0), k.NumElements(k.in_shape(0)), [&](llvm::Value* i) {
    llvm::Value* flat = LoadIndex(k, 1, i);
    llvm::Value* valid =
        b.CreateAnd(b.CreateICmpSGE(flat, k.I64(0)), b.CreateICmpSLT(flat, k.I64(index_total)));
    flat = b.CreateSelect(valid, flat, k.I64(0));
    // Re-linearise the coordinates in the output shape (a no-op when the shapes agree).
    llvm::Value* at = k.I64(0);
    llvm::Value* rest = flat;
    llvm::Value* stride = k.I64(1);
    for (size_t a = index_shape.size(); a-- > 0;) {
      llvm::Value* coord = b.CreateURem(rest, k.I64(index_shape[a]));
      rest = b.CreateUDiv(rest, k.I64(index_shape[a]));
      valid = b.CreateAnd(valid, b.CreateICmpSLT(coord, k.I64(out_shape[a])));
      at = b.CreateAdd(at, b.CreateMul(coord, stride));
      stride = b.CreateMul(stride, k.I64(out_shape[a]));
    }
    k.FailIf(b.CreateNot(valid), kEntryIndexOutOfBounds);
    k.If(valid, [&] { k.Store(d, k.out(0), at, k.Load(d, k.in(0), i)); });
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterIndexingKernels(OpTable& r) {
  r.DefineEmitter("GatherElements", GatherElements);
  r.DefineEmitter("ScatterElements", ScatterElements);
  r.DefineEmitter("Scatter", ScatterElements);
  r.DefineEmitter("GatherND", GatherND);
  r.DefineEmitter("OneHot", OneHot);
  r.DefineEmitter("ReverseSequence", ReverseSequence);
  r.DefineEmitter("MaxUnpool", MaxUnpool);
}

}  // namespace cuvil::codegen
