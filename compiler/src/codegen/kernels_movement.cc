// Code generation for data movement ops. Most of them are one strided copy: the output is written
// contiguously while the source walks a (permuted, broadcast, sliced or tiled) stride pattern, and
// rows whose source is contiguous too are copied with memcpy.
#include <algorithm>
#include <cmath>
#include <functional>

#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

bool IsConstant(llvm::Value* v, int64_t c) {
  auto* ci = llvm::dyn_cast<llvm::ConstantInt>(v);
  return ci != nullptr && ci->getSExtValue() == c;
}

// Row-major strides of runtime extents.
Idx ContiguousStrides(KernelContext& k, const Idx& extents) {
  Idx strides(extents.size());
  llvm::Value* s = k.I64(1);
  for (size_t i = extents.size(); i-- > 0;) {
    strides[i] = s;
    s = k.b().CreateMul(s, extents[i]);
  }
  return strides;
}

llvm::Value* Clamp(KernelContext& k, llvm::Value* v, llvm::Value* lo, llvm::Value* hi) {
  return k.Max(DType::kInt64, lo, k.Min(DType::kInt64, v, hi));
}

// Wraps a negative index and clamps to [0, len) so bad indices stay memory-safe.
llvm::Value* NormalizeIndex(KernelContext& k, llvm::Value* idx, llvm::Value* len) {
  auto& b = k.b();
  idx = b.CreateSelect(b.CreateICmpSLT(idx, k.I64(0)), b.CreateAdd(idx, len), idx);
  return Clamp(k, idx, k.I64(0), b.CreateSub(len, k.I64(1)));
}

// dst[contiguous over extents] = src[base + sum(idx * src_strides)].
void StridedCopy(KernelContext& k, DType d, llvm::Value* dst, llvm::Value* src, llvm::Value* base,
                 const Idx& extents, const Idx& src_strides) {
  size_t r = extents.size();
  Idx dst_strides = ContiguousStrides(k, extents);
  if (r > 0 && IsConstant(src_strides[r - 1], 1)) {
    // Contiguous source rows: one memcpy per row of the innermost extent.
    Idx outer(extents.begin(), extents.end() - 1);
    Idx from_strides(src_strides.begin(), src_strides.end() - 1);
    Idx to_strides(dst_strides.begin(), dst_strides.end() - 1);
    k.ForNest(outer, [&](const Idx& idx) {
      llvm::Value* from = k.b().CreateAdd(base, k.Offset(idx, from_strides));
      k.Memcpy(k.ElemPtr(d, dst, k.Offset(idx, to_strides)), k.ElemPtr(d, src, from),
               extents[r - 1], d);
    });
    return;
  }
  size_t unit = r;  // An axis the source walks contiguously, if any (a transpose).
  for (size_t a = 0; a + 1 < r; ++a) {
    if (IsConstant(src_strides[a], 1)) unit = a;
  }
  if (unit < r) {
    // Transpose: reading along the output's last axis alone strides the source by a whole row
    // per element (often a multiple of 4 KiB, which also aliases in L1). Square tiles of the two
    // axes instead use each source cache line fully while the destination rows stay in L1.
    constexpr int64_t kTile = 16;
    auto& b = k.b();
    llvm::Value* e_unit = extents[unit];
    llvm::Value* e_last = extents[r - 1];
    Idx outer;
    for (size_t a = 0; a + 1 < r; ++a) {
      if (a != unit) outer.push_back(extents[a]);
    }
    auto tiles = [&](llvm::Value* e) {
      return b.CreateUDiv(b.CreateAdd(e, k.I64(kTile - 1)), k.I64(kTile));
    };
    k.ForNest(outer, [&](const Idx& outer_idx) {
      k.For(k.I64(0), tiles(e_unit), [&](llvm::Value* tu) {
        k.For(k.I64(0), tiles(e_last), [&](llvm::Value* tl) {
          llvm::Value* u0 = b.CreateMul(tu, k.I64(kTile));
          llvm::Value* l0 = b.CreateMul(tl, k.I64(kTile));
          llvm::Value* u1 = k.Min(DType::kInt64, b.CreateAdd(u0, k.I64(kTile)), e_unit);
          llvm::Value* l1 = k.Min(DType::kInt64, b.CreateAdd(l0, k.I64(kTile)), e_last);
          k.For(u0, u1, [&](llvm::Value* u) {
            k.For(l0, l1, [&](llvm::Value* l) {
              Idx idx;
              for (size_t a = 0, o = 0; a < r; ++a) {
                idx.push_back(a == unit ? u : a == r - 1 ? l : outer_idx[o++]);
              }
              llvm::Value* v = k.Load(d, src, b.CreateAdd(base, k.Offset(idx, src_strides)));
              k.Store(d, dst, k.Offset(idx, dst_strides), v);
            });
          });
        });
      });
    });
    return;
  }
  k.ForNest(extents, [&](const Idx& idx) {
    llvm::Value* v = k.Load(d, src, k.b().CreateAdd(base, k.Offset(idx, src_strides)));
    k.Store(d, dst, k.Offset(idx, dst_strides), v);
  });
}

// Writes `src` viewed as `shape`, transposed by `perm`, to `dst`. Unit axes are dropped and axes
// that stay adjacent are merged first, so e.g. [b,128,4,64] -> [b,4,128,64] copies 64-wide rows.
void EmitPermute(KernelContext& k, DType d, llvm::Value* src, const SymShape& shape,
                 const std::vector<int64_t>& perm, llvm::Value* dst) {
  // Drop unit axes.
  std::vector<int> renumber(shape.size(), -1);
  SymShape dims;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] == SymDim::Const(1)) continue;
    renumber[a] = static_cast<int>(dims.size());
    dims.push_back(shape[a]);
  }
  std::vector<int> p;
  for (int64_t a : perm) {
    if (renumber[a] >= 0) p.push_back(renumber[a]);
  }
  // Merge runs of output axes that are consecutive input axes.
  std::vector<std::pair<int, int>> groups;  // Input axis ranges [first, last], in output order.
  for (int a : p) {
    if (!groups.empty() && groups.back().second + 1 == a) {
      groups.back().second = a;
    } else {
      groups.push_back({a, a});
    }
  }
  std::vector<int> by_input(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) by_input[g] = static_cast<int>(g);
  std::sort(by_input.begin(), by_input.end(),
            [&](int x, int y) { return groups[x].first < groups[y].first; });
  SymShape merged(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    merged[g] = SymNumElements(SymShape(dims.begin() + groups[by_input[g]].first,
                                        dims.begin() + groups[by_input[g]].second + 1));
  }
  Idx in_strides = k.Strides(merged), extents, strides;
  for (size_t g = 0; g < groups.size(); ++g) {
    size_t pos =
        std::find(by_input.begin(), by_input.end(), static_cast<int>(g)) - by_input.begin();
    extents.push_back(k.Dim(merged[pos]));
    strides.push_back(in_strides[pos]);
  }
  StridedCopy(k, d, dst, src, k.I64(0), extents, strides);
}

absl::Status Transpose(KernelContext& k) {
  EmitPermute(k, k.in_dtype(0), k.in(0), k.in_shape(0), k.node().attr_ints("perm"), k.out(0));
  return absl::OkStatus();
}

// Concat and Split: per outer index, each part is one contiguous run of the whole.
// Elements a Concat or Split moves per unit of parallel cost: the elementwise kernels' unit, so
// that both split a tensor at the same points and each thread reads back the half it wrote.
constexpr int64_t kCopyCost = 1;

absl::Status ConcatOrSplit(KernelContext& k) {
  const bool concat = k.node().op_type == "Concat";
  const SymShape& whole = concat ? k.out_shape(0) : k.in_shape(0);
  const size_t axis = static_cast<size_t>(k.node().attr_int("axis", 0));
  const DType d = k.in_dtype(0);
  llvm::Value* outer = k.NumElements(SymShape(whole.begin(), whole.begin() + axis));
  llvm::Value* whole_row = k.NumElements(SymShape(whole.begin() + axis, whole.end()));
  const size_t parts = concat ? k.num_inputs() : k.num_outputs();
  // Captured: the whole row, then each part's row (its elements from the axis on).
  std::vector<llvm::Value*> captures{whole_row};
  for (size_t i = 0; i < parts; ++i) {
    const SymShape& part = concat ? k.in_shape(i) : k.out_shape(i);
    captures.push_back(k.NumElements(SymShape(part.begin() + axis, part.end())));
  }
  // Moves the whole tensor's flat elements [begin, end): for each outer index the range covers,
  // the stretch of each part that falls inside it, one memcpy each (no unrolling: a Concat of 25
  // inputs, densenet's blocks, would multiply the code by 25).
  auto move = [&, concat, parts, d](KernelContext& o, const Idx& v, llvm::Value* begin,
                                    llvm::Value* end) {
    auto& b = o.b();
    llvm::Value* row = v[0];
    auto max = [&](llvm::Value* x, llvm::Value* y) {
      return b.CreateSelect(b.CreateICmpSGT(x, y), x, y);
    };
    auto min = [&](llvm::Value* x, llvm::Value* y) {
      return b.CreateSelect(b.CreateICmpSLT(x, y), x, y);
    };
    // An empty row (a zero dim after the axis) moves nothing; dividing by 1 keeps the loop empty.
    llvm::Value* divisor = max(row, o.I64(1));
    llvm::Value* first = b.CreateUDiv(begin, divisor);
    llvm::Value* last = b.CreateUDiv(b.CreateAdd(end, b.CreateSub(divisor, o.I64(1))), divisor);
    llvm::Value* whole_ptr = concat ? o.out(0) : o.in(0);
    o.ForNoUnroll(first, last, [&](llvm::Value* at) {
      llvm::Value* row_start = b.CreateMul(at, row);
      llvm::Value* lo = max(b.CreateSub(begin, row_start), o.I64(0));
      llvm::Value* hi = min(b.CreateSub(end, row_start), row);
      llvm::Value* offset = o.I64(0);
      for (size_t i = 0; i < parts; ++i) {
        llvm::Value* part_row = v[i + 1];
        llvm::Value* part_ptr = concat ? o.in(i) : o.out(i);
        llvm::Value* part_lo = max(lo, offset);
        llvm::Value* part_hi = min(hi, b.CreateAdd(offset, part_row));
        if (part_ptr != nullptr) {
          o.If(b.CreateICmpSLT(part_lo, part_hi), [&] {
            llvm::Value* w = o.ElemPtr(d, whole_ptr, b.CreateAdd(row_start, part_lo));
            llvm::Value* p = o.ElemPtr(
                d, part_ptr, b.CreateAdd(b.CreateMul(at, part_row), b.CreateSub(part_lo, offset)));
            llvm::Value* n = b.CreateSub(part_hi, part_lo);
            if (concat) {
              o.Memcpy(w, p, n, d);
            } else {
              o.Memcpy(p, w, n, d);
            }
          });
        }
        offset = b.CreateAdd(offset, part_row);
      }
    });
  };
  llvm::Value* total = k.b().CreateMul(outer, whole_row);
  // Split into contiguous ranges (one per thread) like the elementwise kernels around it, so that
  // a threaded kernel after it mostly reads what its own thread wrote. Strings stay on this
  // thread (their heap is not the body's to reach).
  if (d == DType::kString) {
    move(k, captures, k.I64(0), total);
  } else {
    k.ParallelFor(total, k.I64(kCopyCost), captures, move);
  }
  return absl::OkStatus();
}

absl::Status Slice(KernelContext& k) {
  const SymShape& in = k.in_shape(0);
  const SymShape& out = k.out_shape(0);
  std::vector<int64_t> starts = k.node().attr_ints("starts"),
                       steps = k.node().attr_ints(attr::kSteps);
  if (starts.size() != in.size() || steps.size() != in.size())
    return k.Error("slice is not canonical");
  auto& b = k.b();
  Idx start_v;
  for (int64_t s : starts) start_v.push_back(k.I64(s));
  // Symbolic starts (provably non-negative) come from the starts input: (index, axis) pairs.
  std::vector<int64_t> start_inputs = k.node().attr_ints(attr::kStartInputs);
  if (start_inputs.size() % 2 != 0) return k.Error("slice is not canonical");
  for (size_t p = 0; p < start_inputs.size(); p += 2) {
    const int64_t j = start_inputs[p], a = start_inputs[p + 1];
    if (a < 0 || a >= static_cast<int64_t>(in.size()) || k.node().inputs.size() < 2) {
      return k.Error("slice is not canonical");
    }
    start_v[a] = k.Convert(k.Load(k.in_dtype(1), k.in(1), k.I64(j)), k.in_dtype(1), DType::kInt64);
  }
  Idx in_strides = k.Strides(in), strides;
  llvm::Value* base = k.I64(0);
  for (size_t a = 0; a < in.size(); ++a) {
    base = b.CreateAdd(base, b.CreateMul(start_v[a], in_strides[a]));
    strides.push_back(b.CreateMul(k.I64(steps[a]), in_strides[a]));
  }
  // Axes whose bounds depend on the batch (step 1) were trusted at compile time; check here that
  // start + extent stays within the input at this batch size, and copy nothing otherwise.
  llvm::Value* inside = b.getTrue();
  for (int64_t a : k.node().attr_ints(attr::kCheckedAxes)) {
    if (a < 0 || a >= static_cast<int64_t>(in.size())) return k.Error("slice is not canonical");
    llvm::Value* end = b.CreateAdd(start_v[a], k.Dim(out[a]));
    inside = b.CreateAnd(inside, b.CreateAnd(b.CreateICmpSLE(end, k.Dim(in[a])),
                                             b.CreateICmpSGE(start_v[a], k.I64(0))));
  }
  k.FailIf(b.CreateNot(inside), kEntrySliceOutOfBounds);
  k.If(inside,
       [&] { StridedCopy(k, k.in_dtype(0), k.out(0), k.in(0), base, k.Dims(out), strides); });
  return absl::OkStatus();
}

absl::Status Gather(KernelContext& k) {
  const SymShape& data = k.in_shape(0);
  size_t axis = static_cast<size_t>(k.node().attr_int("axis", 0));
  DType d = k.in_dtype(0);
  auto& b = k.b();
  llvm::Value* outer = k.NumElements(SymShape(data.begin(), data.begin() + axis));
  llvm::Value* len = k.Dim(data[axis]);
  llvm::Value* inner = k.NumElements(SymShape(data.begin() + axis + 1, data.end()));
  llvm::Value* n = k.NumElements(k.in_shape(1));
  k.For(k.I64(0), outer, [&](llvm::Value* o) {
    k.For(k.I64(0), n, [&](llvm::Value* j) {
      llvm::Value* raw = LoadIndex(k, 1, j);
      // Out-of-range indices fail the execution (like ONNX Runtime) and copy nothing: with
      // len == 0 even a clamped index would read past the buffer.
      llvm::Value* valid = IndexInRange(k, raw, len);
      k.FailIf(b.CreateNot(valid), kEntryIndexOutOfBounds);
      k.If(valid, [&] {
        llvm::Value* idx = NormalizeIndex(k, raw, len);
        llvm::Value* dst = b.CreateMul(b.CreateAdd(b.CreateMul(o, n), j), inner);
        llvm::Value* src = b.CreateMul(b.CreateAdd(b.CreateMul(o, len), idx), inner);
        k.Memcpy(k.ElemPtr(d, k.out(0), dst), k.ElemPtr(d, k.in(0), src), inner, d);
      });
    });
  });
  return absl::OkStatus();
}

// Output axis a of Tile splits into (repeat, input index): the loop nest [r0, d0, r1, d1, ...]
// visits the output in row-major order, reading the input with stride 0 over repeats.
absl::Status Tile(KernelContext& k) {
  std::vector<int64_t> repeats = k.node().attr_ints("repeats");
  Idx in_strides = k.Strides(k.in_shape(0)), extents, strides;
  auto& b = k.b();
  for (size_t a = 0; a < repeats.size(); ++a) {
    if (repeats[a] < 0) {  // Symbolic: output / input extent (0 for an empty input).
      llvm::Value* in = k.Dim(k.in_shape(0)[a]);
      llvm::Value* divisor = b.CreateSelect(b.CreateICmpEQ(in, k.I64(0)), k.I64(1), in);
      extents.push_back(b.CreateSDiv(k.Dim(k.out_shape(0)[a]), divisor));
      strides.push_back(k.I64(0));
    } else if (repeats[a] != 1) {
      extents.push_back(k.I64(repeats[a]));
      strides.push_back(k.I64(0));
    }
    extents.push_back(k.Dim(k.in_shape(0)[a]));
    strides.push_back(in_strides[a]);
  }
  StridedCopy(k, k.in_dtype(0), k.out(0), k.in(0), k.I64(0), extents, strides);
  return absl::OkStatus();
}

absl::Status Expand(KernelContext& k) {
  const SymShape& out = k.out_shape(0);
  StridedCopy(k, k.in_dtype(0), k.out(0), k.in(0), k.I64(0), k.Dims(out),
              k.BroadcastStrides(k.in_shape(0), out));
  return absl::OkStatus();
}

// Constant-mode Pad whose pads (input 1, over attribute "pad_axes") follow from the input
// shapes and are read at run time; the output shape already holds their values.
absl::Status SymbolicPad(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& in = k.in_shape(0);
  const size_t rank = in.size();
  std::vector<int64_t> axes = k.node().attr_ints(attr::kPadAxes);
  auto& b = k.b();
  Idx begin(rank, k.I64(0));
  for (size_t j = 0; j < axes.size(); ++j) {
    begin[axes[j]] = k.Convert(k.Load(k.in_dtype(1), k.in(1), k.I64(static_cast<int64_t>(j))),
                               k.in_dtype(1), DType::kInt64);
  }
  Idx in_dims = k.Dims(in), in_strides = k.Strides(in);
  Idx out_strides = k.Strides(k.out_shape(0));
  llvm::Value* fill = k.Const(d, k.node().attr_float("value", 0));
  llvm::Value* nonempty = b.CreateICmpSGT(k.NumElements(in), k.I64(0));
  k.ForNest(k.Dims(k.out_shape(0)), [&](const Idx& idx) {
    llvm::Value* offset = k.I64(0);
    llvm::Value* inside = nonempty;
    for (size_t a = 0; a < rank; ++a) {
      llvm::Value* s = b.CreateSub(idx[a], begin[a]);
      inside = b.CreateAnd(
          inside, b.CreateAnd(b.CreateICmpSGE(s, k.I64(0)), b.CreateICmpSLT(s, in_dims[a])));
      offset = b.CreateAdd(offset, b.CreateMul(s, in_strides[a]));
    }
    // Outside the input (or for an empty one) nothing is read.
    llvm::Value* v = fill;
    k.If(
        inside,
        [&] { k.Store(d, k.out(0), k.Offset(idx, out_strides), k.Load(d, k.in(0), offset)); },
        [&] { k.Store(d, k.out(0), k.Offset(idx, out_strides), v); });
  });
  return absl::OkStatus();
}

absl::Status Pad(KernelContext& k) {
  if (k.node().has_attr(attr::kPadAxes)) return SymbolicPad(k);
  std::string mode = k.node().attr_string("mode", "constant");
  std::vector<int64_t> pads = k.node().attr_ints("pads");
  DType d = k.in_dtype(0);
  const SymShape& in = k.in_shape(0);
  size_t rank = in.size();
  if (SymNumElements(in) == SymDim::Const(0)) {
    if (mode != "constant") return k.Error("cannot pad an empty tensor in mode " + mode);
    k.For(k.I64(0), k.NumElements(k.out_shape(0)), [&](llvm::Value* i) {
      k.Store(d, k.out(0), i, k.Const(d, k.node().attr_float("value", 0)));
    });
    return absl::OkStatus();
  }
  Idx in_dims = k.Dims(in), in_strides = k.Strides(in);
  Idx out_strides = k.Strides(k.out_shape(0));
  auto& b = k.b();
  k.ForNest(k.Dims(k.out_shape(0)), [&](const Idx& idx) {
    llvm::Value* offset = k.I64(0);
    llvm::Value* inside = b.getTrue();
    for (size_t a = 0; a < rank; ++a) {
      llvm::Value* s = idx[a];
      if (pads[a] != 0 || pads[a + rank] != 0) {
        llvm::Value* len = in_dims[a];
        llvm::Value* last = b.CreateSub(len, k.I64(1));
        s = b.CreateSub(s, k.I64(pads[a]));
        if (mode == "constant") {
          inside = b.CreateAnd(inside,
                               b.CreateAnd(b.CreateICmpSGE(s, k.I64(0)), b.CreateICmpSLT(s, len)));
        } else if (mode == "reflect") {
          s = b.CreateSelect(b.CreateICmpSLT(s, k.I64(0)), b.CreateNeg(s), s);
          s = b.CreateSelect(b.CreateICmpSGT(s, last), b.CreateSub(b.CreateMul(last, k.I64(2)), s),
                             s);
        } else if (mode == "wrap") {
          s = b.CreateSRem(b.CreateAdd(b.CreateSRem(s, len), len), len);
        }
        s = Clamp(k, s, k.I64(0), last);
      }
      offset = b.CreateAdd(offset, b.CreateMul(s, in_strides[a]));
    }
    llvm::Value* v = k.Load(d, k.in(0), offset);
    if (mode == "constant")
      v = b.CreateSelect(inside, v, k.Const(d, k.node().attr_float("value", 0)));
    k.Store(d, k.out(0), k.Offset(idx, out_strides), v);
  });
  return absl::OkStatus();
}

// DepthToSpace / SpaceToDepth are a transpose of a 6-D view of the input.
absl::Status BlockRearrange(KernelContext& k) {
  const SymShape& s = k.in_shape(0);
  SymDim bs = SymDim::Const(k.node().attr_int("blocksize", 1));
  SymShape view;
  std::vector<int64_t> perm;
  if (k.node().op_type == "SpaceToDepth") {
    view = {s[0], s[1], *SymDiv(s[2], bs), bs, *SymDiv(s[3], bs), bs};
    perm = {0, 3, 5, 1, 2, 4};
  } else if (k.node().attr_string("mode", "DCR") == "DCR") {
    view = {s[0], bs, bs, *SymDiv(s[1], SymMul(bs, bs)), s[2], s[3]};
    perm = {0, 3, 4, 1, 5, 2};
  } else {
    view = {s[0], *SymDiv(s[1], SymMul(bs, bs)), bs, bs, s[2], s[3]};
    perm = {0, 1, 4, 2, 5, 3};
  }
  EmitPermute(k, k.in_dtype(0), k.in(0), view, perm, k.out(0));
  return absl::OkStatus();
}

absl::Status ScatterND(KernelContext& k) {
  const SymShape& data = k.in_shape(0);
  const SymShape& indices = k.in_shape(1);
  DType d = k.in_dtype(0);
  std::string reduction = k.node().attr_string("reduction", "none");
  auto& b = k.b();
  int64_t q = indices.back().coef();
  k.Memcpy(k.out(0), k.in(0), k.NumElements(data), d);
  Idx dims = k.Dims(data), strides = k.Strides(data);
  llvm::Value* slice = k.NumElements(SymShape(data.begin() + q, data.end()));
  llvm::Value* updates = k.NumElements(SymShape(indices.begin(), indices.end() - 1));
  k.For(k.I64(0), updates, [&](llvm::Value* u) {
    llvm::Value* offset = k.I64(0);
    llvm::Value* valid = b.getTrue();
    for (int64_t j = 0; j < q; ++j) {
      llvm::Value* idx = LoadIndex(k, 1, b.CreateAdd(b.CreateMul(u, k.I64(q)), k.I64(j)));
      valid = b.CreateAnd(valid, IndexInRange(k, idx, dims[j]));
      offset = b.CreateAdd(offset, b.CreateMul(NormalizeIndex(k, idx, dims[j]), strides[j]));
    }
    // An out-of-range index fails the execution and writes nothing (a clamped write would
    // still land outside an empty axis).
    k.FailIf(b.CreateNot(valid), kEntryIndexOutOfBounds);
    k.If(valid, [&] {
      k.For(k.I64(0), slice, [&](llvm::Value* e) {
        llvm::Value* at = b.CreateAdd(offset, e);
        llvm::Value* v = k.Load(d, k.in(2), b.CreateAdd(b.CreateMul(u, slice), e));
        llvm::Value* old = reduction == "none" ? nullptr : k.Load(d, k.out(0), at);
        k.Store(d, k.out(0), at, ScatterCombine(k, d, reduction, old, v));
      });
    });
  });
  return absl::OkStatus();
}

absl::Status Trilu(KernelContext& k) {
  const SymShape& s = k.in_shape(0);
  DType d = k.in_dtype(0);
  bool upper = k.node().attr_int("upper", 1) != 0;
  auto& b = k.b();
  llvm::Value* diag = k.has_input(1) ? LoadIndex(k, 1, k.I64(0)) : k.I64(0);
  llvm::Value* rows = k.Dim(s[s.size() - 2]);
  llvm::Value* cols = k.Dim(s.back());
  k.ForNest({k.NumElements(SymShape(s.begin(), s.end() - 2)), rows, cols}, [&](const Idx& idx) {
    llvm::Value* at =
        b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(idx[0], rows), idx[1]), cols), idx[2]);
    llvm::Value* offset = b.CreateSub(idx[2], idx[1]);
    llvm::Value* keep = upper ? b.CreateICmpSGE(offset, diag) : b.CreateICmpSLE(offset, diag);
    k.Store(d, k.out(0), at, b.CreateSelect(keep, k.Load(d, k.in(0), at), k.Const(d, 0)));
  });
  return absl::OkStatus();
}

// ---- Resize ----

// How one axis maps output coordinates to input taps. Lengths and the scale are values of the
// kernel (constants when the dims are static, folded by the builder; run-time values computed from
// the resolved dims otherwise), so every mode serves symbolic dims the same way.
struct ResizeAxis {
  bool identity = true;
  llvm::Value* in_len = nullptr;  // i64
  llvm::Value* in_f = nullptr;    // double(in_len)
  llvm::Value* out_f = nullptr;   // double(output length)
  llvm::Value* scale = nullptr;   // double: the given scale, or output / input length
  double roi_start = 0, roi_end = 1;
};

struct Tap {
  llvm::Value* index;   // i64, clamped into the input
  llvm::Value* weight;  // double; nullptr means 1
};

struct AxisTaps {
  std::vector<Tap> taps;
  llvm::Value* inside = nullptr;  // i1 for tf_crop_and_resize: false selects extrapolation_value
};

class ResizeEmitter {
 public:
  explicit ResizeEmitter(KernelContext& k) : k_(k), b_(k.b()) {
    const ir::Node& n = k.node();
    mode_ = n.attr_string("mode", "nearest");
    ctm_ = n.attr_string("coordinate_transformation_mode", "half_pixel");
    nearest_ = n.attr_string("nearest_mode", "round_prefer_floor");
    cubic_a_ = n.attr_float("cubic_coeff_a", -0.75f);
    exclude_outside_ = n.attr_int("exclude_outside", 0) != 0;
    extrapolation_ = n.attr_float("extrapolation_value", 0.0f);
  }

  absl::Status Emit() {
    const SymShape& in = k_.in_shape(0);
    const SymShape& out = k_.out_shape(0);
    std::vector<float> scales = k_.node().attr_floats("scales");
    std::vector<float> roi = k_.node().attr_floats("roi");
    size_t rank = in.size();
    for (size_t a = 0; a < rank; ++a) {
      ResizeAxis ax;
      if (!roi.empty()) {
        ax.roi_start = roi[a];
        ax.roi_end = roi[a + rank];
      }
      bool crops = ctm_ == "tf_crop_and_resize" && (ax.roi_start != 0 || ax.roi_end != 1);
      bool shifts = ctm_ == "tf_half_pixel_for_nn";
      bool same_scale = scales.empty() || scales[a] == 1.0f;
      if (in[a] == out[a] && same_scale && !crops &&
          !(shifts && in[a].IsStatic() && in[a].coef() > 1)) {
        axes_.push_back(ax);
        continue;
      }
      ax.identity = false;
      ax.in_len = k_.Dim(in[a]);
      ax.in_f = b_.CreateSIToFP(ax.in_len, b_.getDoubleTy());
      ax.out_f = b_.CreateSIToFP(k_.Dim(out[a]), b_.getDoubleTy());
      // With sizes, ONNX's scale is output / input length (0 / 0 cannot occur: shape inference
      // refuses resizing an empty axis to a non-empty one, and an empty output runs no loop).
      ax.scale =
          scales.empty() ? b_.CreateFDiv(ax.out_f, ax.in_f) : F64(static_cast<double>(scales[a]));
      axes_.push_back(ax);
    }
    in_strides_ = k_.Strides(in);
    out_dims_ = k_.Dims(out);
    // Shape inference refuses a static empty axis resized to a non-empty one; with symbolic
    // dims the check falls to run time, and the loop over that axis runs no iteration (its taps
    // would read before the input).
    for (size_t a = 0; a < rank; ++a) {
      if (axes_[a].identity || (in[a].IsStatic() && out[a].IsStatic())) continue;
      llvm::Value* empty = b_.CreateICmpEQ(axes_[a].in_len, k_.I64(0));
      k_.FailIf(b_.CreateAnd(empty, b_.CreateICmpNE(out_dims_[a], k_.I64(0))),
                kEntryResizeEmptyAxis);
      out_dims_[a] = b_.CreateSelect(empty, k_.I64(0), out_dims_[a]);
    }
    out_strides_ = k_.Strides(out);
    if (rank == 0 || axes_.back().identity) {
      Loop(0, k_.I64(0));
    } else if (rank >= 2 && AllConstant()) {
      // Rows (every output index but the last axis') split over the intra-op threads: each
      // chunk a contiguous range of rows, as the elementwise kernels after it split the tensor.
      // Static sizes only: the body's context has no symbols, and every value here is constant.
      llvm::Value* rows = k_.I64(1);
      for (size_t a = 0; a + 1 < rank; ++a) rows = b_.CreateMul(rows, out_dims_[a]);
      int64_t taps_per_element = 1;
      for (const ResizeAxis& ax : axes_) {
        if (!ax.identity) taps_per_element *= mode_ == "nearest" ? 1 : mode_ == "linear" ? 2 : 4;
      }
      llvm::Value* cost = b_.CreateMul(out_dims_[rank - 1], k_.I64(2 * taps_per_element));
      k_.ParallelFor(rows, cost, {},
                     [this](KernelContext& o, const Idx&, llvm::Value* begin, llvm::Value* end) {
                       ResizeEmitter inner(o);
                       inner.axes_ = axes_;
                       inner.in_strides_ = in_strides_;
                       inner.out_dims_ = out_dims_;
                       inner.out_strides_ = out_strides_;
                       inner.rows_begin_ = begin;
                       inner.rows_end_ = end;
                       inner.BlockedLastAxis();
                     });
    } else {
      BlockedLastAxis();
    }
    return absl::OkStatus();
  }

 private:
  llvm::Value* F64(double v) { return llvm::ConstantFP::get(b_.getDoubleTy(), v); }

  // Whether every length, scale and stride is a constant (static shapes): values another
  // function (a ParallelFor body) may use as they are.
  bool AllConstant() const {
    for (const ResizeAxis& ax : axes_) {
      for (llvm::Value* v : {ax.in_len, ax.in_f, ax.out_f, ax.scale}) {
        if (v != nullptr && !llvm::isa<llvm::Constant>(v)) return false;
      }
    }
    for (const Idx* values : {&in_strides_, &out_dims_, &out_strides_}) {
      for (llvm::Value* v : *values) {
        if (!llvm::isa<llvm::Constant>(v)) return false;
      }
    }
    return true;
  }

  // Rows [rows_begin_, rows_end_) of the output (all its indices but the last axis', row-major):
  // each row's taps on the leading axes, then the block's columns. Used by a ParallelFor chunk.
  void RowRange() {
    const size_t last = axes_.size() - 1;
    k_.For(rows_begin_, rows_end_, [&](llvm::Value* row) {
      // Row r's index on each leading axis, by division from the right.
      std::vector<llvm::Value*> index(last);
      llvm::Value* rest = row;
      for (size_t a = last; a-- > 0;) {
        index[a] = a == 0 ? rest : b_.CreateURem(rest, out_dims_[a]);
        if (a > 0) rest = b_.CreateUDiv(rest, out_dims_[a]);
      }
      llvm::Value* offset = k_.I64(0);
      for (size_t a = 0; a < last; ++a) {
        taps_.push_back(AxisTapsAt(a, index[a]));
        offset = b_.CreateAdd(offset, b_.CreateMul(index[a], out_strides_[a]));
      }
      Loop(last, offset);  // the block's columns
      taps_.resize(taps_.size() - last);
    });
  }

  // Output columns per block of the last axis (see BlockedLastAxis).
  static constexpr int64_t kColumnBlock = 64;

  // The last axis' taps (a division, a floor and clamps each) depend on the column only: they
  // are computed once per block of kColumnBlock columns into stack tables, and every row of the
  // block reads them (on segmentation heads' 8x-16x upsampling, 2.5x faster than per element).
  void BlockedLastAxis() {
    const size_t last = axes_.size() - 1;
    // Taps per column: nearest 1, linear 2, cubic 4 (as Taps makes them).
    const size_t taps = mode_ == "nearest" ? 1 : mode_ == "linear" ? 2 : 4;
    llvm::Value* index = k_.Scratch(k_.I64Ty(), static_cast<int64_t>(taps) * kColumnBlock);
    llvm::Value* weight = k_.Scratch(b_.getDoubleTy(), static_cast<int64_t>(taps) * kColumnBlock);
    llvm::Value* inside = k_.Scratch(b_.getInt1Ty(), kColumnBlock);
    llvm::Value* width = out_dims_[last];
    llvm::Value* blocks =
        b_.CreateUDiv(b_.CreateAdd(width, k_.I64(kColumnBlock - 1)), k_.I64(kColumnBlock));
    k_.For(k_.I64(0), blocks, [&](llvm::Value* block) {
      llvm::Value* x0 = b_.CreateMul(block, k_.I64(kColumnBlock));
      llvm::Value* count = b_.CreateSub(width, x0);
      count = b_.CreateSelect(b_.CreateICmpSLT(count, k_.I64(kColumnBlock)), count,
                              k_.I64(kColumnBlock));
      bool has_inside = false;
      k_.For(k_.I64(0), count, [&](llvm::Value* j) {
        AxisTaps t = Taps(axes_[last], b_.CreateAdd(x0, j));
        for (size_t i = 0; i < taps; ++i) {
          llvm::Value* at =
              b_.CreateAdd(b_.CreateMul(k_.I64(static_cast<int64_t>(i)), k_.I64(kColumnBlock)), j);
          b_.CreateStore(t.taps[i].index, b_.CreateInBoundsGEP(k_.I64Ty(), index, at));
          if (t.taps[i].weight != nullptr) {
            b_.CreateStore(t.taps[i].weight, b_.CreateInBoundsGEP(b_.getDoubleTy(), weight, at));
          }
        }
        if (t.inside != nullptr) {
          has_inside = true;
          b_.CreateStore(t.inside, b_.CreateInBoundsGEP(b_.getInt1Ty(), inside, j));
        }
      });
      column_ = [=, this](llvm::Value* j) {
        AxisTaps t;
        for (size_t i = 0; i < taps; ++i) {
          llvm::Value* at =
              b_.CreateAdd(b_.CreateMul(k_.I64(static_cast<int64_t>(i)), k_.I64(kColumnBlock)), j);
          llvm::Value* w = mode_ == "nearest"
                               ? nullptr
                               : b_.CreateLoad(b_.getDoubleTy(),
                                               b_.CreateInBoundsGEP(b_.getDoubleTy(), weight, at));
          t.taps.push_back(
              {b_.CreateLoad(k_.I64Ty(), b_.CreateInBoundsGEP(k_.I64Ty(), index, at)), w});
        }
        if (has_inside) {
          t.inside = b_.CreateLoad(b_.getInt1Ty(), b_.CreateInBoundsGEP(b_.getInt1Ty(), inside, j));
        }
        return t;
      };
      block_x0_ = x0;
      block_count_ = count;
      if (rows_begin_ != nullptr) {
        RowRange();
      } else {
        Loop(0, k_.I64(0));
      }
    });
  }

  // Loop nest over output axes; each axis' taps are computed at its own depth (the last axis'
  // come from the block's tables when BlockedLastAxis runs the nest).
  void Loop(size_t axis, llvm::Value* out_offset) {
    if (axis == axes_.size()) {
      Body(out_offset);
      return;
    }
    if (axis + 1 == axes_.size() && column_) {
      k_.For(k_.I64(0), block_count_, [&](llvm::Value* j) {
        llvm::Value* x = b_.CreateAdd(block_x0_, j);
        taps_.push_back(column_(j));
        Loop(axis + 1, b_.CreateAdd(out_offset, b_.CreateMul(x, out_strides_[axis])));
        taps_.pop_back();
      });
      return;
    }
    k_.For(k_.I64(0), out_dims_[axis], [&](llvm::Value* x) {
      taps_.push_back(AxisTapsAt(axis, x));
      Loop(axis + 1, b_.CreateAdd(out_offset, b_.CreateMul(x, out_strides_[axis])));
      taps_.pop_back();
    });
  }

  // The taps of output index x on `axis` (itself on an axis the resize leaves alone).
  AxisTaps AxisTapsAt(size_t axis, llvm::Value* x) {
    return axes_[axis].identity ? AxisTaps{{{x, nullptr}}, nullptr} : Taps(axes_[axis], x);
  }

  // The input coordinate of output coordinate x (ONNX coordinate_transformation_mode).
  llvm::Value* SourceCoordinate(const ResizeAxis& ax, llvm::Value* x, AxisTaps& result) {
    llvm::Value* xd = b_.CreateSIToFP(x, b_.getDoubleTy());
    llvm::Value* in = ax.in_f;
    llvm::Value* in_1 = b_.CreateFSub(in, F64(1));
    llvm::Value* ow = b_.CreateFMul(ax.scale, in);  // ONNX uses the unrounded output length here.
    llvm::Value* ow_is_1 = b_.CreateFCmpOEQ(ow, F64(1));
    llvm::Value* ow_1 = b_.CreateFSub(ow, F64(1));
    llvm::Value* half_pixel =
        b_.CreateFSub(b_.CreateFDiv(b_.CreateFAdd(xd, F64(0.5)), ax.scale), F64(0.5));
    if (ctm_ == "asymmetric") return b_.CreateFDiv(xd, ax.scale);
    if (ctm_ == "tf_half_pixel_for_nn") return b_.CreateFDiv(b_.CreateFAdd(xd, F64(0.5)), ax.scale);
    if (ctm_ == "pytorch_half_pixel") return b_.CreateSelect(ow_is_1, F64(-0.5), half_pixel);
    if (ctm_ == "align_corners") {
      return b_.CreateSelect(ow_is_1, F64(0), b_.CreateFDiv(b_.CreateFMul(xd, in_1), ow_1));
    }
    if (ctm_ == "half_pixel_symmetric") {
      llvm::Value* adjustment = b_.CreateFDiv(ax.out_f, ow);
      llvm::Value* shift =
          b_.CreateFMul(b_.CreateFDiv(in, F64(2)), b_.CreateFSub(F64(1), adjustment));
      return b_.CreateFAdd(shift, half_pixel);
    }
    if (ctm_ == "tf_crop_and_resize") {
      double extent = ax.roi_end - ax.roi_start;
      llvm::Value* c =
          b_.CreateSelect(ow_is_1, b_.CreateFDiv(b_.CreateFMul(F64(extent), in_1), F64(2)),
                          b_.CreateFDiv(b_.CreateFMul(b_.CreateFMul(xd, F64(extent)), in_1), ow_1));
      c = b_.CreateFAdd(c, b_.CreateFMul(F64(ax.roi_start), in_1));
      result.inside = b_.CreateAnd(b_.CreateFCmpOGE(c, F64(0)), b_.CreateFCmpOLE(c, in_1));
      return c;
    }
    return half_pixel;
  }

  AxisTaps Taps(const ResizeAxis& ax, llvm::Value* x) {
    AxisTaps result;
    llvm::Value* c = SourceCoordinate(ax, x, result);
    llvm::Value* floor = k_.Intrinsic(llvm::Intrinsic::floor, c);
    llvm::Value* ratio = b_.CreateFSub(c, floor);
    llvm::Value* base = b_.CreateFPToSI(floor, k_.I64Ty());
    llvm::Value* last = b_.CreateSub(ax.in_len, k_.I64(1));
    auto clamp = [&](llvm::Value* i) { return Clamp(k_, i, k_.I64(0), last); };
    if (mode_ == "nearest") {
      llvm::Value* up = b_.getFalse();
      if (nearest_ == "round_prefer_floor") up = b_.CreateFCmpOGT(ratio, F64(0.5));
      if (nearest_ == "round_prefer_ceil") up = b_.CreateFCmpOGE(ratio, F64(0.5));
      if (nearest_ == "ceil") up = b_.CreateFCmpOGT(ratio, F64(0));
      result.taps.push_back({clamp(b_.CreateAdd(base, b_.CreateZExt(up, k_.I64Ty()))), nullptr});
      return result;
    }
    if (mode_ == "linear") {
      result.taps.push_back({clamp(base), b_.CreateFSub(F64(1), ratio)});
      result.taps.push_back({clamp(b_.CreateAdd(base, k_.I64(1))), ratio});
      return result;
    }
    // Cubic convolution (Keys) with coefficient A over taps base-1 .. base+2.
    double a = cubic_a_;
    auto near = [&](llvm::Value* t) {  // |t| <= 1: ((A+2)t - (A+3)) t^2 + 1
      llvm::Value* p = b_.CreateFSub(b_.CreateFMul(F64(a + 2), t), F64(a + 3));
      return b_.CreateFAdd(b_.CreateFMul(b_.CreateFMul(p, t), t), F64(1));
    };
    auto far = [&](llvm::Value* t) {  // 1 < |t| < 2: ((A t - 5A) t + 8A) t - 4A
      llvm::Value* p = b_.CreateFSub(b_.CreateFMul(F64(a), t), F64(5 * a));
      p = b_.CreateFAdd(b_.CreateFMul(p, t), F64(8 * a));
      return b_.CreateFSub(b_.CreateFMul(p, t), F64(4 * a));
    };
    llvm::Value* inv = b_.CreateFSub(F64(1), ratio);
    llvm::Value* weights[4] = {far(b_.CreateFAdd(ratio, F64(1))), near(ratio), near(inv),
                               far(b_.CreateFAdd(inv, F64(1)))};
    llvm::Value* sum = F64(0);
    for (int t = 0; t < 4; ++t) {
      llvm::Value* i = b_.CreateAdd(base, k_.I64(t - 1));
      if (exclude_outside_) {
        llvm::Value* in_range =
            b_.CreateAnd(b_.CreateICmpSGE(i, k_.I64(0)), b_.CreateICmpSLE(i, last));
        weights[t] = b_.CreateSelect(in_range, weights[t], F64(0));
        sum = b_.CreateFAdd(sum, weights[t]);
      }
      result.taps.push_back({clamp(i), weights[t]});
    }
    if (exclude_outside_) {
      for (Tap& t : result.taps) t.weight = b_.CreateFDiv(t.weight, sum);
    }
    return result;
  }

  // Sums weight * input over every combination of taps.
  void Body(llvm::Value* out_offset) {
    DType d = k_.in_dtype(0);
    llvm::Value* acc = nullptr;
    std::function<void(size_t, llvm::Value*, llvm::Value*)> combine =
        [&](size_t axis, llvm::Value* off, llvm::Value* w) {
          if (axis == taps_.size()) {
            llvm::Value* v = k_.Load(d, k_.in(0), off);
            if (mode_ == "nearest") {
              acc = v;
              return;
            }
            v = k_.Convert(v, d, DType::kFloat64);
            if (w != nullptr) v = b_.CreateFMul(w, v);
            acc = acc == nullptr ? v : b_.CreateFAdd(acc, v);
            return;
          }
          for (const Tap& t : taps_[axis].taps) {
            llvm::Value* weight = w == nullptr          ? t.weight
                                  : t.weight == nullptr ? w
                                                        : b_.CreateFMul(w, t.weight);
            combine(axis + 1, b_.CreateAdd(off, b_.CreateMul(t.index, in_strides_[axis])), weight);
          }
        };
    combine(0, k_.I64(0), nullptr);
    if (mode_ != "nearest") acc = k_.Convert(acc, DType::kFloat64, d);
    for (const AxisTaps& t : taps_) {
      if (t.inside != nullptr) acc = b_.CreateSelect(t.inside, acc, k_.Const(d, extrapolation_));
    }
    k_.Store(d, k_.out(0), out_offset, acc);
  }

  KernelContext& k_;
  llvm::IRBuilder<>& b_;
  std::string mode_, ctm_, nearest_;
  double cubic_a_ = -0.75, extrapolation_ = 0;
  bool exclude_outside_ = false;
  std::vector<ResizeAxis> axes_;
  std::vector<AxisTaps> taps_;
  Idx in_strides_, out_dims_, out_strides_;
  // Set by BlockedLastAxis: the current block's first column, its column count, and the taps of
  // its column j from the block's tables.
  std::function<AxisTaps(llvm::Value* j)> column_;
  llvm::Value* block_x0_ = nullptr;
  llvm::Value* block_count_ = nullptr;
  // Set in a ParallelFor chunk: the rows it computes (null: every row, by Loop).
  llvm::Value* rows_begin_ = nullptr;
  llvm::Value* rows_end_ = nullptr;
};

absl::Status Resize(KernelContext& k) { return ResizeEmitter(k).Emit(); }

}  // namespace

void RegisterMovementKernels(OpTable& r) {
  r.DefineEmitter("Transpose", Transpose);
  r.DefineEmitter("Concat", ConcatOrSplit);
  r.DefineEmitter("Split", ConcatOrSplit);
  r.DefineEmitter("Slice", Slice);
  r.DefineEmitter("Gather", Gather);
  r.DefineEmitter("Tile", Tile);
  r.DefineEmitter("Expand", Expand);
  r.DefineEmitter("Pad", Pad);
  r.DefineEmitter("DepthToSpace", BlockRearrange);
  r.DefineEmitter("SpaceToDepth", BlockRearrange);
  r.DefineEmitter("ScatterND", ScatterND);
  r.DefineEmitter("Trilu", Trilu);
  r.DefineEmitter("Resize", Resize);
  r.DefineEmitter("Upsample", Resize);
}

}  // namespace cuvil::codegen
