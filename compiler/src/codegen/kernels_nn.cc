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

// Largest divisor of n that is <= limit (at least 1).
int64_t LargestDivisor(int64_t n, int64_t limit) {
  for (int64_t d = std::min(n, limit); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

// Tuning: output positions per tile (y tile stays in L1), bytes of the gathered input tile (stays
// in L2), and reduction rows unrolled into one pass over a y tile (FMAs per y load/store).
constexpr int64_t kTilePositions = 1024;
constexpr int64_t kColBytes = 128 * 1024;
constexpr int64_t kUnroll = 16;

// Conv, per (n, group), as Y[m][p] = bias[m] + sum_r W[m][r] * B[r][p] where p runs over output
// positions and r over (input channel, kernel tap). B is X itself for pointwise convs, otherwise
// an im2col tile gathered with the zero padding applied, so the hot loop has no bounds checks.
// The innermost loop runs over contiguous output positions with kUnroll reduction rows unrolled,
// which LLVM vectorises. (A packed GEMM with register blocking over m replaces this later.)
absl::Status EmitConv(KernelContext& k) {
  DType dt = k.in_dtype(0);
  auto& b = k.b();
  Window w = ReadWindow(k);
  size_t last = w.rank() - 1;
  int64_t group = k.node().attr_int("group", 1);
  int64_t C = k.in_shape(0)[1].coef, M = k.out_shape(0)[1].coef;
  int64_t Cg = C / group, Mg = M / group, K = Product(w.kernel), R = Cg * K;
  int64_t P = Product(w.out), OW = w.out[last], rows = P / OW, in_plane = Product(w.in);
  auto all = [](const Ints& v, int64_t x) {
    return std::all_of(v.begin(), v.end(), [x](int64_t e) { return e == x; });
  };
  bool pointwise = all(w.kernel, 1) && all(w.strides, 1) && all(w.pads, 0);
  int64_t esize = DTypeSize(dt);
  int64_t tile_rows = std::clamp<int64_t>(kTilePositions / OW, 1, rows);
  int64_t T = tile_rows * OW, tiles = (rows + tile_rows - 1) / tile_rows;
  int64_t U = LargestDivisor(R, kUnroll);
  int64_t Rb = pointwise ? R : U * LargestDivisor(R / U, std::max<int64_t>(1, kColBytes / (T * esize * U)));
  Ints k_strides = RowMajorStrides(w.kernel), in_strides = RowMajorStrides(w.in);
  Ints outer_out(w.out.begin(), w.out.end() - 1);
  Ints row_strides = RowMajorStrides(outer_out);
  llvm::Value* col = pointwise ? nullptr : k.AllocHeap(k.I64(Rb * T * esize));

  k.For(k.I64(0), k.Dim(k.in_shape(0)[0]), [&](llvm::Value* n) {
    k.For(k.I64(0), k.I64(group), [&](llvm::Value* g) {
      llvm::Value* x_group = b.CreateMul(b.CreateAdd(b.CreateMul(n, k.I64(C)), b.CreateMul(g, k.I64(Cg))),
                                         k.I64(in_plane));
      k.For(k.I64(0), k.I64(tiles), [&](llvm::Value* tile) {
        llvm::Value* q0 = b.CreateMul(tile, k.I64(tile_rows));
        llvm::Value* tr = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, k.I64(tile_rows),
                                                  b.CreateSub(k.I64(rows), q0));
        llvm::Value* p0 = b.CreateMul(q0, k.I64(OW));
        llvm::Value* pt = b.CreateMul(tr, k.I64(OW));
        auto y_tile = [&](llvm::Value* mm) {
          llvm::Value* m = b.CreateAdd(b.CreateMul(g, k.I64(Mg)), mm);
          return b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(n, k.I64(M)), m), k.I64(P)), p0);
        };
        k.For(k.I64(0), k.I64(Mg), [&](llvm::Value* mm) {
          llvm::Value* y0 = y_tile(mm);
          llvm::Value* bias = k.has_input(2) ? k.Load(dt, k.in(2), b.CreateAdd(b.CreateMul(g, k.I64(Mg)), mm))
                                             : k.Const(dt, 0);
          k.For(k.I64(0), pt, [&](llvm::Value* p) { k.Store(dt, k.out(0), b.CreateAdd(y0, p), bias); });
        });
        k.For(k.I64(0), k.I64(R / Rb), [&](llvm::Value* rb) {
          llvm::Value* r0 = b.CreateMul(rb, k.I64(Rb));
          if (!pointwise) {
            // im2col: col[rr][qq*OW + ow] = X at (channel, tap) r0+rr and output position, or 0.
            k.For(k.I64(0), k.I64(Rb), [&](llvm::Value* rr) {
              llvm::Value* rabs = b.CreateAdd(r0, rr);
              llvm::Value* t = b.CreateURem(rabs, k.I64(K));
              llvm::Value* x_plane = b.CreateAdd(x_group, b.CreateMul(b.CreateUDiv(rabs, k.I64(K)), k.I64(in_plane)));
              Idx kk;
              for (size_t j = 0; j <= last; ++j) {
                kk.push_back(b.CreateURem(b.CreateUDiv(t, k.I64(k_strides[j])), k.I64(w.kernel[j])));
              }
              k.For(k.I64(0), tr, [&](llvm::Value* qq) {
                llvm::Value* q = b.CreateAdd(q0, qq);
                llvm::Value* inside_row = b.getTrue();
                llvm::Value* x_row = x_plane;
                for (size_t j = 0; j < last; ++j) {
                  llvm::Value* o = b.CreateURem(b.CreateUDiv(q, k.I64(row_strides[j])), k.I64(outer_out[j]));
                  llvm::Value* pos = w.InputPos(k, j, o, kk[j]);
                  inside_row = b.CreateAnd(inside_row, InRange(k, pos, w.in[j]));
                  x_row = b.CreateAdd(x_row, b.CreateMul(pos, k.I64(in_strides[j])));
                }
                llvm::Value* col_row = b.CreateAdd(b.CreateMul(rr, k.I64(T)), b.CreateMul(qq, k.I64(OW)));
                k.For(k.I64(0), k.I64(OW), [&](llvm::Value* ow) {
                  llvm::Value* pos = w.InputPos(k, last, ow, kk[last]);
                  llvm::Value* inside = b.CreateAnd(inside_row, InRange(k, pos, w.in[last]));
                  // Padding reads a safe dummy element and selects zero: branch-free, vectorisable.
                  llvm::Value* v = k.Load(dt, k.in(0), b.CreateSelect(inside, b.CreateAdd(x_row, pos), k.I64(0)));
                  k.Store(dt, col, b.CreateAdd(col_row, ow), b.CreateSelect(inside, v, k.Const(dt, 0)));
                });
              });
            });
          }
          k.For(k.I64(0), k.I64(Mg), [&](llvm::Value* mm) {
            llvm::Value* y0 = y_tile(mm);
            llvm::Value* w_row = b.CreateMul(b.CreateAdd(b.CreateMul(g, k.I64(Mg)), mm), k.I64(R));
            k.For(k.I64(0), k.I64(Rb / U), [&](llvm::Value* chunk) {
              llvm::Value* rc = b.CreateMul(chunk, k.I64(U));  // relative to r0
              std::vector<llvm::Value*> wv, src;
              for (int64_t u = 0; u < U; ++u) {
                llvm::Value* r = b.CreateAdd(rc, k.I64(u));
                wv.push_back(k.Load(dt, k.in(1), b.CreateAdd(w_row, b.CreateAdd(r0, r))));
                src.push_back(pointwise
                                  ? k.ElemPtr(dt, k.in(0), b.CreateAdd(b.CreateAdd(x_group, b.CreateMul(b.CreateAdd(r0, r), k.I64(P))), p0))
                                  : k.ElemPtr(dt, col, b.CreateMul(r, k.I64(T))));
              }
              k.For(k.I64(0), pt, [&](llvm::Value* p) {
                llvm::Value* yi = b.CreateAdd(y0, p);
                llvm::Value* acc = k.Load(dt, k.out(0), yi);
                for (int64_t u = 0; u < U; ++u) acc = k.Add(dt, acc, k.Mul(dt, wv[u], k.Load(dt, src[u], p)));
                k.Store(dt, k.out(0), yi, acc);
              });
            });
          });
        });
      });
    });
  });
  if (col != nullptr) k.FreeHeap(col);
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
