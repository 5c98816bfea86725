// Code generation for the nn op family: Conv, ConvTranspose and the pooling ops.
//
// Shape inference has canonicalised every windowed op to explicit kernel_shape / strides /
// dilations / pads attributes with static spatial dims, so window geometry is known here at
// compile time; only the batch dim is a runtime value.
#include <algorithm>

#include "codegen/kernel_context.h"

namespace cuvil::codegen {
namespace {

using Ints = std::vector<int64_t>;

int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }
int64_t CeilDiv(int64_t a, int64_t b) { return -FloorDiv(-a, b); }

int64_t Product(const Ints& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

Ints RowMajorStrides(const Ints& dims) {
  Ints s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

Ints StaticSpatial(const SymShape& shape) {
  Ints out;
  for (size_t d = 2; d < shape.size(); ++d) out.push_back(shape[d].coef);
  return out;
}

Idx Consts(KernelContext& k, const Ints& v) {
  Idx out;
  for (int64_t x : v) out.push_back(k.I64(x));
  return out;
}

// base + sum(idx[j] * strides[j]) over the first idx.size() dims.
llvm::Value* Linear(KernelContext& k, llvm::Value* base, const Idx& idx, const Ints& strides) {
  for (size_t j = 0; j < idx.size(); ++j) {
    base = k.b().CreateAdd(base, k.b().CreateMul(idx[j], k.I64(strides[j])));
  }
  return base;
}

// Window geometry over the spatial dims; pads is [begin..., end...].
struct Window {
  Ints in, out, kernel, strides, dilations, pads;

  size_t rank() const { return in.size(); }
  // Input coordinate of output coordinate o and kernel tap kk along dim j (Conv / pools).
  llvm::Value* InputPos(KernelContext& k, size_t j, llvm::Value* o, llvm::Value* kk) const {
    auto& b = k.b();
    return b.CreateAdd(b.CreateMul(o, k.I64(strides[j])),
                       b.CreateAdd(b.CreateMul(kk, k.I64(dilations[j])), k.I64(-pads[j])));
  }
};

Window ReadWindow(KernelContext& k) {
  const ir::Node& n = k.node();
  Window w{StaticSpatial(k.in_shape(0)), StaticSpatial(k.out_shape(0)), n.attr_ints("kernel_shape"),
           n.attr_ints("strides"), n.attr_ints("dilations"), n.attr_ints("pads")};
  return w;
}

// True (i1) when 0 <= pos < size; one unsigned compare covers both bounds.
llvm::Value* InRange(KernelContext& k, llvm::Value* pos, int64_t size) {
  return k.b().CreateICmpULT(pos, k.I64(size));
}

// Conv. Loop order n, oc, output row: the row is initialised with the bias, then every
// (ic, kernel tap) adds a scaled input row into it. The innermost loop walks one output row
// contiguously with compile-time bounds (padding clipped per tap), so LLVM vectorises it.
absl::Status EmitConv(KernelContext& k) {
  DType dt = k.in_dtype(0);
  auto& b = k.b();
  Window w = ReadWindow(k);
  int64_t group = k.node().attr_int("group", 1);
  int64_t C = k.in_shape(0)[1].coef, M = k.out_shape(0)[1].coef;
  int64_t Cg = C / group, Mg = M / group, k_plane = Product(w.kernel);
  Ints k_strides = RowMajorStrides(w.kernel);
  bool pointwise = std::all_of(w.kernel.begin(), w.kernel.end(), [](int64_t v) { return v == 1; }) &&
                   std::all_of(w.strides.begin(), w.strides.end(), [](int64_t v) { return v == 1; }) &&
                   std::all_of(w.pads.begin(), w.pads.end(), [](int64_t v) { return v == 0; });
  if (pointwise) {
    // A 1x1 stride-1 unpadded conv treats each plane as one long row: longer vector loops.
    int64_t plane = Product(w.in);
    w = Window{{plane}, {plane}, {1}, {1}, {1}, {0, 0}};
  }
  size_t r = w.rank(), last = r - 1;
  int64_t in_plane = Product(w.in), out_plane = Product(w.out);
  Ints in_strides = RowMajorStrides(w.in), out_strides = RowMajorStrides(w.out);
  Idx outer_out = Consts(k, Ints(w.out.begin(), w.out.end() - 1));
  Idx outer_k = Consts(k, Ints(w.kernel.begin(), w.kernel.end() - 1));
  int64_t ow_size = w.out[last], iw_size = w.in[last], s = w.strides[last];

  k.For(k.I64(0), k.Dim(k.in_shape(0)[0]), [&](llvm::Value* n) {
    k.For(k.I64(0), k.I64(group), [&](llvm::Value* g) {
      k.For(k.I64(0), k.I64(Mg), [&](llvm::Value* mm) {
        llvm::Value* m = b.CreateAdd(b.CreateMul(g, k.I64(Mg)), mm);
        llvm::Value* y_plane = b.CreateMul(b.CreateAdd(b.CreateMul(n, k.I64(M)), m), k.I64(out_plane));
        llvm::Value* bias = k.has_input(2) ? k.Load(dt, k.in(2), m) : k.Const(dt, 0);
        k.ForNest(outer_out, [&](const Idx& o) {
          llvm::Value* y_row = Linear(k, y_plane, o, out_strides);
          k.For(k.I64(0), k.I64(ow_size), [&](llvm::Value* ow) {
            k.Store(dt, k.out(0), b.CreateAdd(y_row, ow), bias);
          });
          k.For(k.I64(0), k.I64(Cg), [&](llvm::Value* c) {
            llvm::Value* ic = b.CreateAdd(b.CreateMul(g, k.I64(Cg)), c);
            llvm::Value* x_row = b.CreateMul(b.CreateAdd(b.CreateMul(n, k.I64(C)), ic), k.I64(in_plane));
            llvm::Value* w_row =
                b.CreateMul(b.CreateAdd(b.CreateMul(m, k.I64(Cg)), c), k.I64(k_plane));
            k.ForNest(outer_k, [&](const Idx& kk) {
              // Outer spatial dims: skip taps whose whole input row lies in the padding.
              llvm::Value* inside = b.getTrue();
              llvm::Value* x_off = x_row;
              for (size_t j = 0; j < last; ++j) {
                llvm::Value* pos = w.InputPos(k, j, o[j], kk[j]);
                inside = b.CreateAnd(inside, InRange(k, pos, w.in[j]));
                x_off = b.CreateAdd(x_off, b.CreateMul(pos, k.I64(in_strides[j])));
              }
              llvm::Value* w_off = Linear(k, w_row, kk, k_strides);
              k.If(inside, [&] {
                // Last dim unrolled per tap: iw = ow*s + shift, clipped to [0, iw_size).
                for (int64_t kw = 0; kw < w.kernel[last]; ++kw) {
                  int64_t shift = kw * w.dilations[last] - w.pads[last];
                  int64_t lo = std::max<int64_t>(0, CeilDiv(-shift, s));
                  int64_t hi = std::min(ow_size, FloorDiv(iw_size - 1 - shift, s) + 1);
                  if (lo >= hi) continue;
                  llvm::Value* wv = k.Load(dt, k.in(1), b.CreateAdd(w_off, k.I64(kw)));
                  llvm::Value* x_base = b.CreateAdd(x_off, k.I64(shift));
                  k.For(k.I64(lo), k.I64(hi), [&](llvm::Value* ow) {
                    llvm::Value* yi = b.CreateAdd(y_row, ow);
                    llvm::Value* xv = k.Load(dt, k.in(0), b.CreateAdd(x_base, b.CreateMul(ow, k.I64(s))));
                    k.Store(dt, k.out(0), yi, k.Add(dt, k.Load(dt, k.out(0), yi), k.Mul(dt, wv, xv)));
                  });
                }
              });
            });
          });
        });
      });
    });
  });
  return absl::OkStatus();
}

// ConvTranspose as a scatter: every input element adds x * W into the outputs its taps reach
// (out = in*stride + tap*dilation - pad_begin). Canonical pads already include output_padding.
absl::Status EmitConvTranspose(KernelContext& k) {
  DType dt = k.in_dtype(0);
  auto& b = k.b();
  Window w = ReadWindow(k);
  size_t r = w.rank();
  int64_t group = k.node().attr_int("group", 1);
  int64_t C = k.in_shape(0)[1].coef, M = k.out_shape(0)[1].coef;
  int64_t Cg = C / group, Mg = M / group;
  int64_t in_plane = Product(w.in), out_plane = Product(w.out), k_plane = Product(w.kernel);
  Ints in_strides = RowMajorStrides(w.in), out_strides = RowMajorStrides(w.out);
  Ints k_strides = RowMajorStrides(w.kernel);

  k.For(k.I64(0), k.Dim(k.in_shape(0)[0]), [&](llvm::Value* n) {
    k.For(k.I64(0), k.I64(group), [&](llvm::Value* g) {
      k.For(k.I64(0), k.I64(Mg), [&](llvm::Value* mm) {
        llvm::Value* m = b.CreateAdd(b.CreateMul(g, k.I64(Mg)), mm);
        llvm::Value* y_plane = b.CreateMul(b.CreateAdd(b.CreateMul(n, k.I64(M)), m), k.I64(out_plane));
        llvm::Value* bias = k.has_input(2) ? k.Load(dt, k.in(2), m) : k.Const(dt, 0);
        k.For(k.I64(0), k.I64(out_plane), [&](llvm::Value* i) {
          k.Store(dt, k.out(0), b.CreateAdd(y_plane, i), bias);
        });
        k.For(k.I64(0), k.I64(Cg), [&](llvm::Value* c) {
          llvm::Value* ic = b.CreateAdd(b.CreateMul(g, k.I64(Cg)), c);
          llvm::Value* x_plane = b.CreateMul(b.CreateAdd(b.CreateMul(n, k.I64(C)), ic), k.I64(in_plane));
          // W is [C, M/group, kernel...].
          llvm::Value* w_plane = b.CreateMul(b.CreateAdd(b.CreateMul(ic, k.I64(Mg)), mm), k.I64(k_plane));
          k.ForNest(Consts(k, w.in), [&](const Idx& ii) {
            llvm::Value* xv = k.Load(dt, k.in(0), Linear(k, x_plane, ii, in_strides));
            k.ForNest(Consts(k, w.kernel), [&](const Idx& kk) {
              llvm::Value* inside = b.getTrue();
              llvm::Value* y_off = y_plane;
              for (size_t j = 0; j < r; ++j) {
                llvm::Value* pos = w.InputPos(k, j, ii[j], kk[j]);  // same affine map, reversed roles
                inside = b.CreateAnd(inside, InRange(k, pos, w.out[j]));
                y_off = b.CreateAdd(y_off, b.CreateMul(pos, k.I64(out_strides[j])));
              }
              k.If(inside, [&] {
                llvm::Value* wv = k.Load(dt, k.in(1), Linear(k, w_plane, kk, k_strides));
                k.Store(dt, k.out(0), y_off, k.Add(dt, k.Load(dt, k.out(0), y_off), k.Mul(dt, xv, wv)));
              });
            });
          });
        });
      });
    });
  });
  return absl::OkStatus();
}

// MaxPool (with optional Indices) and AveragePool: one accumulator per output element, the
// kernel window walked with a bounds check per tap (pools are cheap next to convolutions).
absl::Status EmitPool(KernelContext& k, bool is_max) {
  DType dt = k.in_dtype(0);
  if (!is_max && !IsFloat(dt)) return k.Unsupported("AveragePool on integer tensors");
  auto& b = k.b();
  Window w = ReadWindow(k);
  size_t r = w.rank();
  bool include_pad = !is_max && k.node().attr_int("count_include_pad", 0) != 0;
  bool want_indices = is_max && k.has_output(1);
  // Indices are flat offsets into X; storage_order 1 means column-major spatial dims.
  Ints idx_strides = RowMajorStrides(w.in);
  if (k.node().attr_int("storage_order", 0) != 0) {
    Ints rev(w.in.rbegin(), w.in.rend());
    idx_strides = RowMajorStrides(rev);
    std::reverse(idx_strides.begin(), idx_strides.end());
  }
  int64_t in_plane = Product(w.in), out_plane = Product(w.out);
  Ints in_strides = RowMajorStrides(w.in), out_strides = RowMajorStrides(w.out);
  llvm::Value* acc = k.Scratch(k.ElemType(dt));
  llvm::Value* count = k.Scratch(k.I64Ty());
  llvm::Value* argmax = k.Scratch(k.I64Ty());
  llvm::Value* planes = b.CreateMul(k.Dim(k.in_shape(0)[0]), k.Dim(k.in_shape(0)[1]));

  k.For(k.I64(0), planes, [&](llvm::Value* p) {
    llvm::Value* x_plane = b.CreateMul(p, k.I64(in_plane));
    llvm::Value* y_plane = b.CreateMul(p, k.I64(out_plane));
    k.ForNest(Consts(k, w.out), [&](const Idx& o) {
      b.CreateStore(is_max ? k.Lowest(dt) : k.Const(dt, 0), acc);
      b.CreateStore(k.I64(0), count);
      b.CreateStore(x_plane, argmax);
      k.ForNest(Consts(k, w.kernel), [&](const Idx& kk) {
        llvm::Value* inside = b.getTrue();
        llvm::Value* padded = b.getTrue();  // inside the input or its explicit padding
        Idx pos;
        for (size_t j = 0; j < r; ++j) {
          pos.push_back(w.InputPos(k, j, o[j], kk[j]));
          inside = b.CreateAnd(inside, InRange(k, pos[j], w.in[j]));
          padded = b.CreateAnd(padded, InRange(k, b.CreateAdd(pos[j], k.I64(w.pads[j])),
                                               w.pads[j] + w.in[j] + w.pads[j + r]));
        }
        auto bump = [&] { b.CreateStore(b.CreateAdd(b.CreateLoad(k.I64Ty(), count), k.I64(1)), count); };
        if (include_pad) k.If(padded, bump);
        k.If(inside, [&] {
          llvm::Value* v = k.Load(dt, k.in(0), Linear(k, x_plane, pos, in_strides));
          llvm::Value* cur = b.CreateLoad(k.ElemType(dt), acc);
          if (want_indices) {
            k.If(k.Greater(dt, v, cur), [&] {
              b.CreateStore(v, acc);
              b.CreateStore(Linear(k, x_plane, pos, idx_strides), argmax);
            });
          } else {
            b.CreateStore(is_max ? k.Max(dt, cur, v) : k.Add(dt, cur, v), acc);
            if (!is_max && !include_pad) bump();
          }
        });
      });
      llvm::Value* y_off = Linear(k, y_plane, o, out_strides);
      llvm::Value* result = b.CreateLoad(k.ElemType(dt), acc);
      if (!is_max) {
        result = k.Div(dt, result, k.Convert(b.CreateLoad(k.I64Ty(), count), DType::kInt64, dt));
      }
      k.Store(dt, k.out(0), y_off, result);
      if (want_indices) k.Store(DType::kInt64, k.out(1), y_off, b.CreateLoad(k.I64Ty(), argmax));
    });
  });
  return absl::OkStatus();
}

// GlobalAveragePool / GlobalMaxPool: one contiguous reduction per (n, c) plane.
absl::Status EmitGlobalPool(KernelContext& k, bool is_max) {
  DType dt = k.in_dtype(0);
  if (!is_max && !IsFloat(dt)) return k.Unsupported("GlobalAveragePool on integer tensors");
  auto& b = k.b();
  const SymShape& shape = k.in_shape(0);
  llvm::Value* planes = b.CreateMul(k.Dim(shape[0]), k.Dim(shape[1]));
  llvm::Value* plane_size = k.NumElements(SymShape(shape.begin() + 2, shape.end()));
  llvm::Value* acc = k.Scratch(k.ElemType(dt));
  k.For(k.I64(0), planes, [&](llvm::Value* p) {
    llvm::Value* x_plane = b.CreateMul(p, plane_size);
    b.CreateStore(is_max ? k.Lowest(dt) : k.Const(dt, 0), acc);
    k.For(k.I64(0), plane_size, [&](llvm::Value* i) {
      llvm::Value* v = k.Load(dt, k.in(0), b.CreateAdd(x_plane, i));
      llvm::Value* cur = b.CreateLoad(k.ElemType(dt), acc);
      b.CreateStore(is_max ? k.Max(dt, cur, v) : k.Add(dt, cur, v), acc);
    });
    llvm::Value* result = b.CreateLoad(k.ElemType(dt), acc);
    if (!is_max) result = k.Div(dt, result, k.Convert(plane_size, DType::kInt64, dt));
    k.Store(dt, k.out(0), p, result);
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterNnKernels(KernelRegistry& r) {
  r.Register("Conv", EmitConv);
  r.Register("ConvTranspose", EmitConvTranspose);
  r.Register("MaxPool", [](KernelContext& k) { return EmitPool(k, /*is_max=*/true); });
  r.Register("AveragePool", [](KernelContext& k) { return EmitPool(k, /*is_max=*/false); });
  r.Register("GlobalMaxPool", [](KernelContext& k) { return EmitGlobalPool(k, /*is_max=*/true); });
  r.Register("GlobalAveragePool", [](KernelContext& k) { return EmitGlobalPool(k, /*is_max=*/false); });
}

}  // namespace cuvil::codegen
