// Code generation for the nn op family: Conv, ConvTranspose and the pooling ops.
//
// Shape inference has canonicalised every windowed op to explicit kernel_shape / strides /
// dilations / pads attributes (ops/shape_nn.cc), so the window itself is known here at compile
// time. Spatial extents may be symbolic expressions (an image's H and W), and so may the pads of
// a SAME-padded window over them (NodeWindowPads): every kernel here reads those at run time, and
// folds them to constants where they are static.
#include <algorithm>
#include <cstddef>

#include "codegen/kernel_context.h"
#include "codegen/lower.h"
#include "cuvil/runtime/ukernel_scratch.h"
#include "cuvil/runtime/ukernels.h"
#include "internal_attrs.h"
#include "llvm/IR/MDBuilder.h"
#include "window_dims.h"

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
    auto* block = new llvm::GlobalVariable(
        k.module(), array_ty, /*isConstant=*/true, llvm::GlobalValue::PrivateLinkage,
        llvm::ConstantArray::get(array_ty, init), k.function()->getName() + name);
    // Equal blocks of identical kernels may be one (ConstantMerge, then MergeFunctions).
    block->setUnnamedAddr(llvm::GlobalValue::UnnamedAddr::Global);
    return block;
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

// As above, with run-time strides and dims.
llvm::Value* Coord(KernelContext& k, llvm::Value* flat, const Idx& strides, const Idx& dims,
                   size_t j) {
  auto& b = k.b();
  return b.CreateURem(b.CreateUDiv(flat, strides[j]), dims[j]);
}

// True (i1) when 0 <= pos < size; one unsigned compare covers both bounds.
llvm::Value* InRange(KernelContext& k, llvm::Value* pos, llvm::Value* size) {
  return k.b().CreateICmpULT(pos, size);
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

// Window geometry over the spatial dims: the window (kernel, strides, dilations) is static; the
// extents and pads may be symbolic, and are then read at run time.
struct Window {
  SymShape in, out;
  Ints kernel, strides, dilations;
  std::vector<WindowPad> pads;
  Idx in_v, out_v;  // the extents as values (constants where static)
  Idx neg_begin;    // -begin pad per dim, as values

  size_t rank() const { return in.size(); }
  // True when every extent and pad is a compile-time constant.
  bool IsStatic() const {
    bool fixed = IsStaticShape(in) && IsStaticShape(out);
    for (const WindowPad& p : pads) fixed = fixed && p.begin.IsStatic() && p.end.IsStatic();
    return fixed;
  }
  // Input coordinate of output coordinate o and kernel tap kk along dim j. ConvTranspose uses the
  // same map with the roles of input and output swapped.
  llvm::Value* InputPos(KernelContext& k, size_t j, llvm::Value* o, llvm::Value* kk) const {
    return Affine(k, o, strides[j], Affine(k, kk, dilations[j], neg_begin[j]));
  }
};

// The values of static dims (IsStatic() shapes only).
Ints StaticDims(const SymShape& dims) {
  Ints out;
  for (const SymDim& d : dims) out.push_back(d.AsConstant().value_or(0));
  return out;
}

// Reads the canonical window of the node (ops/shape_nn.cc) and emits its extents and pads.
absl::StatusOr<Window> ReadWindow(KernelContext& k) {
  const ir::Node& n = k.node();
  Window w{Spatial(k.in_shape(0)),
           Spatial(k.out_shape(0)),
           n.attr_ints("kernel_shape"),
           n.attr_ints("strides"),
           n.attr_ints("dilations"),
           {},
           {},
           {},
           {}};
  auto pads = NodeWindowPads(n, w.in);
  if (!pads.ok()) return pads.status();
  w.pads = *std::move(pads);
  const size_t r = w.rank();
  if (w.out.size() != r || w.kernel.size() != r || w.strides.size() != r ||
      w.dilations.size() != r) {
    return k.Error("window attributes do not match the spatial rank");
  }
  w.in_v = k.Dims(w.in);
  w.out_v = k.Dims(w.out);
  for (const WindowPad& p : w.pads) {
    auto neg = SymSub(SymDim::Const(0), p.begin);
    if (!neg) return k.Error("pad expression is too large");
    w.neg_begin.push_back(k.Dim(*neg));
  }
  return w;
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
  int64_t K, R;    // kernel taps, reduction rows (Cg * K)
  bool pointwise;  // 1x1, stride 1, no padding: B is X
  int64_t U, Rb;   // rows unrolled per pass, rows per im2col block (U | Rb | R)
  // Output positions P = rows * OW (rows: all but the last spatial dim), the input plane, output
  // rows and positions per tile and the tile count: constants when the spatial dims are static,
  // else computed at the kernel's start from the run-time extents.
  llvm::Value *P, *OW, *rows, *in_plane, *tile_rows, *T, *tiles;
  Idx in_strides, outer, outer_strides;  // input strides; output dims but the last, their strides
  int64_t col_bytes_per_position;        // im2col bytes per tile position (Rb * element size)
};

absl::StatusOr<ConvPlan> PlanConv(KernelContext& k) {
  auto& b = k.b();
  ConvPlan c;
  auto w = ReadWindow(k);
  if (!w.ok()) return w.status();
  c.w = *std::move(w);
  c.dt = k.in_dtype(0);
  c.group = k.node().attr_int("group", 1);
  c.C = k.in_shape(0)[1].coef();
  c.M = k.out_shape(0)[1].coef();
  c.Cg = c.C / c.group;
  c.Mg = c.M / c.group;
  c.K = Product(c.w.kernel);
  c.R = c.Cg * c.K;
  auto all = [](const Ints& v, int64_t x) {
    return std::count(v.begin(), v.end(), x) == std::ssize(v);
  };
  bool no_pads = true;
  for (const WindowPad& p : c.w.pads) {
    no_pads = no_pads && p.begin.AsConstant() == 0 && p.end.AsConstant() == 0;
  }
  c.pointwise = all(c.w.kernel, 1) && all(c.w.strides, 1) && no_pads;
  c.U = LargestDivisor(c.R, kUnroll);
  const SymShape outer(c.w.out.begin(), c.w.out.end() - 1);
  c.outer = k.Dims(outer);
  c.outer_strides = k.Strides(outer);
  c.in_strides = k.Strides(c.w.in);
  // Tiles of whole output rows, about kTilePositions positions each.
  int64_t T_plan = kTilePositions;  // the im2col block is sized for this many positions
  if (IsStaticShape(c.w.out) && IsStaticShape(c.w.in)) {
    const Ints out = StaticDims(c.w.out);
    const int64_t P = Product(out), OW = out.back(), rows = P / OW;
    const int64_t tile_rows = std::clamp<int64_t>(kTilePositions / OW, 1, rows);
    T_plan = tile_rows * OW;
    c.P = k.I64(P);
    c.OW = k.I64(OW);
    c.rows = k.I64(rows);
    c.in_plane = k.I64(Product(StaticDims(c.w.in)));
    c.tile_rows = k.I64(tile_rows);
    c.T = k.I64(T_plan);
    c.tiles = k.I64((rows + tile_rows - 1) / tile_rows);
  } else {
    // tile_rows = clamp(kTilePositions / OW, 1, rows), so T <= max(kTilePositions, OW).
    c.OW = c.w.out_v.back();
    c.rows = k.NumElements(outer);
    c.P = b.CreateMul(c.rows, c.OW);
    c.in_plane = k.NumElements(c.w.in);
    llvm::Value* per_row = b.CreateUDiv(
        k.I64(kTilePositions), b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, c.OW, k.I64(1)));
    c.tile_rows = b.CreateBinaryIntrinsic(
        llvm::Intrinsic::smax, b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, per_row, c.rows),
        k.I64(1));
    c.T = b.CreateMul(c.tile_rows, c.OW);
    c.tiles = b.CreateUDiv(b.CreateAdd(c.rows, b.CreateSub(c.tile_rows, k.I64(1))), c.tile_rows);
  }
  int64_t col_rows = std::max<int64_t>(1, kColBytes / (T_plan * DTypeSize(c.dt) * c.U));
  c.Rb = c.pointwise ? c.R : c.U * LargestDivisor(c.R / c.U, col_rows);
  c.col_bytes_per_position = c.Rb * DTypeSize(c.dt);
  return c;
}

// im2col: col[rr][qq*OW + ow] = X at reduction row r0+rr and output position (q0+qq, ow), or 0 in
// the padding. x_group indexes the group's first input plane.
void EmitIm2Col(KernelContext& k, DisjointBuffers& mem, const ConvPlan& c, llvm::Value* col,
                llvm::Value* x_group, llvm::Value* r0, llvm::Value* q0, llvm::Value* tr) {
  auto& b = k.b();
  const Window& w = c.w;
  size_t last = w.rank() - 1;
  Ints k_strides = RowMajorStrides(w.kernel);
  k.For(k.I64(0), k.I64(c.Rb), [&](llvm::Value* rr) {
    llvm::Value* r = b.CreateAdd(r0, rr);
    llvm::Value* tap = b.CreateURem(r, k.I64(c.K));
    llvm::Value* x_plane =
        b.CreateAdd(b.CreateMul(b.CreateUDiv(r, k.I64(c.K)), c.in_plane), x_group);
    Idx kk;
    for (size_t j = 0; j <= last; ++j) kk.push_back(Coord(k, tap, k_strides, w.kernel, j));
    k.For(k.I64(0), tr, [&](llvm::Value* qq) {
      llvm::Value* q = b.CreateAdd(q0, qq);
      llvm::Value* row_inside = b.getTrue();
      llvm::Value* x_row = x_plane;
      for (size_t j = 0; j < last; ++j) {
        llvm::Value* pos = w.InputPos(k, j, Coord(k, q, c.outer_strides, c.outer, j), kk[j]);
        row_inside = b.CreateAnd(row_inside, InRange(k, pos, w.in_v[j]));
        x_row = b.CreateAdd(b.CreateMul(pos, c.in_strides[j]), x_row);
      }
      llvm::Value* col_row = b.CreateAdd(b.CreateMul(rr, c.T), b.CreateMul(qq, c.OW));
      k.For(k.I64(0), c.OW, [&](llvm::Value* ow) {
        llvm::Value* pos = w.InputPos(k, last, ow, kk[last]);
        llvm::Value* inside = b.CreateAnd(row_inside, InRange(k, pos, w.in_v[last]));
        // Padding reads a safe dummy element and selects zero: branch-free, so it vectorises.
        llvm::Value* v =
            mem.Load(c.dt, k.in(0), b.CreateSelect(inside, b.CreateAdd(x_row, pos), k.I64(0)));
        mem.Store(c.dt, col, b.CreateAdd(col_row, ow), b.CreateSelect(inside, v, k.Const(c.dt, 0)));
      });
    });
  });
}

// A Conv prepared by the fusion pass (fuse_conv.cc): one call into the runtime microkernel with
// the geometry as a cuvil_uk_conv_params (constant, or filled at run time where the spatial dims
// or SAME pads are symbolic), the batch and the fused epilogue.
absl::Status EmitConvUkernel(KernelContext& k) {
  const ir::Node& n = k.node();
  auto read = ReadWindow(k);
  if (!read.ok()) return read.status();
  const Window& w = *read;
  if (w.rank() != 2) return k.Error("microkernel Conv must be 2-D");
  const attr::UkernelKind kind = attr::UkernelOf(n);
  cuvil_uk_conv_params p{};
  p.channels = k.in_shape(0)[1].coef();
  p.out_channels = k.out_shape(0)[1].coef();
  p.kernel_h = w.kernel[0];
  p.kernel_w = w.kernel[1];
  p.stride_h = w.strides[0];
  p.stride_w = w.strides[1];
  p.dilation_h = w.dilations[0];
  p.dilation_w = w.dilations[1];
  p.groups = n.attr_int("group", 1);
  p.activation = n.attr_int(attr::kFusedAct, CUVIL_UK_ACT_NONE);
  p.flags = kind == attr::UkernelKind::kDepthwise  ? CUVIL_UK_CONV_DEPTHWISE
            : kind == attr::UkernelKind::kWinograd ? CUVIL_UK_CONV_WINOGRAD
            : kind == attr::UkernelKind::kPackedLiveTaps
                ? CUVIL_UK_CONV_PACKED | CUVIL_UK_CONV_TAP_MAJOR
                : CUVIL_UK_CONV_PACKED;
  static_assert(sizeof(cuvil_uk_conv_params) == 17 * sizeof(int64_t));
  const int64_t* fields = &p.channels;
  std::vector<SymDim> dims;
  for (int i = 0; i < 17; ++i) dims.push_back(SymDim::Const(fields[i]));
  // height, width, out_height, out_width, pad_top, pad_left: run-time values where symbolic.
  const size_t height = offsetof(cuvil_uk_conv_params, height) / sizeof(int64_t);
  const size_t out_height = offsetof(cuvil_uk_conv_params, out_height) / sizeof(int64_t);
  const size_t pad_top = offsetof(cuvil_uk_conv_params, pad_top) / sizeof(int64_t);
  const size_t pad_left = offsetof(cuvil_uk_conv_params, pad_left) / sizeof(int64_t);
  dims[height] = w.in[0];
  dims[height + 1] = w.in[1];
  dims[out_height] = w.out[0];
  dims[out_height + 1] = w.out[1];
  dims[pad_top] = w.pads[0].begin;
  dims[pad_left] = w.pads[1].begin;
  llvm::Value* params = ParamsBlock(k, k.Dims(dims), ".conv_params");
  // The same words, then the batch: what sizes the call's scratch.
  dims.push_back(k.in_shape(0)[0]);
  k.NoteScratch(n.has_attr(attr::kQXScale) ? CUVIL_SCRATCH_QDEPTHWISE2D : CUVIL_SCRATCH_CONV2D,
                std::move(dims));
  llvm::Value* null = llvm::ConstantPointerNull::get(k.b().getPtrTy());
  auto in_or_null = [&](size_t i) { return k.has_input(i) ? k.in(i) : null; };
  if (n.has_attr(attr::kQXScale)) {  // Depthwise between 8-bit tensors (fuse_qdq.h).
    auto i32 = [&](const char* name) {
      return k.b().getInt32(static_cast<uint32_t>(n.attr_int(name, 0)));
    };
    k.CallAbi(abi::Fn::cuvil_uk_qdepthwise2d,
              {params, k.in(0), i32(attr::kQXSigned), k.F32(n.attr_float(attr::kQXScale, 1.0f)),
               i32(attr::kQXZero), k.in(1), in_or_null(2), k.out(0), i32(attr::kQYSigned),
               k.F32(n.attr_float(attr::kQYScale, 1.0f)), i32(attr::kQYZero),
               k.Dim(k.in_shape(0)[0]), k.F32(n.attr_float(attr::kFusedAlpha, 0.0f)),
               k.F32(n.attr_float(attr::kFusedBeta, 0.0f))});
    return absl::OkStatus();
  }
  k.CallAbi(
      abi::Fn::cuvil_uk_conv2d,
      {params, k.in(0), k.in(1), in_or_null(2), in_or_null(3), k.out(0), k.Dim(k.in_shape(0)[0]),
       k.F32(n.attr_float(attr::kFusedAlpha, 0.0f)), k.F32(n.attr_float(attr::kFusedBeta, 0.0f))});
  return absl::OkStatus();
}

// Any other Conv (1-D, 3-D, other float types, no microkernel), over static or symbolic spatial
// dims: per tile of output rows, im2col then a vectorised multiply-add pass per reduction chunk.
absl::Status EmitConv(KernelContext& k) {
  if (k.node().has_attr(attr::kUkernel)) return EmitConvUkernel(k);
  auto& b = k.b();
  auto plan = PlanConv(k);
  if (!plan.ok()) return plan.status();
  const ConvPlan& c = *plan;
  DType dt = c.dt;
  llvm::Value* col = nullptr;
  if (!c.pointwise) {
    // T * Rb elements; T <= max(kTilePositions, OW) bounds it for every binding.
    llvm::Value* bytes = b.CreateMul(c.T, k.I64(c.col_bytes_per_position));
    std::vector<SymDim> bound;
    if (auto* fixed = llvm::dyn_cast<llvm::ConstantInt>(c.T)) {
      bound.push_back(SymDim::Const(fixed->getSExtValue() * c.col_bytes_per_position));
    } else {
      bound.push_back(SymDim::Const(kTilePositions * c.col_bytes_per_position));
      bound.push_back(SymMul(c.w.out.back(), SymDim::Const(c.col_bytes_per_position)));
    }
    col = k.AllocHeap(bytes, std::move(bound));
  }
  DisjointBuffers mem(k, {k.out(0), k.in(0), k.in(1), col});
  k.For(k.I64(0), k.Dim(k.in_shape(0)[0]), [&](llvm::Value* n) {
    k.For(k.I64(0), k.I64(c.group), [&](llvm::Value* g) {
      llvm::Value* x_group =
          b.CreateMul(Affine(k, n, c.C, b.CreateMul(g, k.I64(c.Cg))), c.in_plane);
      k.For(k.I64(0), c.tiles, [&](llvm::Value* tile) {
        llvm::Value* q0 = b.CreateMul(tile, c.tile_rows);
        llvm::Value* tr =
            b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, c.tile_rows, b.CreateSub(c.rows, q0));
        llvm::Value* p0 = b.CreateMul(q0, c.OW);
        llvm::Value* pt = b.CreateMul(tr, c.OW);
        // Output channel m of this group, and the index of its tile's first y element.
        auto channel = [&](llvm::Value* mm) { return Affine(k, g, c.Mg, mm); };
        auto y_tile = [&](llvm::Value* mm) {
          return b.CreateAdd(b.CreateMul(Affine(k, n, c.M, channel(mm)), c.P), p0);
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
                llvm::Value* x_row =
                    b.CreateAdd(b.CreateMul(b.CreateAdd(r0, rr), c.P), b.CreateAdd(x_group, p0));
                llvm::Value* buffer = c.pointwise ? k.in(0) : col;
                src.push_back(c.pointwise ? k.ElemPtr(dt, k.in(0), x_row)
                                          : k.ElemPtr(dt, col, b.CreateMul(rr, c.T)));
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
  auto read = ReadWindow(k);
  if (!read.ok()) return read.status();
  const Window& w = *read;
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
// Extents and pads may be symbolic (read at run time); so may the output's ceil_mode overhang.
absl::Status EmitPool(KernelContext& k, bool is_max) {
  DType dt = k.in_dtype(0);
  if (!is_max && !IsFloat(dt)) return k.Unsupported("AveragePool on integer tensors");
  auto& b = k.b();
  auto read = ReadWindow(k);
  if (!read.ok()) return read.status();
  const Window& w = *read;
  size_t r = w.rank();
  bool include_pad = !is_max && k.node().attr_int("count_include_pad", 0) != 0;
  bool want_indices = is_max && k.has_output(1);
  // Float32 2-D max pooling without Indices: the runtime kernel (vectorised rows, no per-tap
  // bounds check inside the input, planes split over the intra-op threads).
  if (is_max && !want_indices && dt == DType::kFloat32 && r == 2) {
    static_assert(sizeof(cuvil_uk_pool_params) == 12 * sizeof(int64_t));
    std::vector<SymDim> dims = {w.in[0], w.in[1], w.out[0], w.out[1]};
    for (int64_t v :
         {w.kernel[0], w.kernel[1], w.strides[0], w.strides[1], w.dilations[0], w.dilations[1]}) {
      dims.push_back(SymDim::Const(v));
    }
    dims.push_back(w.pads[0].begin);
    dims.push_back(w.pads[1].begin);
    llvm::Value* params = ParamsBlock(k, k.Dims(dims), ".pool_params");
    llvm::Value* planes = b.CreateMul(k.Dim(k.in_shape(0)[0]), k.Dim(k.in_shape(0)[1]));
    // The same words, then the planes: what sizes the call's scratch.
    dims.push_back(SymMul(k.in_shape(0)[0], k.in_shape(0)[1]));
    k.NoteScratch(CUVIL_SCRATCH_MAXPOOL2D, std::move(dims));
    k.CallAbi(abi::Fn::cuvil_uk_maxpool2d, {params, k.in(0), k.out(0), planes});
    return absl::OkStatus();
  }
  // Extents, strides and planes as values (constants when static, so the IR folds as before).
  const Idx in_strides = k.Strides(w.in), out_strides = k.Strides(w.out);
  llvm::Value* in_plane = k.NumElements(w.in);
  llvm::Value* out_plane = k.NumElements(w.out);
  // Indices are flat offsets into X; storage_order 1 means column-major spatial dims.
  Idx idx_strides = in_strides;
  if (k.node().attr_int("storage_order", 0) != 0) {
    idx_strides = k.Strides(SymShape(w.in.rbegin(), w.in.rend()));
    std::reverse(idx_strides.begin(), idx_strides.end());
  }
  llvm::Value* acc = k.Scratch(k.ElemType(dt));
  llvm::Value* count = k.Scratch(k.I64Ty());
  llvm::Value* argmax = k.Scratch(k.I64Ty());
  llvm::Value* planes = b.CreateMul(k.Dim(k.in_shape(0)[0]), k.Dim(k.in_shape(0)[1]));

  // Max pooling whose every window lies inside the input (no padding, no overhang) and has at
  // most 64 taps: no bounds check or control flow per tap, so the output loop vectorises.
  bool all_inside = is_max && !want_indices && Product(w.kernel) <= 64 && w.IsStatic();
  const Ints in_s = StaticDims(w.in), out_s = StaticDims(w.out);
  for (size_t j = 0; j < r && all_inside; ++j) {
    all_inside = w.pads[j].begin.AsConstant() == 0 && w.pads[j].end.AsConstant() == 0 &&
                 (out_s[j] - 1) * w.strides[j] + (w.kernel[j] - 1) * w.dilations[j] < in_s[j];
  }
  if (all_inside) {
    const Ints static_in_strides = RowMajorStrides(in_s),
               static_out_strides = RowMajorStrides(out_s);
    const int64_t static_in_plane = Product(in_s), static_out_plane = Product(out_s);
    // Float32 rows are taken up to a target vector of outputs at a time: per tap, one load of the
    // input span the lanes read, de-interleaved by the stride with a shuffle.
    const size_t last = r - 1;
    const int64_t stride = w.strides[last];
    const int64_t lanes = dt == DType::kFloat32 && stride <= 4 ? TargetVectorBits() / 32 : 0;
    Ints outer_out(out_s.begin(), out_s.begin() + static_cast<std::ptrdiff_t>(last));
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
        llvm::Value* at = Linear(k, x_plane, pos, static_in_strides);
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
      llvm::Value* x_plane = b.CreateMul(p, k.I64(static_in_plane));
      llvm::Value* y_plane = b.CreateMul(p, k.I64(static_out_plane));
      k.ForNest(Consts(k, outer_out), [&](const Idx& outer) {
        auto emit = [&](llvm::Value* x, int64_t width) {
          Idx o = outer;
          o.push_back(x);
          llvm::Value* m = window_max(x_plane, o, width);
          llvm::Value* y = k.ElemPtr(dt, k.out(0), Linear(k, y_plane, o, static_out_strides));
          b.CreateAlignedStore(m, y, llvm::Align(4));
        };
        // Full vectors, then halves down to 4 lanes (a 12-wide row is 8 + 4), then scalars.
        int64_t x0 = 0;
        for (int64_t width = lanes; width >= 4; width /= 2) {
          int64_t n = (out_s[last] - x0) / width;
          if (n == 0) continue;
          k.For(k.I64(0), k.I64(n), [&](llvm::Value* c) {
            emit(b.CreateAdd(k.I64(x0), b.CreateMul(c, k.I64(width))), width);
          });
          x0 += n * width;
        }
        k.For(k.I64(x0), k.I64(out_s[last]), [&](llvm::Value* x) { emit(x, 1); });
      });
    });
    return absl::OkStatus();
  }

  // count_include_pad counts the taps inside [-begin, in + end) (not a ceil_mode overhang past
  // the end pad), as ONNX Runtime does.
  Idx begin_v, padded_v;
  for (size_t j = 0; j < r && include_pad; ++j) {
    auto with_begin = SymAdd(w.in[j], w.pads[j].begin);
    auto padded = with_begin ? SymAdd(*with_begin, w.pads[j].end) : std::nullopt;
    if (!padded) return k.Error("padded extent is too large an expression");
    begin_v.push_back(k.Dim(w.pads[j].begin));
    padded_v.push_back(k.Dim(*padded));
  }
  // One output with every tap bounds-checked: the edges, and every output with Indices.
  auto checked = [&](llvm::Value* x_plane, llvm::Value* y_plane, const Idx& o) {
    b.CreateStore(is_max ? k.Lowest(dt) : k.Const(dt, 0), acc);
    b.CreateStore(k.I64(0), count);
    b.CreateStore(x_plane, argmax);
    k.ForNest(Consts(k, w.kernel), [&](const Idx& kk) {
      llvm::Value* inside = b.getTrue();
      llvm::Value* padded = b.getTrue();  // inside the input or its explicit padding
      Idx pos;
      for (size_t j = 0; j < r; ++j) {
        pos.push_back(w.InputPos(k, j, o[j], kk[j]));
        inside = b.CreateAnd(inside, InRange(k, pos[j], w.in_v[j]));
        if (include_pad) {
          padded = b.CreateAnd(padded, InRange(k, b.CreateAdd(pos[j], begin_v[j]), padded_v[j]));
        }
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
  };
  // One output whose whole window lies inside the input: the taps unrolled without checks and
  // the count known, so the loop over the last output dim vectorises. The taps are summed in the
  // same order as `checked` sums them, so both give the same bits.
  const int64_t taps = Product(w.kernel);
  auto unchecked = [&](llvm::Value* x_plane, llvm::Value* y_plane, const Idx& o) {
    llvm::Value* base = x_plane;
    for (size_t j = 0; j < r; ++j) {
      llvm::Value* start = Affine(k, o[j], w.strides[j], w.neg_begin[j]);
      base = b.CreateAdd(b.CreateMul(start, in_strides[j]), base);
    }
    llvm::Value* m = is_max ? k.Lowest(dt) : k.Const(dt, 0);
    Ints tap(r, 0);
    for (bool more = true; more;) {
      llvm::Value* at = base;
      for (size_t j = 0; j < r; ++j) {
        at = b.CreateAdd(b.CreateMul(k.I64(tap[j] * w.dilations[j]), in_strides[j]), at);
      }
      llvm::Value* v = k.Load(dt, k.in(0), at);
      m = is_max ? k.Max(dt, m, v) : k.Add(dt, m, v);
      more = false;
      for (size_t j = r; j-- > 0;) {
        if (++tap[j] < w.kernel[j]) {
          more = true;
          break;
        }
        tap[j] = 0;
      }
    }
    if (!is_max) m = k.Div(dt, m, k.Const(dt, static_cast<double>(taps)));
    k.Store(dt, k.out(0), Linear(k, y_plane, o, out_strides), m);
  };
  // Outputs along the last dim whose windows lie inside the input there: [x_lo, x_hi), from
  // ox * stride - begin >= 0 and ox * stride - begin + extent <= in (the same for every row).
  const bool split = !want_indices && taps <= 64;
  const size_t last = r - 1;
  llvm::Value *x_lo = nullptr, *x_hi = nullptr;
  if (split) {
    const int64_t s = w.strides[last];
    const int64_t extent = (w.kernel[last] - 1) * w.dilations[last] + 1;
    llvm::Value* begin = k.Dim(w.pads[last].begin);  // pool pads are >= 0
    llvm::Value* out_last = w.out_v[last];
    x_lo = b.CreateBinaryIntrinsic(
        llvm::Intrinsic::smin, b.CreateUDiv(b.CreateAdd(begin, k.I64(s - 1)), k.I64(s)), out_last);
    llvm::Value* reach = b.CreateSub(b.CreateAdd(w.in_v[last], begin), k.I64(extent));
    llvm::Value* hi = b.CreateSelect(b.CreateICmpSLT(reach, k.I64(0)), k.I64(0),
                                     b.CreateAdd(b.CreateSDiv(reach, k.I64(s)), k.I64(1)));
    hi = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, hi, out_last);
    x_hi = b.CreateBinaryIntrinsic(llvm::Intrinsic::smax, hi, x_lo);
  }
  k.For(k.I64(0), planes, [&](llvm::Value* p) {
    llvm::Value* x_plane = b.CreateMul(p, in_plane);
    llvm::Value* y_plane = b.CreateMul(p, out_plane);
    if (!split) {
      k.ForNest(w.out_v, [&](const Idx& o) { checked(x_plane, y_plane, o); });
      return;
    }
    const Idx outer_out(w.out_v.begin(), w.out_v.end() - 1);
    k.ForNest(outer_out, [&](const Idx& outer) {
      // The window's rows (all dims but the last) inside the input, or no interior at all.
      llvm::Value* rows_inside = b.getTrue();
      for (size_t j = 0; j < last; ++j) {
        llvm::Value* start = Affine(k, outer[j], w.strides[j], w.neg_begin[j]);
        llvm::Value* extent = k.I64((w.kernel[j] - 1) * w.dilations[j] + 1);
        rows_inside = b.CreateAnd(rows_inside, b.CreateICmpSGE(start, k.I64(0)));
        rows_inside =
            b.CreateAnd(rows_inside, b.CreateICmpSLE(b.CreateAdd(start, extent), w.in_v[j]));
      }
      llvm::Value* row_hi = b.CreateSelect(rows_inside, x_hi, x_lo);
      auto at = [&](llvm::Value* ox) {
        Idx o = outer;
        o.push_back(ox);
        return o;
      };
      k.For(k.I64(0), x_lo, [&](llvm::Value* ox) { checked(x_plane, y_plane, at(ox)); });
      k.For(x_lo, row_hi, [&](llvm::Value* ox) { unchecked(x_plane, y_plane, at(ox)); });
      k.For(row_hi, w.out_v[last], [&](llvm::Value* ox) { checked(x_plane, y_plane, at(ox)); });
    });
  });
  return absl::OkStatus();
}

// GlobalAveragePool / GlobalMaxPool: one contiguous reduction per (n, c) plane, planes split among
// the execution's threads. The average's sum may be reassociated, so it runs in vector lanes.
absl::Status EmitGlobalPool(KernelContext& k, bool is_max) {
  DType dt = k.in_dtype(0);
  if (!is_max && !IsFloat(dt)) return k.Unsupported("GlobalAveragePool on integer tensors");
  auto& b = k.b();
  const SymShape& shape = k.in_shape(0);
  llvm::Value* planes = b.CreateMul(k.Dim(shape[0]), k.Dim(shape[1]));
  llvm::Value* plane_size = k.NumElements(SymShape(shape.begin() + 2, shape.end()));
  k.ParallelFor(planes, plane_size, {plane_size},
                [dt, is_max](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
                  auto& ob = o.b();
                  llvm::Value* size = v[0];
                  ScalarVar acc(o, is_max ? o.Lowest(dt) : o.Const(dt, 0));
                  o.For(begin, end, [&](llvm::Value* p) {
                    llvm::Value* x_plane = ob.CreateMul(p, size);
                    acc.set(is_max ? o.Lowest(dt) : o.Const(dt, 0));
                    o.For(o.I64(0), size, [&](llvm::Value* i) {
                      llvm::Value* x = o.Load(dt, o.in(0), ob.CreateAdd(x_plane, i));
                      acc.set(is_max ? o.Max(dt, acc.get(), x) : ReassocAdd(o, acc.get(), x));
                    });
                    llvm::Value* result = acc.get();
                    if (!is_max) result = o.Div(dt, result, o.Convert(size, DType::kInt64, dt));
                    o.Store(dt, o.out(0), p, result);
                  });
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
