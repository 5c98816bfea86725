// Code generation for the nn op family: Conv, ConvTranspose and the pooling ops.
//
// Shape inference has canonicalised every windowed op to explicit kernel_shape / strides /
// dilations / pads attributes, so the window itself is known here at compile time. Spatial dims
// are static except on the paths that take them at run time (the float32 2-D Conv and MaxPool
// microkernels, ConvTranspose), where they are symbolic expressions (an image's H and W).
#include <algorithm>
#include <cstddef>

#include "codegen/kernel_context.h"
#include "codegen/lower.h"
#include "cuvil/runtime/ukernel_scratch.h"
#include "cuvil/runtime/ukernels.h"
#include "llvm/IR/MDBuilder.h"

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

// Largest divisor of n that is <= limit (at least 1).
int64_t LargestDivisor(int64_t n, int64_t limit) {
  for (int64_t d = std::min(n, limit); d > 1; --d) {
    if (n % d == 0) return d;
  }
  return 1;
}

Ints StaticSpatial(const SymShape& shape) {
  Ints out;
  for (size_t d = 2; d < shape.size(); ++d) out.push_back(shape[d].coef());
  return out;
}

// The spatial dims of `shape` (everything after N and C).
SymShape Spatial(const SymShape& shape) { return SymShape(shape.begin() + 2, shape.end()); }

// A parameter block of i64 words for a runtime microkernel: a private constant when every word
// is a constant, else a stack array filled here (symbolic spatial dims).
llvm::Value* ParamsBlock(KernelContext& k, const std::vector<llvm::Value*>& words,
                         const std::string& name) {
  bool constant = true;
  for (llvm::Value* w : words) constant = constant && llvm::isa<llvm::ConstantInt>(w);
  llvm::Type* i64 = k.I64Ty();
  auto* array_ty = llvm::ArrayType::get(i64, words.size());
  if (constant) {
    std::vector<llvm::Constant*> init;
    for (llvm::Value* w : words) init.push_back(llvm::cast<llvm::Constant>(w));
    return new llvm::GlobalVariable(
        k.module(), array_ty, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
        llvm::ConstantArray::get(array_ty, init), k.function()->getName() + name);
  }
  llvm::Value* block = k.Scratch(i64, static_cast<int64_t>(words.size()));
  for (size_t i = 0; i < words.size(); ++i) {
    k.b().CreateStore(words[i], k.b().CreateConstGEP1_64(i64, block, i));
  }
  return block;
}

Idx Consts(KernelContext& k, const Ints& v) {
  Idx out;
  for (int64_t x : v) out.push_back(k.I64(x));
  return out;
}

// i * scale + offset, the shape of nearly every index computation here.
llvm::Value* Affine(KernelContext& k, llvm::Value* i, int64_t scale, llvm::Value* offset) {
  return k.b().CreateAdd(k.b().CreateMul(i, k.I64(scale)), offset);
}

// base + sum(idx[j] * strides[j]) over the first idx.size() dims.
llvm::Value* Linear(KernelContext& k, llvm::Value* base, const Idx& idx, const Ints& strides) {
  for (size_t j = 0; j < idx.size(); ++j) base = Affine(k, idx[j], strides[j], base);
  return base;
}

// base + sum(idx[j] * strides[j]) with run-time strides.
llvm::Value* Linear(KernelContext& k, llvm::Value* base, const Idx& idx, const Idx& strides) {
  for (size_t j = 0; j < idx.size(); ++j) {
    base = k.b().CreateAdd(k.b().CreateMul(idx[j], strides[j]), base);
  }
  return base;
}

// Coordinate j of flat index `flat` in a row-major space with `strides` and `dims`.
llvm::Value* Coord(KernelContext& k, llvm::Value* flat, const Ints& strides, const Ints& dims,
                   size_t j) {
  auto& b = k.b();
  return b.CreateURem(b.CreateUDiv(flat, k.I64(strides[j])), k.I64(dims[j]));
}

// True (i1) when 0 <= pos < size; one unsigned compare covers both bounds.
llvm::Value* InRange(KernelContext& k, llvm::Value* pos, int64_t size) {
  return k.b().CreateICmpULT(pos, k.I64(size));
}

// Alias scopes stating that the listed buffers are pairwise disjoint (the memory plan never places
// a node's output over its inputs; scratch is freshly allocated). Without them the vectoriser
// guards every hot loop with runtime overlap checks, one per source row, costing compile time.
class DisjointBuffers {
 public:
  DisjointBuffers(KernelContext& k, const std::vector<llvm::Value*>& buffers) : k_(k) {
    llvm::LLVMContext& ctx = k.llvm_context();
    llvm::MDBuilder mdb(ctx);
    llvm::MDNode* domain = mdb.createAnonymousAliasScopeDomain("nn");
    std::vector<llvm::Metadata*> scopes;
    for (size_t i = 0; i < buffers.size(); ++i) {
      scopes.push_back(mdb.createAnonymousAliasScope(domain));
    }
    for (size_t i = 0; i < buffers.size(); ++i) {
      std::vector<llvm::Metadata*> others = scopes;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(i));
      tags_[buffers[i]] = {llvm::MDNode::get(ctx, {scopes[i]}), llvm::MDNode::get(ctx, others)};
    }
  }
  // Accesses through `ptr` belong to `buffer`.
  void Derive(llvm::Value* ptr, llvm::Value* buffer) { tags_[ptr] = tags_.at(buffer); }

  llvm::Value* Load(DType dt, llvm::Value* base, llvm::Value* index) {
    return Tag(llvm::cast<llvm::Instruction>(k_.Load(dt, base, index)), base);
  }
  void Store(DType dt, llvm::Value* base, llvm::Value* index, llvm::Value* value) {
    Tag(k_.b().CreateStore(value, k_.ElemPtr(dt, base, index)), base);
  }

 private:
  llvm::Instruction* Tag(llvm::Instruction* access, llvm::Value* base) {
    auto [scope, others] = tags_.at(base);
    access->setMetadata(llvm::LLVMContext::MD_alias_scope, scope);
    access->setMetadata(llvm::LLVMContext::MD_noalias, others);
    return access;
  }

  KernelContext& k_;
  std::map<llvm::Value*, std::pair<llvm::MDNode*, llvm::MDNode*>> tags_;
};

// Window geometry over the spatial dims; pads is [begin..., end...].
struct Window {
  Ints in, out, kernel, strides, dilations, pads;

  size_t rank() const { return in.size(); }
  // Input coordinate of output coordinate o and kernel tap kk along dim j. ConvTranspose uses the
  // same map with the roles of input and output swapped.
  llvm::Value* InputPos(KernelContext& k, size_t j, llvm::Value* o, llvm::Value* kk) const {
    return Affine(k, o, strides[j], Affine(k, kk, dilations[j], k.I64(-pads[j])));
  }
};

Window ReadWindow(KernelContext& k) {
  const ir::Node& n = k.node();
  return Window{StaticSpatial(k.in_shape(0)), StaticSpatial(k.out_shape(0)),
                n.attr_ints("kernel_shape"),  n.attr_ints("strides"),
                n.attr_ints("dilations"),     n.attr_ints("pads")};
}

// Tuning: output positions per tile (a y tile stays in L1), bytes of the gathered input tile (stays
// in L2), and reduction rows unrolled into one pass over a y tile (FMAs per y load/store).
constexpr int64_t kTilePositions = 1024;
constexpr int64_t kColBytes = 128 * 1024;
constexpr int64_t kUnroll = 16;

// Conv is computed per (n, group) as Y[m][p] = bias[m] + sum_r W[m][r] * B[r][p]: p runs over
// output positions, r over (input channel, kernel tap), and W's [M, C/group, kernel...] layout is
// already W[m][r]. B is X itself for pointwise convs, otherwise an im2col tile gathered with the
// zero padding applied, so the hot loop has no bounds checks. (A packed GEMM comes later.)
struct ConvPlan {
  Window w;
  DType dt;
  int64_t group, C, M, Cg, Mg;
  int64_t K, R;         // kernel taps, reduction rows (Cg * K)
  int64_t P, OW, rows;  // output positions = rows * OW (rows: all but the last spatial dim)
  int64_t in_plane;
  bool pointwise;        // 1x1, stride 1, no padding: B is X
  int64_t tile_rows, T;  // output rows / positions per tile
  int64_t U, Rb;         // rows unrolled per pass, rows per im2col block (U | Rb | R)
};

ConvPlan PlanConv(KernelContext& k) {
  ConvPlan c;
  c.w = ReadWindow(k);
  c.dt = k.in_dtype(0);
  c.group = k.node().attr_int("group", 1);
  c.C = k.in_shape(0)[1].coef();
  c.M = k.out_shape(0)[1].coef();
  c.Cg = c.C / c.group;
  c.Mg = c.M / c.group;
  c.K = Product(c.w.kernel);
  c.R = c.Cg * c.K;
  c.P = Product(c.w.out);
  c.OW = c.w.out.back();
  c.rows = c.P / c.OW;
  c.in_plane = Product(c.w.in);
  auto all = [](const Ints& v, int64_t x) {
    return std::count(v.begin(), v.end(), x) == std::ssize(v);
  };
  c.pointwise = all(c.w.kernel, 1) && all(c.w.strides, 1) && all(c.w.pads, 0);
  c.tile_rows = std::clamp<int64_t>(kTilePositions / c.OW, 1, c.rows);
  c.T = c.tile_rows * c.OW;
  c.U = LargestDivisor(c.R, kUnroll);
  int64_t col_rows = std::max<int64_t>(1, kColBytes / (c.T * DTypeSize(c.dt) * c.U));
  c.Rb = c.pointwise ? c.R : c.U * LargestDivisor(c.R / c.U, col_rows);
  return c;
}

// im2col: col[rr][qq*OW + ow] = X at reduction row r0+rr and output position (q0+qq, ow), or 0 in
// the padding. x_group indexes the group's first input plane.
void EmitIm2Col(KernelContext& k, DisjointBuffers& mem, const ConvPlan& c, llvm::Value* col,
                llvm::Value* x_group, llvm::Value* r0, llvm::Value* q0, llvm::Value* tr) {
  auto& b = k.b();
  const Window& w = c.w;
  size_t last = w.rank() - 1;
  Ints k_strides = RowMajorStrides(w.kernel), in_strides = RowMajorStrides(w.in);
  Ints outer(w.out.begin(), w.out.end() - 1);
  Ints outer_strides = RowMajorStrides(outer);
  k.For(k.I64(0), k.I64(c.Rb), [&](llvm::Value* rr) {
    llvm::Value* r = b.CreateAdd(r0, rr);
    llvm::Value* tap = b.CreateURem(r, k.I64(c.K));
    llvm::Value* x_plane = Affine(k, b.CreateUDiv(r, k.I64(c.K)), c.in_plane, x_group);
    Idx kk;
    for (size_t j = 0; j <= last; ++j) kk.push_back(Coord(k, tap, k_strides, w.kernel, j));
    k.For(k.I64(0), tr, [&](llvm::Value* qq) {
      llvm::Value* q = b.CreateAdd(q0, qq);
      llvm::Value* row_inside = b.getTrue();
      llvm::Value* x_row = x_plane;
      for (size_t j = 0; j < last; ++j) {
        llvm::Value* pos = w.InputPos(k, j, Coord(k, q, outer_strides, outer, j), kk[j]);
        row_inside = b.CreateAnd(row_inside, InRange(k, pos, w.in[j]));
        x_row = Affine(k, pos, in_strides[j], x_row);
      }
      llvm::Value* col_row = Affine(k, rr, c.T, b.CreateMul(qq, k.I64(c.OW)));
      k.For(k.I64(0), k.I64(c.OW), [&](llvm::Value* ow) {
        llvm::Value* pos = w.InputPos(k, last, ow, kk[last]);
        llvm::Value* inside = b.CreateAnd(row_inside, InRange(k, pos, w.in[last]));
        // Padding reads a safe dummy element and selects zero: branch-free, so it vectorises.
        llvm::Value* v =
            mem.Load(c.dt, k.in(0), b.CreateSelect(inside, b.CreateAdd(x_row, pos), k.I64(0)));
        mem.Store(c.dt, col, b.CreateAdd(col_row, ow), b.CreateSelect(inside, v, k.Const(c.dt, 0)));
      });
    });
  });
}

// A Conv prepared by the fusion pass (fuse_conv.cc): one call into the runtime microkernel with
// the geometry as a constant cuvil_uk_conv_params, the batch and the fused epilogue.
absl::Status EmitConvUkernel(KernelContext& k) {
  const ir::Node& n = k.node();
  const Window w = ReadWindow(k);
  if (w.rank() != 2) return k.Error("microkernel Conv must be 2-D");
  const int64_t kind = n.attr_int("ukernel", 0);
  cuvil_uk_conv_params p{};
  p.channels = k.in_shape(0)[1].coef();
  p.out_channels = k.out_shape(0)[1].coef();
  p.kernel_h = w.kernel[0];
  p.kernel_w = w.kernel[1];
  p.stride_h = w.strides[0];
  p.stride_w = w.strides[1];
  p.dilation_h = w.dilations[0];
  p.dilation_w = w.dilations[1];
  p.pad_top = w.pads[0];
  p.pad_left = w.pads[1];
  p.groups = n.attr_int("group", 1);
  p.activation = n.attr_int("fused_act", CUVIL_UK_ACT_NONE);
  p.flags = kind == 2   ? CUVIL_UK_CONV_DEPTHWISE
            : kind == 3 ? CUVIL_UK_CONV_WINOGRAD
                        : CUVIL_UK_CONV_PACKED;
  static_assert(sizeof(cuvil_uk_conv_params) == 17 * sizeof(int64_t));
  const int64_t* fields = &p.channels;
  std::vector<SymDim> dims;
  for (int i = 0; i < 17; ++i) dims.push_back(SymDim::Const(fields[i]));
  // height, width, out_height, out_width: run-time values where the dims are symbolic.
  const SymShape in_hw = Spatial(k.in_shape(0)), out_hw = Spatial(k.out_shape(0));
  const size_t height = offsetof(cuvil_uk_conv_params, height) / sizeof(int64_t);
  const size_t out_height = offsetof(cuvil_uk_conv_params, out_height) / sizeof(int64_t);
  dims[height] = in_hw[0];
  dims[height + 1] = in_hw[1];
  dims[out_height] = out_hw[0];
  dims[out_height + 1] = out_hw[1];
  llvm::Value* params = ParamsBlock(k, k.Dims(dims), ".conv_params");
  // The same words, then the batch: what sizes the call's scratch.
  dims.push_back(k.in_shape(0)[0]);
  k.NoteScratch(n.has_attr("q_x_scale") ? CUVIL_SCRATCH_QDEPTHWISE2D : CUVIL_SCRATCH_CONV2D,
                std::move(dims));
  llvm::Value* null = llvm::ConstantPointerNull::get(k.b().getPtrTy());
  auto in_or_null = [&](size_t i) { return k.has_input(i) ? k.in(i) : null; };
  if (n.has_attr("q_x_scale")) {  // Depthwise between 8-bit tensors (fuse_qdq.h).
    auto i32 = [&](const char* attr) {
      return k.b().getInt32(static_cast<uint32_t>(n.attr_int(attr, 0)));
    };
    k.CallC("cuvil_uk_qdepthwise2d", k.b().getVoidTy(),
            {params, k.in(0), i32("q_x_signed"), k.F32(n.attr_float("q_x_scale", 1.0f)),
             i32("q_x_zero"), k.in(1), in_or_null(2), k.out(0), i32("q_y_signed"),
             k.F32(n.attr_float("q_y_scale", 1.0f)), i32("q_y_zero"), k.Dim(k.in_shape(0)[0]),
             k.F32(n.attr_float("fused_alpha", 0.0f)), k.F32(n.attr_float("fused_beta", 0.0f))});
    return absl::OkStatus();
  }
  k.CallC(
      "cuvil_uk_conv2d", k.b().getVoidTy(),
      {params, k.in(0), k.in(1), in_or_null(2), in_or_null(3), k.out(0), k.Dim(k.in_shape(0)[0]),
       k.F32(n.attr_float("fused_alpha", 0.0f)), k.F32(n.attr_float("fused_beta", 0.0f))});
  return absl::OkStatus();
}

absl::Status EmitConv(KernelContext& k) {
  if (k.node().has_attr("ukernel")) return EmitConvUkernel(k);
  if (!IsStaticShape(Spatial(k.in_shape(0))) || !IsStaticShape(Spatial(k.out_shape(0)))) {
    return k.Unsupported("symbolic spatial dims outside the float32 2-D microkernel");
  }
  auto& b = k.b();
  const ConvPlan c = PlanConv(k);
  DType dt = c.dt;
  int64_t tiles = (c.rows + c.tile_rows - 1) / c.tile_rows;
  const int64_t col_bytes = c.Rb * c.T * DTypeSize(dt);
  llvm::Value* col =
      c.pointwise ? nullptr : k.AllocHeap(k.I64(col_bytes), {{SymDim::Const(col_bytes)}});
  DisjointBuffers mem(k, {k.out(0), k.in(0), k.in(1), col});
  k.For(k.I64(0), k.Dim(k.in_shape(0)[0]), [&](llvm::Value* n) {
    k.For(k.I64(0), k.I64(c.group), [&](llvm::Value* g) {
      llvm::Value* x_group =
          b.CreateMul(Affine(k, n, c.C, b.CreateMul(g, k.I64(c.Cg))), k.I64(c.in_plane));
      k.For(k.I64(0), k.I64(tiles), [&](llvm::Value* tile) {
        llvm::Value* q0 = b.CreateMul(tile, k.I64(c.tile_rows));
        llvm::Value* tr = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, k.I64(c.tile_rows),
                                                  b.CreateSub(k.I64(c.rows), q0));
        llvm::Value* p0 = b.CreateMul(q0, k.I64(c.OW));
        llvm::Value* pt = b.CreateMul(tr, k.I64(c.OW));
        // Output channel m of this group, and the index of its tile's first y element.
        auto channel = [&](llvm::Value* mm) { return Affine(k, g, c.Mg, mm); };
        auto y_tile = [&](llvm::Value* mm) {
          return Affine(k, Affine(k, n, c.M, channel(mm)), c.P, p0);
        };
        k.For(k.I64(0), k.I64(c.Mg), [&](llvm::Value* mm) {
          llvm::Value* y0 = y_tile(mm);
          llvm::Value* bias = k.has_input(2) ? k.Load(dt, k.in(2), channel(mm)) : k.Const(dt, 0);
          k.For(k.I64(0), pt,
                [&](llvm::Value* p) { mem.Store(dt, k.out(0), b.CreateAdd(y0, p), bias); });
        });
        k.For(k.I64(0), k.I64(c.R / c.Rb), [&](llvm::Value* block) {
          llvm::Value* r0 = b.CreateMul(block, k.I64(c.Rb));
          if (!c.pointwise) EmitIm2Col(k, mem, c, col, x_group, r0, q0, tr);
          k.For(k.I64(0), k.I64(c.Mg), [&](llvm::Value* mm) {
            llvm::Value* y0 = y_tile(mm);
            llvm::Value* w_row = Affine(k, channel(mm), c.R, r0);
            k.For(k.I64(0), k.I64(c.Rb / c.U), [&](llvm::Value* chunk) {
              // U weights and B rows, then one vectorisable pass adding all U products into y.
              std::vector<llvm::Value*> wv, src;
              for (int64_t u = 0; u < c.U; ++u) {
                llvm::Value* rr = Affine(k, chunk, c.U, k.I64(u));
                wv.push_back(mem.Load(dt, k.in(1), b.CreateAdd(w_row, rr)));
                // Pointwise: row r of B is input plane r of the group, from the tile start.
                llvm::Value* x_row = Affine(k, b.CreateAdd(r0, rr), c.P, b.CreateAdd(x_group, p0));
                llvm::Value* buffer = c.pointwise ? k.in(0) : col;
                src.push_back(c.pointwise ? k.ElemPtr(dt, k.in(0), x_row)
                                          : k.ElemPtr(dt, col, b.CreateMul(rr, k.I64(c.T))));
                mem.Derive(src.back(), buffer);
              }
              k.For(k.I64(0), pt, [&](llvm::Value* p) {
                llvm::Value* yi = b.CreateAdd(y0, p);
                llvm::Value* acc = mem.Load(dt, k.out(0), yi);
                for (int64_t u = 0; u < c.U; ++u) {
                  acc = k.Add(dt, acc, k.Mul(dt, wv[u], mem.Load(dt, src[u], p)));
                }
                mem.Store(dt, k.out(0), yi, acc);
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
  int64_t C = k.in_shape(0)[1].coef(), M = k.out_shape(0)[1].coef();
  int64_t Cg = C / group, Mg = M / group;
  // Spatial extents as values (constants for static dims, so the IR folds as before).
  const SymShape in_dims = Spatial(k.in_shape(0)), out_dims = Spatial(k.out_shape(0));
  const Idx in = k.Dims(in_dims), out = k.Dims(out_dims);
  llvm::Value* in_plane = k.NumElements(in_dims);
  llvm::Value* out_plane = k.NumElements(out_dims);
  int64_t k_plane = Product(w.kernel);
  const Idx in_strides = k.Strides(in_dims), out_strides = k.Strides(out_dims);
  Ints k_strides = RowMajorStrides(w.kernel);

  k.For(k.I64(0), k.Dim(k.in_shape(0)[0]), [&](llvm::Value* n) {
    k.For(k.I64(0), k.I64(group), [&](llvm::Value* g) {
      k.For(k.I64(0), k.I64(Mg), [&](llvm::Value* mm) {
        llvm::Value* m = Affine(k, g, Mg, mm);
        llvm::Value* y_plane = b.CreateMul(Affine(k, n, M, m), out_plane);
        llvm::Value* bias = k.has_input(2) ? k.Load(dt, k.in(2), m) : k.Const(dt, 0);
        k.For(k.I64(0), out_plane,
              [&](llvm::Value* i) { k.Store(dt, k.out(0), b.CreateAdd(y_plane, i), bias); });
        k.For(k.I64(0), k.I64(Cg), [&](llvm::Value* c) {
          llvm::Value* ic = Affine(k, g, Cg, c);
          llvm::Value* x_plane = b.CreateMul(Affine(k, n, C, ic), in_plane);
          // W is [C, M/group, kernel...].
          llvm::Value* w_plane = b.CreateMul(Affine(k, ic, Mg, mm), k.I64(k_plane));
          k.ForNest(in, [&](const Idx& ii) {
            llvm::Value* xv = k.Load(dt, k.in(0), Linear(k, x_plane, ii, in_strides));
            k.ForNest(Consts(k, w.kernel), [&](const Idx& kk) {
              llvm::Value* inside = b.getTrue();
              llvm::Value* y_off = y_plane;
              for (size_t j = 0; j < r; ++j) {
                llvm::Value* pos = w.InputPos(k, j, ii[j], kk[j]);
                inside = b.CreateAnd(inside, b.CreateICmpULT(pos, out[j]));
                y_off = b.CreateAdd(b.CreateMul(pos, out_strides[j]), y_off);
              }
              k.If(inside, [&] {
                llvm::Value* wv = k.Load(dt, k.in(1), Linear(k, w_plane, kk, k_strides));
                k.Store(dt, k.out(0), y_off,
                        k.Add(dt, k.Load(dt, k.out(0), y_off), k.Mul(dt, xv, wv)));
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
  // Float32 2-D max pooling without Indices: the runtime kernel (vectorised rows, no per-tap
  // bounds check inside the input, planes split over the intra-op threads).
  if (is_max && !want_indices && dt == DType::kFloat32 && r == 2) {
    static_assert(sizeof(cuvil_uk_pool_params) == 12 * sizeof(int64_t));
    const SymShape in_hw = Spatial(k.in_shape(0)), out_hw = Spatial(k.out_shape(0));
    std::vector<SymDim> dims = {in_hw[0], in_hw[1], out_hw[0], out_hw[1]};
    for (int64_t v : {w.kernel[0], w.kernel[1], w.strides[0], w.strides[1], w.dilations[0],
                      w.dilations[1], w.pads[0], w.pads[1]}) {
      dims.push_back(SymDim::Const(v));
    }
    llvm::Value* params = ParamsBlock(k, k.Dims(dims), ".pool_params");
    llvm::Value* planes = b.CreateMul(k.Dim(k.in_shape(0)[0]), k.Dim(k.in_shape(0)[1]));
    // The same words, then the planes: what sizes the call's scratch.
    dims.push_back(SymMul(k.in_shape(0)[0], k.in_shape(0)[1]));
    k.NoteScratch(CUVIL_SCRATCH_MAXPOOL2D, std::move(dims));
    k.CallC("cuvil_uk_maxpool2d", b.getVoidTy(), {params, k.in(0), k.out(0), planes});
    return absl::OkStatus();
  }
  if (!IsStaticShape(Spatial(k.in_shape(0))) || !IsStaticShape(Spatial(k.out_shape(0)))) {
    return k.Unsupported("symbolic spatial dims outside float32 2-D MaxPool without Indices");
  }
  llvm::Value* acc = k.Scratch(k.ElemType(dt));
  llvm::Value* count = k.Scratch(k.I64Ty());
  llvm::Value* argmax = k.Scratch(k.I64Ty());
  llvm::Value* planes = b.CreateMul(k.Dim(k.in_shape(0)[0]), k.Dim(k.in_shape(0)[1]));

  // Max pooling whose every window lies inside the input (no padding, no overhang) and has at
  // most 64 taps: no bounds check or control flow per tap, so the output loop vectorises.
  bool all_inside = is_max && !want_indices && Product(w.kernel) <= 64;
  for (size_t j = 0; j < r && all_inside; ++j) {
    all_inside = w.pads[j] == 0 && w.pads[j + r] == 0 &&
                 (w.out[j] - 1) * w.strides[j] + (w.kernel[j] - 1) * w.dilations[j] < w.in[j];
  }
  if (all_inside) {
    // Float32 rows are taken up to a target vector of outputs at a time: per tap, one load of the
    // input span the lanes read, de-interleaved by the stride with a shuffle.
    const size_t last = r - 1;
    const int64_t stride = w.strides[last];
    const int64_t lanes = dt == DType::kFloat32 && stride <= 4 ? TargetVectorBits() / 32 : 0;
    Ints outer_out(w.out.begin(), w.out.begin() + static_cast<std::ptrdiff_t>(last));
    // max over the window of output `o` (whose last coordinate is the first of the lanes).
    auto window_max = [&](llvm::Value* x_plane, const Idx& o, int64_t width) {
      llvm::Value* m = k.Lowest(dt);
      llvm::Type* span_ty = nullptr;
      std::vector<int> pick;
      if (width > 1) {
        m = b.CreateVectorSplat(static_cast<unsigned>(width), m);
        span_ty = llvm::FixedVectorType::get(k.ElemType(dt),
                                             static_cast<unsigned>((width - 1) * stride + 1));
        for (int64_t l = 0; l < width; ++l) pick.push_back(static_cast<int>(l * stride));
      }
      Ints tap(r, 0);
      for (bool more = true; more;) {
        Idx pos;
        for (size_t j = 0; j < r; ++j) pos.push_back(w.InputPos(k, j, o[j], k.I64(tap[j])));
        llvm::Value* at = Linear(k, x_plane, pos, in_strides);
        llvm::Value* v;
        if (width > 1) {
          v = b.CreateShuffleVector(
              b.CreateAlignedLoad(span_ty, k.ElemPtr(dt, k.in(0), at), llvm::Align(4)), pick);
        } else {
          v = k.Load(dt, k.in(0), at);
        }
        m = k.Max(dt, m, v);
        more = false;
        for (size_t j = r; j-- > 0;) {
          if (++tap[j] < w.kernel[j]) {
            more = true;
            break;
          }
          tap[j] = 0;
        }
      }
      return m;
    };
    k.For(k.I64(0), planes, [&](llvm::Value* p) {
      llvm::Value* x_plane = b.CreateMul(p, k.I64(in_plane));
      llvm::Value* y_plane = b.CreateMul(p, k.I64(out_plane));
      k.ForNest(Consts(k, outer_out), [&](const Idx& outer) {
        auto emit = [&](llvm::Value* x, int64_t width) {
          Idx o = outer;
          o.push_back(x);
          llvm::Value* m = window_max(x_plane, o, width);
          llvm::Value* y = k.ElemPtr(dt, k.out(0), Linear(k, y_plane, o, out_strides));
          b.CreateAlignedStore(m, y, llvm::Align(4));
        };
        // Full vectors, then halves down to 4 lanes (a 12-wide row is 8 + 4), then scalars.
        int64_t x0 = 0;
        for (int64_t width = lanes; width >= 4; width /= 2) {
          int64_t n = (w.out[last] - x0) / width;
          if (n == 0) continue;
          k.For(k.I64(0), k.I64(n), [&](llvm::Value* c) {
            emit(b.CreateAdd(k.I64(x0), b.CreateMul(c, k.I64(width))), width);
          });
          x0 += n * width;
        }
        k.For(k.I64(x0), k.I64(w.out[last]), [&](llvm::Value* x) { emit(x, 1); });
      });
    });
    return absl::OkStatus();
  }

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
        auto bump = [&] {
          b.CreateStore(b.CreateAdd(b.CreateLoad(k.I64Ty(), count), k.I64(1)), count);
        };
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

void RegisterNnKernels(OpTable& r) {
  r.DefineEmitter("Conv", EmitConv);
  r.DefineEmitter("ConvTranspose", EmitConvTranspose);
  r.DefineEmitter("MaxPool", [](KernelContext& k) { return EmitPool(k, /*is_max=*/true); });
  r.DefineEmitter("AveragePool", [](KernelContext& k) { return EmitPool(k, /*is_max=*/false); });
  r.DefineEmitter("GlobalMaxPool",
                  [](KernelContext& k) { return EmitGlobalPool(k, /*is_max=*/true); });
  r.DefineEmitter("GlobalAveragePool",
                  [](KernelContext& k) { return EmitGlobalPool(k, /*is_max=*/false); });
}

}  // namespace cuvil::codegen
