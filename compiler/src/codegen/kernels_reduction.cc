// Code generation for the reduction op family. Shape inference has canonicalised every node
// (see ops/shape_reduction.cc), so kernels read only attributes. Most kernels split the input's
// loop nest into kept (outer) and reduced (inner) dims and make one or more passes per row.
// Float reductions accumulate in the input's float type, as ONNX Runtime does.
#include <functional>
#include <limits>

#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

// The input's dims split into kept and reduced loop nests (input strides), plus the row-major
// strides over the kept dims, which give the output row index whether or not dims are kept.
struct AxisSplit {
  Idx kept, kept_strides, row_strides;
  Idx reduced, reduced_strides;
  llvm::Value* count;  // elements per row
};

AxisSplit SplitAxes(KernelContext& k, const SymShape& shape, const std::vector<bool>& reduced) {
  AxisSplit s;
  Idx dims = k.Dims(shape), strides = k.Strides(shape);
  SymShape kept_shape;
  SymDim count = SymDim::Const(1);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (reduced[i]) {
      s.reduced.push_back(dims[i]);
      s.reduced_strides.push_back(strides[i]);
      count = SymMul(count, shape[i]);
    } else {
      s.kept.push_back(dims[i]);
      s.kept_strides.push_back(strides[i]);
      kept_shape.push_back(shape[i]);
    }
  }
  s.row_strides = k.Strides(kept_shape);
  s.count = k.Dim(count);
  return s;
}

// Axes [first, last) of a rank-`rank` shape.
std::vector<bool> AxisRange(size_t rank, int64_t first, int64_t last) {
  std::vector<bool> r(rank, false);
  for (int64_t i = first; i < last; ++i) r[i] = true;
  return r;
}

// body(input offset of the row's first element, row index) for every kept position.
void ForRows(KernelContext& k, const AxisSplit& s,
             const std::function<void(llvm::Value*, llvm::Value*)>& body) {
  k.ForNest(s.kept, [&](const Idx& idx) {
    body(k.Offset(idx, s.kept_strides), k.Offset(idx, s.row_strides));
  });
}

// body(input offset, index within the reduced dims) over one row.
void ForRow(KernelContext& k, const AxisSplit& s, llvm::Value* base,
            const std::function<void(llvm::Value*, const Idx&)>& body) {
  k.ForNest(s.reduced, [&](const Idx& idx) {
    body(k.b().CreateAdd(base, k.Offset(idx, s.reduced_strides)), idx);
  });
}

// ---- Reduce* ----

using ScalarOp = llvm::Value* (*)(KernelContext&, DType, llvm::Value*, llvm::Value*);

// How one Reduce* op folds a row: acc = step(acc, x) from `init`, then finish(acc, count).
struct ReduceOp {
  const char* name;
  double init;        // ±inf mean the dtype's lowest/highest value
  bool float_math;    // integer inputs are computed in double (sqrt, log, exp)
  bool shift_by_max;  // LogSumExp: fold exp(x - max) for stability, add max back at the end
  ScalarOp step;
  ScalarOp finish;  // (acc, count converted to the accumulator type)
};

llvm::Value* Sum(KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) {
  return k.Add(d, acc, x);
}
llvm::Value* Square(KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) {
  return k.Add(d, acc, k.Mul(d, x, x));
}
llvm::Value* Abs(KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) {
  llvm::Value* a = IsFloat(d)
                       ? k.Intrinsic(llvm::Intrinsic::fabs, x)
                       : k.b().CreateSelect(k.Less(d, x, k.Const(d, 0)), k.b().CreateNeg(x), x);
  return k.Add(d, acc, a);
}
llvm::Value* Identity(KernelContext&, DType, llvm::Value* acc, llvm::Value*) { return acc; }

constexpr double kInf = std::numeric_limits<double>::infinity();

const ReduceOp kReduceOps[] = {
    {"ReduceSum", 0, false, false, Sum, Identity},
    {"ReduceMean", 0, false, false, Sum,
     [](KernelContext& k, DType d, llvm::Value* acc, llvm::Value* n) { return k.Div(d, acc, n); }},
    {"ReduceMax", -kInf, false, false,
     [](KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) { return k.Max(d, acc, x); },
     Identity},
    {"ReduceMin", kInf, false, false,
     [](KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) { return k.Min(d, acc, x); },
     Identity},
    {"ReduceProd", 1, false, false,
     [](KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) { return k.Mul(d, acc, x); },
     Identity},
    {"ReduceL1", 0, false, false, Abs, Identity},
    {"ReduceL2", 0, true, false, Square,
     [](KernelContext& k, DType, llvm::Value* acc, llvm::Value*) {
       return k.Intrinsic(llvm::Intrinsic::sqrt, acc);
     }},
    {"ReduceSumSquare", 0, false, false, Square, Identity},
    {"ReduceLogSum", 0, true, false, Sum,
     [](KernelContext& k, DType, llvm::Value* acc, llvm::Value*) {
       return k.Intrinsic(llvm::Intrinsic::log, acc);
     }},
    {"ReduceLogSumExp", 0, true, true,
     [](KernelContext& k, DType d, llvm::Value* acc, llvm::Value* x) {
       return k.Add(d, acc, k.Intrinsic(llvm::Intrinsic::exp, x));
     },
     [](KernelContext& k, DType, llvm::Value* acc, llvm::Value*) {
       return k.Intrinsic(llvm::Intrinsic::log, acc);
     }},
};

llvm::Value* InitValue(KernelContext& k, DType d, double v) {
  if (v == -kInf) return k.Lowest(d);
  if (v == kInf) return k.Highest(d);
  return k.Const(d, v);
}

absl::Status EmitReduce(KernelContext& k, const ReduceOp& op) {
  DType d = k.in_dtype(0);
  DType ad = op.float_math && !IsFloat(d) ? DType::kFloat64 : d;
  const SymShape& shape = k.in_shape(0);
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t a : k.node().attr_ints("axes")) reduced[a] = true;
  AxisSplit s = SplitAxes(k, shape, reduced);
  auto load = [&](llvm::Value* off) { return k.Convert(k.Load(d, k.in(0), off), d, ad); };
  ForRows(k, s, [&](llvm::Value* base, llvm::Value* row) {
    llvm::Value* shift = nullptr;
    if (op.shift_by_max) {
      ScalarVar m(k, k.Lowest(ad));
      ForRow(k, s, base,
             [&](llvm::Value* off, const Idx&) { m.set(k.Max(ad, m.get(), load(off))); });
      // An infinite max would turn x - max into NaN; such rows need no shift.
      llvm::Value* finite =
          k.b().CreateFCmpOLT(k.Intrinsic(llvm::Intrinsic::fabs, m.get()), k.Highest(ad));
      shift = k.b().CreateSelect(finite, m.get(), k.Const(ad, 0));
    }
    ScalarVar acc(k, InitValue(k, ad, op.init));
    ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
      llvm::Value* x = load(off);
      acc.set(op.step(k, ad, acc.get(), shift ? k.Sub(ad, x, shift) : x));
    });
    llvm::Value* r = op.finish(k, ad, acc.get(), k.Convert(s.count, DType::kInt64, ad));
    if (shift) r = k.Add(ad, r, shift);
    k.Store(d, k.out(0), row, k.Convert(r, ad, d));
  });
  return absl::OkStatus();
}

// ---- ArgMax / ArgMin ----

absl::Status EmitArgReduce(KernelContext& k, bool max) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  int64_t axis = k.node().attr_int("axis", 0);
  bool last = k.node().attr_int("select_last_index", 0) != 0;
  AxisSplit s = SplitAxes(k, shape, AxisRange(shape.size(), axis, axis + 1));
  ForRows(k, s, [&](llvm::Value* base, llvm::Value* row) {
    ScalarVar best(k, max ? k.Lowest(d) : k.Highest(d));
    ScalarVar index(k, k.I64(0));
    ForRow(k, s, base, [&](llvm::Value* off, const Idx& idx) {
      llvm::Value* x = k.Load(d, k.in(0), off);
      // Strictly better keeps the first extreme; "not worse" moves to the last one.
      llvm::Value* better =
          max ? (last ? k.b().CreateNot(k.Less(d, x, best.get())) : k.Greater(d, x, best.get()))
              : (last ? k.b().CreateNot(k.Greater(d, x, best.get())) : k.Less(d, x, best.get()));
      best.set(k.b().CreateSelect(better, x, best.get()));
      index.set(k.b().CreateSelect(better, idx[0], index.get()));
    });
    k.Store(DType::kInt64, k.out(0), row, index.get());
  });
  return absl::OkStatus();
}

// ---- Softmax / LogSoftmax / Hardmax over axes [axis, axis_end) ----

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

absl::Status EmitSoftmax(KernelContext& k, SoftmaxKind kind) {
  DType d = k.in_dtype(0);
  if (!IsFloat(d)) return k.Unsupported(std::string("dtype ") + std::string(DTypeName(d)));
  const SymShape& shape = k.in_shape(0);
  AxisSplit s = SplitAxes(
      k, shape,
      AxisRange(shape.size(), k.node().attr_int("axis", 0), k.node().attr_int(attr::kAxisEnd, 0)));
  int64_t axis = k.node().attr_int("axis", 0), axis_end = k.node().attr_int(attr::kAxisEnd, 0);
  if (kind == SoftmaxKind::kSoftmax && axis_end == static_cast<int64_t>(shape.size())) {
    // Contiguous rows (the usual last-axis softmax): rows are independent, so the execution's
    // threads split them (attention has heads x sequence rows).
    llvm::Value* rows =
        k.NumElements(SymShape(shape.begin(), shape.begin() + static_cast<size_t>(axis)));
    // About four vector FMAs' worth of work per element (exp, max, sum, scale).
    llvm::Value* cost = k.b().CreateMul(s.count, k.I64(4));
    k.ParallelFor(rows, cost, {k.in(0), k.out(0), s.count},
                  [d](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
                    auto& ob = o.b();
                    llvm::Value *in = v[0], *out = v[1], *count = v[2];
                    o.For(begin, end, [&](llvm::Value* row) {
                      llvm::Value* base = ob.CreateMul(row, count);
                      auto at = [&](llvm::Value* i) { return ob.CreateAdd(base, i); };
                      ScalarVar m(o, o.Lowest(d));
                      o.For(o.I64(0), count, [&](llvm::Value* i) {
                        m.set(o.Max(d, m.get(), o.Load(d, in, at(i))));
                      });
                      llvm::Value* max = m.get();
                      ScalarVar sum(o, o.Const(d, 0));
                      o.For(o.I64(0), count, [&](llvm::Value* i) {
                        llvm::Value* e = o.FastExp(ob.CreateFSub(o.Load(d, in, at(i)), max));
                        o.Store(d, out, at(i), e);
                        sum.set(ReassocAdd(o, sum.get(), e));
                      });
                      llvm::Value* inv = ob.CreateFDiv(o.Const(d, 1.0), sum.get());
                      o.For(o.I64(0), count, [&](llvm::Value* i) {
                        o.Store(d, out, at(i), ob.CreateFMul(o.Load(d, out, at(i)), inv));
                      });
                    });
                  });
    return absl::OkStatus();
  }
  auto x_at = [&](llvm::Value* off) { return k.Load(d, k.in(0), off); };
  auto& b = k.b();
  ForRows(k, s, [&](llvm::Value* base, llvm::Value*) {
    if (kind == SoftmaxKind::kHardmax) {
      ScalarVar best(k, k.Lowest(d));
      ScalarVar best_off(k, base);
      ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
        llvm::Value* better = k.Greater(d, x_at(off), best.get());
        best.set(b.CreateSelect(better, x_at(off), best.get()));
        best_off.set(b.CreateSelect(better, off, best_off.get()));
      });
      ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
        k.Store(d, k.out(0), off,
                b.CreateUIToFP(b.CreateICmpEQ(off, best_off.get()), k.ElemType(d)));
      });
      return;
    }
    ScalarVar m(k, k.Lowest(d));
    ForRow(k, s, base, [&](llvm::Value* off, const Idx&) { m.set(k.Max(d, m.get(), x_at(off))); });
    llvm::Value* max = m.get();
    ScalarVar sum(k, k.Const(d, 0));
    ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
      llvm::Value* e = k.FastExp(b.CreateFSub(x_at(off), max));
      if (kind == SoftmaxKind::kSoftmax) k.Store(d, k.out(0), off, e);
      sum.set(ReassocAdd(k, sum.get(), e));
    });
    if (kind == SoftmaxKind::kSoftmax) {
      // One division per row; a vector divide per element costs several times a multiply.
      llvm::Value* inv = b.CreateFDiv(k.Const(d, 1.0), sum.get());
      ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
        k.Store(d, k.out(0), off, b.CreateFMul(k.Load(d, k.out(0), off), inv));
      });
    } else {
      llvm::Value* shift = b.CreateFAdd(max, k.Intrinsic(llvm::Intrinsic::log, sum.get()));
      ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
        k.Store(d, k.out(0), off, b.CreateFSub(x_at(off), shift));
      });
    }
  });
  return absl::OkStatus();
}

// ---- Normalisations ----

struct Moments {
  llvm::Value* mean;
  llvm::Value* inv_std;  // 1 / sqrt(variance + epsilon)
};

// Two passes (mean, then mean squared deviation) like the ONNX reference, for accuracy.
Moments RowMoments(KernelContext& k, DType d, const AxisSplit& s, llvm::Value* base,
                   float epsilon) {
  auto& b = k.b();
  llvm::Value* n = k.Convert(s.count, DType::kInt64, d);
  ScalarVar sum(k, k.Const(d, 0));
  ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
    sum.set(ReassocAdd(k, sum.get(), k.Load(d, k.in(0), off)));
  });
  llvm::Value* mean = b.CreateFDiv(sum.get(), n);
  ScalarVar sq(k, k.Const(d, 0));
  ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
    llvm::Value* dev = b.CreateFSub(k.Load(d, k.in(0), off), mean);
    sq.set(ReassocAdd(k, sq.get(), b.CreateFMul(dev, dev)));
  });
  llvm::Value* var = b.CreateFDiv(sq.get(), n);
  llvm::Value* std = k.Intrinsic(llvm::Intrinsic::sqrt, b.CreateFAdd(var, k.Const(d, epsilon)));
  return {mean, b.CreateFDiv(k.Const(d, 1), std)};
}

absl::Status EmitLayerNorm(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  int64_t axis = k.node().attr_int("axis", 0);
  SymShape normalized(shape.begin() + axis, shape.end());
  for (size_t i = 1; i < 3; ++i) {
    if (k.has_input(i) && k.in_shape(i).size() > normalized.size()) {
      return k.Unsupported("Scale/B of higher rank than the normalized shape");
    }
  }
  Idx scale_strides = k.BroadcastStrides(k.in_shape(1), normalized);
  Idx bias_strides = k.has_input(2) ? k.BroadcastStrides(k.in_shape(2), normalized) : Idx{};
  float epsilon = k.node().attr_float("epsilon", 1e-5f);
  AxisSplit s =
      SplitAxes(k, shape, AxisRange(shape.size(), axis, static_cast<int64_t>(shape.size())));
  auto& b = k.b();
  ForRows(k, s, [&](llvm::Value* base, llvm::Value* row) {
    Moments m = RowMoments(k, d, s, base, epsilon);
    ForRow(k, s, base, [&](llvm::Value* off, const Idx& idx) {
      llvm::Value* y = b.CreateFMul(b.CreateFSub(k.Load(d, k.in(0), off), m.mean), m.inv_std);
      y = b.CreateFMul(y, k.Load(d, k.in(1), k.Offset(idx, scale_strides)));
      if (k.has_input(2)) y = b.CreateFAdd(y, k.Load(d, k.in(2), k.Offset(idx, bias_strides)));
      k.Store(d, k.out(0), off, y);
    });
    if (k.has_output(1))
      k.Store(k.out_dtype(1), k.out(1), row, k.Convert(m.mean, d, k.out_dtype(1)));
    if (k.has_output(2))
      k.Store(k.out_dtype(2), k.out(2), row, k.Convert(m.inv_std, d, k.out_dtype(2)));
  });
  return absl::OkStatus();
}

// Loads element `c` of a per-channel input as the dtype `d` of X.
llvm::Value* ChannelParam(KernelContext& k, size_t input, llvm::Value* c, DType d) {
  return k.Convert(k.Load(k.in_dtype(input), k.in(input), c), k.in_dtype(input), d);
}

absl::Status EmitInstanceNorm(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  float epsilon = k.node().attr_float("epsilon", 1e-5f);
  AxisSplit s = SplitAxes(k, shape, AxisRange(shape.size(), 2, static_cast<int64_t>(shape.size())));
  llvm::Value* channels = k.Dim(shape[1]);
  auto& b = k.b();
  ForRows(k, s, [&](llvm::Value* base, llvm::Value* row) {
    Moments m = RowMoments(k, d, s, base, epsilon);
    llvm::Value* c = b.CreateURem(row, channels);
    llvm::Value* scale = b.CreateFMul(m.inv_std, ChannelParam(k, 1, c, d));
    llvm::Value* bias = ChannelParam(k, 2, c, d);
    ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
      llvm::Value* y = b.CreateFMul(b.CreateFSub(k.Load(d, k.in(0), off), m.mean), scale);
      k.Store(d, k.out(0), off, b.CreateFAdd(y, bias));
    });
  });
  return absl::OkStatus();
}

// Inference mode: y = (x - mean) * scale / sqrt(var + epsilon) + B, per channel (dim 1).
// Training mode: per channel, the mean and population variance over N and the spatial axes
// (two passes, accumulated in double), Y normalised with them, and the running statistics
// input * momentum + batch statistic * (1 - momentum).
absl::Status EmitBatchNormTraining(KernelContext& k) {
  DType d = k.in_dtype(0);
  DType f64 = DType::kFloat64;
  const SymShape& shape = k.in_shape(0);
  double epsilon = k.node().attr_float("epsilon", 1e-5f);
  double momentum = k.node().attr_float("momentum", 0.9f);
  llvm::Value* batch = k.Dim(shape[0]);
  llvm::Value* channels = k.Dim(shape[1]);
  llvm::Value* spatial = k.NumElements(SymShape(shape.begin() + 2, shape.end()));
  auto& b = k.b();
  // At least 1, so an empty batch gives statistics 0 instead of a division by zero.
  llvm::Value* count =
      b.CreateSIToFP(k.Max(DType::kInt64, b.CreateMul(batch, spatial), k.I64(1)), k.ElemType(f64));
  k.For(k.I64(0), channels, [&](llvm::Value* c) {
    auto for_each = [&](const std::function<void(llvm::Value*)>& body) {
      k.For(k.I64(0), batch, [&](llvm::Value* n) {
        llvm::Value* base = b.CreateMul(b.CreateAdd(b.CreateMul(n, channels), c), spatial);
        k.For(k.I64(0), spatial, [&](llvm::Value* j) { body(b.CreateAdd(base, j)); });
      });
    };
    auto load = [&](llvm::Value* off) { return k.Convert(k.Load(d, k.in(0), off), d, f64); };
    ScalarVar sum(k, k.Const(f64, 0));
    for_each([&](llvm::Value* off) { sum.set(b.CreateFAdd(sum.get(), load(off))); });
    llvm::Value* mean = b.CreateFDiv(sum.get(), count);
    ScalarVar squares(k, k.Const(f64, 0));
    for_each([&](llvm::Value* off) {
      llvm::Value* dev = b.CreateFSub(load(off), mean);
      squares.set(b.CreateFAdd(squares.get(), b.CreateFMul(dev, dev)));
    });
    llvm::Value* var = b.CreateFDiv(squares.get(), count);
    llvm::Value* inv_std =
        b.CreateFDiv(k.Const(f64, 1),
                     k.Intrinsic(llvm::Intrinsic::sqrt, b.CreateFAdd(var, k.Const(f64, epsilon))));
    llvm::Value* scale = b.CreateFMul(ChannelParam(k, 1, c, f64), inv_std);
    llvm::Value* bias = b.CreateFSub(ChannelParam(k, 2, c, f64), b.CreateFMul(mean, scale));
    for_each([&](llvm::Value* off) {
      llvm::Value* y = b.CreateFAdd(b.CreateFMul(load(off), scale), bias);
      k.Store(d, k.out(0), off, k.Convert(y, f64, d));
    });
    for (size_t i = 1; i <= 2; ++i) {
      if (!k.has_output(i)) continue;
      llvm::Value* running =
          b.CreateFAdd(b.CreateFMul(ChannelParam(k, 2 + i, c, f64), k.Const(f64, momentum)),
                       b.CreateFMul(i == 1 ? mean : var, k.Const(f64, 1 - momentum)));
      k.Store(k.out_dtype(i), k.out(i), c, k.Convert(running, f64, k.out_dtype(i)));
    }
  });
  return absl::OkStatus();
}

// Inference BatchNormalization: y = x * scale[c] + bias[c] per (image, channel) plane, planes
// split among the execution's threads; with `fused_relu` (FuseBatchNormRelu) max(y, 0).
absl::Status EmitBatchNorm(KernelContext& k) {
  if (k.node().attr_int("training_mode", 0) != 0) return EmitBatchNormTraining(k);
  const DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  const float epsilon = k.node().attr_float("epsilon", 1e-5f);
  const bool relu = k.node().attr_int(attr::kFusedRelu, 0) != 0;
  llvm::Value* channels = k.Dim(shape[1]);
  llvm::Value* spatial = k.NumElements(SymShape(shape.begin() + 2, shape.end()));
  llvm::Value* planes = k.b().CreateMul(k.Dim(shape[0]), channels);
  k.ParallelFor(
      planes, spatial, {channels, spatial},
      [=](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
        auto& b = o.b();
        o.For(begin, end, [&](llvm::Value* plane) {
          llvm::Value* c = b.CreateURem(plane, v[0]);
          llvm::Value* std = o.Intrinsic(
              llvm::Intrinsic::sqrt, b.CreateFAdd(ChannelParam(o, 4, c, d), o.Const(d, epsilon)));
          llvm::Value* scale = b.CreateFDiv(ChannelParam(o, 1, c, d), std);
          llvm::Value* bias =
              b.CreateFSub(ChannelParam(o, 2, c, d), b.CreateFMul(ChannelParam(o, 3, c, d), scale));
          llvm::Value* base = b.CreateMul(plane, v[1]);
          o.For(o.I64(0), v[1], [&](llvm::Value* j) {
            llvm::Value* off = b.CreateAdd(base, j);
            llvm::Value* y = b.CreateFAdd(b.CreateFMul(o.Load(d, o.in(0), off), scale), bias);
            if (relu) y = o.Max(d, y, o.Const(d, 0));
            o.Store(d, o.out(0), off, y);
          });
        });
      });
  return absl::OkStatus();
}

// ---- TopK ----

// Selection of the k best per slice along `axis` through an index buffer: O(n*k), which suits
// the small k models use. Ties go to the lower index, as ONNX requires.
absl::Status EmitTopK(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  int64_t axis = k.node().attr_int("axis", 0);
  bool largest = k.node().attr_int("largest", 1) != 0;
  // K is the output's extent along the axis (a symbolic K, see ops/shape_reduction.cc, lives
  // only there); it may be negative at run time only when computed from the shapes.
  llvm::Value* count = k.Dim(k.out_shape(0)[axis]);
  llvm::Value* n = k.Dim(shape[axis]);
  llvm::Value* outer = k.NumElements(SymShape(shape.begin(), shape.begin() + axis));
  llvm::Value* inner = k.NumElements(SymShape(shape.begin() + axis + 1, shape.end()));
  auto& b = k.b();
  // Shape inference checks K against a static axis only; a batch-dependent axis may be shorter
  // than K at run time, and selecting past it would overrun the index buffer.
  llvm::Value* fits = b.CreateAnd(b.CreateICmpSLE(count, n), b.CreateICmpSGE(count, k.I64(0)));
  k.FailIf(b.CreateNot(fits), kEntryTopKTooLarge);
  outer = b.CreateSelect(fits, outer, k.I64(0));
  llvm::Value* order =
      k.AllocHeap(b.CreateMul(n, k.I64(8)), {{SymMul(shape[axis], SymDim::Const(8))}});
  k.ForNest({outer, inner}, [&](const Idx& idx) {
    llvm::Value* in_base = b.CreateAdd(b.CreateMul(b.CreateMul(idx[0], n), inner), idx[1]);
    llvm::Value* out_base = b.CreateAdd(b.CreateMul(b.CreateMul(idx[0], count), inner), idx[1]);
    auto value_of = [&](llvm::Value* i) {
      return k.Load(d, k.in(0), b.CreateAdd(in_base, b.CreateMul(i, inner)));
    };
    k.For(k.I64(0), n, [&](llvm::Value* j) { k.Store(DType::kInt64, order, j, j); });
    k.For(k.I64(0), count, [&](llvm::Value* j) {
      ScalarVar best(k, j);
      k.For(b.CreateAdd(j, k.I64(1)), n, [&](llvm::Value* t) {
        llvm::Value* cand = k.Load(DType::kInt64, order, t);
        llvm::Value* cur = k.Load(DType::kInt64, order, best.get());
        llvm::Value* xc = value_of(cand);
        llvm::Value* xb = value_of(cur);
        llvm::Value* better = largest ? k.Greater(d, xc, xb) : k.Less(d, xc, xb);
        llvm::Value* tie = b.CreateAnd(k.Equal(d, xc, xb), b.CreateICmpSLT(cand, cur));
        best.set(b.CreateSelect(b.CreateOr(better, tie), t, best.get()));
      });
      llvm::Value* chosen = k.Load(DType::kInt64, order, best.get());
      k.Store(DType::kInt64, order, best.get(), k.Load(DType::kInt64, order, j));
      k.Store(DType::kInt64, order, j, chosen);
      llvm::Value* out_off = b.CreateAdd(out_base, b.CreateMul(j, inner));
      k.Store(d, k.out(0), out_off, value_of(chosen));
      if (k.has_output(1)) k.Store(DType::kInt64, k.out(1), out_off, chosen);
    });
  });
  k.FreeHeap(order);
  return absl::OkStatus();
}

// MeanVarianceNormalization: (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9) over "axes", as the
// ONNX function body computes it.
absl::Status EmitMvn(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  std::vector<bool> reduced(shape.size(), false);
  for (int64_t a : k.node().attr_ints("axes")) reduced[a] = true;
  AxisSplit s = SplitAxes(k, shape, reduced);
  auto& b = k.b();
  auto f64 = [&](double v) { return llvm::ConstantFP::get(b.getDoubleTy(), v); };
  llvm::Value* count = b.CreateSIToFP(s.count, b.getDoubleTy());
  ForRows(k, s, [&](llvm::Value* base, llvm::Value*) {
    ScalarVar sum(k, f64(0));
    ScalarVar squares(k, f64(0));
    ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
      llvm::Value* v = k.Convert(k.Load(d, k.in(0), off), d, DType::kFloat64);
      sum.set(b.CreateFAdd(sum.get(), v));
      squares.set(b.CreateFAdd(squares.get(), b.CreateFMul(v, v)));
    });
    llvm::Value* mean = b.CreateFDiv(sum.get(), count);
    llvm::Value* var = b.CreateFSub(b.CreateFDiv(squares.get(), count), b.CreateFMul(mean, mean));
    llvm::Value* denom = b.CreateFAdd(
        k.Intrinsic(llvm::Intrinsic::sqrt, k.Intrinsic2(llvm::Intrinsic::maxnum, var, f64(0))),
        f64(1e-9));
    ForRow(k, s, base, [&](llvm::Value* off, const Idx&) {
      llvm::Value* v = k.Convert(k.Load(d, k.in(0), off), d, DType::kFloat64);
      k.Store(d, k.out(0), off,
              k.Convert(b.CreateFDiv(b.CreateFSub(v, mean), denom), DType::kFloat64, d));
    });
  });
  return absl::OkStatus();
}

// LRN: x / (bias + alpha / size * sum of squares over the channel window) ^ beta, the window
// reaching floor((size - 1) / 2) channels back and ceil((size - 1) / 2) forward.
absl::Status EmitLrn(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  const ir::Node& n = k.node();
  int64_t size = n.attr_int("size", 1);
  double alpha = n.attr_float("alpha", 1e-4f), beta = n.attr_float("beta", 0.75f);
  double bias = n.attr_float("bias", 1.0f);
  auto& b = k.b();
  llvm::Value* channels = k.Dim(shape[1]);
  llvm::Value* inner = k.NumElements(SymShape(shape.begin() + 2, shape.end()));
  auto f64 = [&](double v) { return llvm::ConstantFP::get(b.getDoubleTy(), v); };
  k.ForNest({k.Dim(shape[0]), channels, inner}, [&](const Idx& at) {
    auto offset = [&](llvm::Value* c) {
      return b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(at[0], channels), c), inner), at[2]);
    };
    llvm::Value* lo = k.Max(DType::kInt64, b.CreateSub(at[1], k.I64((size - 1) / 2)), k.I64(0));
    llvm::Value* hi = k.Min(DType::kInt64, b.CreateAdd(at[1], k.I64(size / 2 + 1)), channels);
    ScalarVar sum(k, f64(0));
    k.For(lo, hi, [&](llvm::Value* c) {
      llvm::Value* v = k.Convert(k.Load(d, k.in(0), offset(c)), d, DType::kFloat64);
      sum.set(b.CreateFAdd(sum.get(), b.CreateFMul(v, v)));
    });
    llvm::Value* base = b.CreateFAdd(f64(bias), b.CreateFMul(f64(alpha / size), sum.get()));
    llvm::Value* scale = k.Intrinsic2(llvm::Intrinsic::pow, base, f64(beta));
    llvm::Value* x = k.Convert(k.Load(d, k.in(0), offset(at[1])), d, DType::kFloat64);
    k.Store(d, k.out(0), offset(at[1]), k.Convert(b.CreateFDiv(x, scale), DType::kFloat64, d));
  });
  return absl::OkStatus();
}

// CumSum along "axis": per (outer, inner) position a running sum walks the axis forwards or
// backwards; "exclusive" stores the sum before adding the element.
absl::Status EmitCumSum(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& shape = k.in_shape(0);
  size_t axis = static_cast<size_t>(k.node().attr_int("axis", 0));
  bool exclusive = k.node().attr_int("exclusive", 0) != 0;
  bool reverse = k.node().attr_int("reverse", 0) != 0;
  auto& b = k.b();
  llvm::Value* outer = k.NumElements(SymShape(shape.begin(), shape.begin() + axis));
  llvm::Value* len = k.Dim(shape[axis]);
  llvm::Value* inner = k.NumElements(SymShape(shape.begin() + axis + 1, shape.end()));
  k.For(k.I64(0), outer, [&](llvm::Value* o) {
    k.For(k.I64(0), inner, [&](llvm::Value* i) {
      ScalarVar sum(k, k.Const(d, 0));
      k.For(k.I64(0), len, [&](llvm::Value* step) {
        llvm::Value* a = reverse ? b.CreateSub(b.CreateSub(len, k.I64(1)), step) : step;
        llvm::Value* at = b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(o, len), a), inner), i);
        llvm::Value* x = k.Load(d, k.in(0), at);
        if (exclusive) k.Store(d, k.out(0), at, sum.get());
        sum.set(k.Add(d, sum.get(), x));
        if (!exclusive) k.Store(d, k.out(0), at, sum.get());
      });
    });
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterReductionKernels(OpTable& r) {
  for (const ReduceOp& op : kReduceOps) {
    r.DefineEmitter(op.name, [&op](KernelContext& k) { return EmitReduce(k, op); });
  }
  r.DefineEmitter("ArgMax", [](KernelContext& k) { return EmitArgReduce(k, true); });
  r.DefineEmitter("ArgMin", [](KernelContext& k) { return EmitArgReduce(k, false); });
  r.DefineEmitter("Softmax",
                  [](KernelContext& k) { return EmitSoftmax(k, SoftmaxKind::kSoftmax); });
  r.DefineEmitter("LogSoftmax",
                  [](KernelContext& k) { return EmitSoftmax(k, SoftmaxKind::kLogSoftmax); });
  r.DefineEmitter("Hardmax",
                  [](KernelContext& k) { return EmitSoftmax(k, SoftmaxKind::kHardmax); });
  r.DefineEmitter("CumSum", EmitCumSum);
  r.DefineEmitter("LRN", EmitLrn);
  r.DefineEmitter("MeanVarianceNormalization", EmitMvn);
  r.DefineEmitter("LayerNormalization", EmitLayerNorm);
  r.DefineEmitter("InstanceNormalization", EmitInstanceNorm);
  r.DefineEmitter("BatchNormalization", EmitBatchNorm);
  r.DefineEmitter("TopK", EmitTopK);
}

}  // namespace cuvil::codegen
