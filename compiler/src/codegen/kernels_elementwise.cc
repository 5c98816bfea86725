// Code generation for elementwise ops. Every op is a scalar function plugged into one
// broadcasting loop nest; fusion later composes these scalar functions.
#include <cmath>

#include "codegen/elementwise.h"
#include "codegen/kernel_context.h"
#include "codegen/kernels_string.h"

namespace cuvil::codegen {

namespace {

// Work per element in cuvil_rt_parallel_for's units: a chunk on another thread then has at least
// 256K elements (1 MiB of floats). Elementwise ops are memory-bound, and a second thread reads
// its half from the other core's cache: on a Zen 5 VM reading 1 MiB another core just wrote took
// 29 us against 11 us for this core's own, and DenseNet's Relu layers (64K-400K elements) took
// 2.5 ms on two threads with 64K-element chunks, 1.2 ms with these, 0.8 ms on one.
constexpr int64_t kElementCost = 1;

// 1 when input `j` (aligned to the output's rank from the right) spans output dim d, 0 when it is
// broadcast along it.
int Spans(const SymShape& in, size_t rank, size_t d) {
  const size_t offset = rank - in.size();
  return d >= offset && !(in[d - offset] == SymDim::Const(1)) ? 1 : 0;
}

}  // namespace

void EmitBroadcastElementwise(KernelContext& k, const std::vector<size_t>& inputs,
                              const ScalarFn& scalar) {
  const SymShape& out_shape = k.out_shape(0);
  const DType out_dtype = k.out_dtype(0);
  const size_t rank = out_shape.size();
  // Consecutive output dims that every input spans alike form one loop (x[N,C,H,W] * s[N,C,1,1]
  // is a loop over N*C rows of H*W), strided per input by the stride of the group's last dim.
  // Dims of extent 1 are left out: their index is always 0.
  std::vector<std::pair<size_t, size_t>> groups;  // [first, last] output dims
  for (size_t d = 0; d < rank; ++d) {
    if (out_shape[d] == SymDim::Const(1)) continue;
    bool join = !groups.empty();
    for (size_t j = 0; join && j < inputs.size(); ++j) {
      const SymShape& in = k.in_shape(inputs[j]);
      join = Spans(in, rank, groups.back().second) == Spans(in, rank, d);
    }
    if (join) {
      groups.back().second = d;
    } else {
      groups.push_back({d, d});
    }
  }
  const Idx out_strides = k.Strides(out_shape);
  std::vector<Idx> in_strides;
  for (size_t in : inputs) in_strides.push_back(k.BroadcastStrides(k.in_shape(in), out_shape));
  // Per group: extent, then each input's stride, then the output's.
  Idx extents;
  std::vector<Idx> strides(inputs.size() + 1);
  for (const auto& [first, last] : groups) {
    SymDim extent = SymDim::Const(1);
    for (size_t d = first; d <= last; ++d) extent = SymMul(extent, out_shape[d]);
    extents.push_back(k.Dim(extent));
    for (size_t j = 0; j < inputs.size(); ++j) strides[j].push_back(in_strides[j][last]);
    strides.back().push_back(out_strides[last]);
  }
  if (groups.empty()) {  // one element
    extents.push_back(k.I64(1));
    for (Idx& st : strides) st.push_back(k.I64(0));
  }
  const size_t g = extents.size();
  // One element row: every group but the last picks a row, the last runs as the inner loop.
  auto row_body = [&](KernelContext& o, const Idx& base, llvm::Value* begin, llvm::Value* end,
                      const Idx& inner_strides) {
    auto& b = o.b();
    o.For(begin, end, [&](llvm::Value* i) {
      std::vector<llvm::Value*> vals;
      for (size_t j = 0; j < inputs.size(); ++j) {
        llvm::Value* at = b.CreateAdd(base[j], b.CreateMul(i, inner_strides[j]));
        vals.push_back(o.Load(o.in_dtype(inputs[j]), o.in(inputs[j]), at));
      }
      llvm::Value* at = b.CreateAdd(base.back(), b.CreateMul(i, inner_strides.back()));
      o.Store(out_dtype, o.out(0), at, scalar(o, vals));
    });
  };
  // Strings move through heaps the outlined body cannot reach: they stay on this thread.
  bool parallel = out_dtype != DType::kString;
  for (size_t in : inputs) parallel &= k.in_dtype(in) != DType::kString;
  std::vector<llvm::Value*> captures(extents.begin(), extents.end());
  for (const Idx& st : strides) captures.insert(captures.end(), st.begin(), st.end());
  // Unpacks the captured extents and strides in a body's context.
  auto unpack = [&](const Idx& v, Idx* ext, std::vector<Idx>* st) {
    ext->assign(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(g));
    st->assign(strides.size(), Idx());
    size_t at = g;
    for (Idx& s : *st) {
      for (size_t i = 0; i < g; ++i) s.push_back(v[at++]);
    }
  };
  auto innermost = [&](const std::vector<Idx>& st) {
    Idx inner;
    for (const Idx& s : st) inner.push_back(s[g - 1]);
    return inner;
  };
  if (g == 1) {
    // One loop over everything (same-shape or scalar operands): contiguous, vectorised.
    auto flat = [&](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
      Idx ext;  // the one extent is the loop's count: unused here
      std::vector<Idx> st;
      unpack(v, &ext, &st);
      row_body(o, Idx(strides.size(), o.I64(0)), begin, end, innermost(st));
    };
    if (parallel) {
      k.ParallelFor(extents[0], k.I64(kElementCost), captures, flat);
    } else {
      flat(k, captures, k.I64(0), extents[0]);
    }
    return;
  }
  // Rows over the outer groups; row r's index in each is found by division from the right.
  auto rows = [&](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
    auto& b = o.b();
    Idx ext;
    std::vector<Idx> st;
    unpack(v, &ext, &st);
    o.For(begin, end, [&](llvm::Value* r) {
      Idx base(st.size(), o.I64(0));
      llvm::Value* rest = r;
      for (size_t d = g - 1; d-- > 0;) {
        llvm::Value* idx = d == 0 ? rest : b.CreateURem(rest, ext[d]);
        if (d > 0) rest = b.CreateUDiv(rest, ext[d]);
        for (size_t j = 0; j < st.size(); ++j) {
          base[j] = b.CreateAdd(base[j], b.CreateMul(idx, st[j][d]));
        }
      }
      row_body(o, base, o.I64(0), ext[g - 1], innermost(st));
    });
  };
  llvm::Value* row_count = k.I64(1);
  for (size_t d = 0; d + 1 < g; ++d) row_count = k.b().CreateMul(row_count, extents[d]);
  if (parallel) {
    k.ParallelFor(row_count, k.b().CreateMul(extents[g - 1], k.I64(kElementCost)), captures, rows);
  } else {
    rows(k, captures, k.I64(0), row_count);
  }
}

namespace {

using llvm::Intrinsic::ID;

EmitFn Elementwise(size_t arity, ScalarFn fn) {
  return [arity, fn](KernelContext& k) -> absl::Status {
    std::vector<size_t> inputs;
    for (size_t i = 0; i < arity; ++i) inputs.push_back(i);
    EmitBroadcastElementwise(k, inputs, fn);
    return absl::OkStatus();
  };
}

// A unary float op that is an LLVM intrinsic.
EmitFn FloatIntrinsic(ID id) {
  return Elementwise(1, [id](KernelContext& k, const std::vector<llvm::Value*>& v) {
    return k.Intrinsic(id, v[0]);
  });
}

// A unary float op that is a libm call (float and double variants).
EmitFn LibmUnary(const char* fname) {
  std::string f = fname;
  return Elementwise(1, [f](KernelContext& k, const std::vector<llvm::Value*>& v) {
    bool dbl = v[0]->getType()->isDoubleTy();
    return k.CallC(dbl ? f : f + "f", v[0]->getType(), {v[0]});
  });
}

llvm::Value* FConst(KernelContext& k, llvm::Value* like, double c) {
  return llvm::ConstantFP::get(like->getType(), c);
}

// Polynomial exp (vectorises; see KernelContext::FastExp for its accuracy).
llvm::Value* Exp(KernelContext& k, llvm::Value* x) { return k.FastExp(x); }

EmitFn FloatUnary(std::function<llvm::Value*(KernelContext&, const ir::Node&, llvm::Value*)> f) {
  return [f](KernelContext& k) -> absl::Status {
    const ir::Node& node = k.node();
    if (!IsFloat(k.in_dtype(0)))
      return k.Unsupported(std::string("dtype ") + std::string(DTypeName(k.in_dtype(0))));
    EmitBroadcastElementwise(k, {0}, [&](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      return f(kk, node, v[0]);
    });
    return absl::OkStatus();
  };
}

llvm::Value* Sigmoid(KernelContext& k, llvm::Value* x) { return k.FastSigmoid(x); }

llvm::Value* Softplus(KernelContext& k, llvm::Value* x) {
  // log(1 + exp(x)) computed stably: max(x, 0) + log1p(exp(-|x|)).
  auto& b = k.b();
  llvm::Value* ax = k.Intrinsic(llvm::Intrinsic::fabs, x);
  llvm::Value* t = k.CallC(x->getType()->isDoubleTy() ? "log1p" : "log1pf", x->getType(),
                           {Exp(k, b.CreateFNeg(ax))});
  return b.CreateFAdd(k.Intrinsic2(llvm::Intrinsic::maxnum, x, FConst(k, x, 0)), t);
}

void RegisterUnary(OpTable& r) {
  r.DefineEmitter("Abs", [](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    EmitBroadcastElementwise(
        k, {0}, [d](KernelContext& kk, const std::vector<llvm::Value*>& v) -> llvm::Value* {
          if (IsFloat(d)) return kk.Intrinsic(llvm::Intrinsic::fabs, v[0]);
          if (!IsSigned(d)) return v[0];
          return kk.b().CreateBinaryIntrinsic(llvm::Intrinsic::abs, v[0], kk.b().getFalse());
        });
    return absl::OkStatus();
  });
  r.DefineEmitter("Neg", [](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    EmitBroadcastElementwise(k, {0}, [d](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      return IsFloat(d) ? kk.b().CreateFNeg(v[0]) : kk.b().CreateNeg(v[0]);
    });
    return absl::OkStatus();
  });
  r.DefineEmitter("Sign", [](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    EmitBroadcastElementwise(k, {0}, [d](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      auto& b = kk.b();
      llvm::Value* zero = kk.Const(d, 0);
      llvm::Value* pos = b.CreateSelect(kk.Greater(d, v[0], zero), kk.Const(d, 1), zero);
      return b.CreateSelect(kk.Less(d, v[0], zero), kk.Const(d, -1), pos);
    });
    return absl::OkStatus();
  });
  r.DefineEmitter("Not", Elementwise(1, [](KernelContext& k, const std::vector<llvm::Value*>& v) {
                    return k.b().CreateXor(v[0], k.b().getInt8(1));
                  }));
  r.DefineEmitter("Exp", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return k.FastExp(x);
                  }));
  r.DefineEmitter("Erf", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return k.FastErf(x);
                  }));
  r.DefineEmitter("Tanh", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return k.FastTanh(x);
                  }));
  r.DefineEmitter("Log", FloatIntrinsic(llvm::Intrinsic::log));
  r.DefineEmitter("Sqrt", FloatIntrinsic(llvm::Intrinsic::sqrt));
  r.DefineEmitter("Floor", FloatIntrinsic(llvm::Intrinsic::floor));
  r.DefineEmitter("Ceil", FloatIntrinsic(llvm::Intrinsic::ceil));
  r.DefineEmitter("Round", FloatIntrinsic(llvm::Intrinsic::roundeven));
  r.DefineEmitter("Sin", FloatIntrinsic(llvm::Intrinsic::sin));
  r.DefineEmitter("Cos", FloatIntrinsic(llvm::Intrinsic::cos));
  for (const char* f : {"tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh"}) {
    std::string op = f;
    op[0] = static_cast<char>(std::toupper(op[0]));
    r.DefineEmitter(op, LibmUnary(f));
  }
  r.DefineEmitter("Reciprocal", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return k.b().CreateFDiv(FConst(k, x, 1), x);
                  }));
  r.DefineEmitter("Sigmoid", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return Sigmoid(k, x);
                  }));
  r.DefineEmitter("Relu", [](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    EmitBroadcastElementwise(
        k, {0}, [d](KernelContext& kk, const std::vector<llvm::Value*>& v) -> llvm::Value* {
          llvm::Value* zero = kk.Const(d, 0);
          if (IsFloat(d)) return kk.b().CreateSelect(kk.b().CreateFCmpOLT(v[0], zero), zero, v[0]);
          return kk.b().CreateSelect(kk.Less(d, v[0], zero), zero, v[0]);
        });
    return absl::OkStatus();
  });
  r.DefineEmitter("LeakyRelu", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
                    auto& b = k.b();
                    llvm::Value* alpha = FConst(k, x, n.attr_float("alpha", 0.01f));
                    return b.CreateSelect(b.CreateFCmpOLT(x, FConst(k, x, 0)),
                                          b.CreateFMul(alpha, x), x);
                  }));
  r.DefineEmitter(
      "ThresholdedRelu", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
        auto& b = k.b();
        return b.CreateSelect(b.CreateFCmpOGT(x, FConst(k, x, n.attr_float("alpha", 1.0f))), x,
                              FConst(k, x, 0));
      }));
  r.DefineEmitter(
      "Shrink", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
        auto& b = k.b();
        llvm::Value* lambd = FConst(k, x, n.attr_float("lambd", 0.5f));
        llvm::Value* bias = FConst(k, x, n.attr_float("bias", 0.0f));
        llvm::Value* high =
            b.CreateSelect(b.CreateFCmpOGT(x, lambd), b.CreateFSub(x, bias), FConst(k, x, 0));
        return b.CreateSelect(b.CreateFCmpOLT(x, b.CreateFNeg(lambd)), b.CreateFAdd(x, bias), high);
      }));
  r.DefineEmitter("Elu", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
                    auto& b = k.b();
                    llvm::Value* alpha = FConst(k, x, n.attr_float("alpha", 1.0f));
                    llvm::Value* neg =
                        b.CreateFMul(alpha, b.CreateFSub(Exp(k, x), FConst(k, x, 1)));
                    return b.CreateSelect(b.CreateFCmpOLT(x, FConst(k, x, 0)), neg, x);
                  }));
  r.DefineEmitter(
      "Celu", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
        auto& b = k.b();
        llvm::Value* alpha = FConst(k, x, n.attr_float("alpha", 1.0f));
        llvm::Value* neg =
            b.CreateFMul(alpha, b.CreateFSub(Exp(k, b.CreateFDiv(x, alpha)), FConst(k, x, 1)));
        return b.CreateFAdd(k.Intrinsic2(llvm::Intrinsic::maxnum, x, FConst(k, x, 0)),
                            k.Intrinsic2(llvm::Intrinsic::minnum, neg, FConst(k, x, 0)));
      }));
  r.DefineEmitter(
      "Selu", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
        auto& b = k.b();
        llvm::Value* alpha = FConst(k, x, n.attr_float("alpha", 1.67326319217681884765625f));
        llvm::Value* gamma = FConst(k, x, n.attr_float("gamma", 1.05070102214813232421875f));
        llvm::Value* neg = b.CreateFSub(b.CreateFMul(alpha, Exp(k, x)), alpha);
        return b.CreateFMul(gamma, b.CreateSelect(b.CreateFCmpOGT(x, FConst(k, x, 0)), x, neg));
      }));
  r.DefineEmitter(
      "HardSigmoid", FloatUnary([](KernelContext& k, const ir::Node& n, llvm::Value* x) {
        auto& b = k.b();
        llvm::Value* y = b.CreateFAdd(b.CreateFMul(FConst(k, x, n.attr_float("alpha", 0.2f)), x),
                                      FConst(k, x, n.attr_float("beta", 0.5f)));
        return k.Intrinsic2(llvm::Intrinsic::minnum,
                            k.Intrinsic2(llvm::Intrinsic::maxnum, y, FConst(k, x, 0)),
                            FConst(k, x, 1));
      }));
  r.DefineEmitter("HardSwish", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    auto& b = k.b();
                    llvm::Value* y =
                        b.CreateFAdd(b.CreateFMul(FConst(k, x, 1.0 / 6.0), x), FConst(k, x, 0.5));
                    y = k.Intrinsic2(llvm::Intrinsic::minnum,
                                     k.Intrinsic2(llvm::Intrinsic::maxnum, y, FConst(k, x, 0)),
                                     FConst(k, x, 1));
                    return b.CreateFMul(x, y);
                  }));
  r.DefineEmitter("Softplus", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return Softplus(k, x);
                  }));
  r.DefineEmitter("Softsign", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    auto& b = k.b();
                    return b.CreateFDiv(
                        x, b.CreateFAdd(FConst(k, x, 1), k.Intrinsic(llvm::Intrinsic::fabs, x)));
                  }));
  r.DefineEmitter("Mish", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return k.b().CreateFMul(x, k.FastTanh(Softplus(k, x)));
                  }));
  r.DefineEmitter("Gelu", FloatUnary([](KernelContext& k, const ir::Node&, llvm::Value* x) {
                    return k.FastGelu(x);
                  }));
  r.DefineEmitter("IsNaN", Elementwise(1, [](KernelContext& k, const std::vector<llvm::Value*>& v) {
                    return k.b().CreateZExt(k.b().CreateFCmpUNO(v[0], v[0]), k.b().getInt8Ty());
                  }));
  r.DefineEmitter("IsInf", [](KernelContext& k) -> absl::Status {
    bool pos = k.node().attr_int("detect_positive", 1) != 0;
    bool neg = k.node().attr_int("detect_negative", 1) != 0;
    EmitBroadcastElementwise(k, {0}, [=](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      auto& b = kk.b();
      llvm::Value* inf = llvm::ConstantFP::getInfinity(v[0]->getType(), false);
      llvm::Value* ninf = llvm::ConstantFP::getInfinity(v[0]->getType(), true);
      llvm::Value* r = b.getFalse();
      if (pos) r = b.CreateOr(r, b.CreateFCmpOEQ(v[0], inf));
      if (neg) r = b.CreateOr(r, b.CreateFCmpOEQ(v[0], ninf));
      return b.CreateZExt(r, b.getInt8Ty());
    });
    return absl::OkStatus();
  });
}

using BinaryOp = llvm::Value* (*)(KernelContext&, DType, llvm::Value*, llvm::Value*);

EmitFn Binary(BinaryOp op) {
  return [op](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    EmitBroadcastElementwise(k, {0, 1},
                             [d, op](KernelContext& kk, const std::vector<llvm::Value*>& v) {
                               return op(kk, d, v[0], v[1]);
                             });
    return absl::OkStatus();
  };
}

llvm::Value* ToBool(KernelContext& k, llvm::Value* i1) {
  return k.b().CreateZExt(i1, k.b().getInt8Ty());
}

llvm::Value* PowScalar(KernelContext& k, DType base, DType exp, llvm::Value* a, llvm::Value* b) {
  auto& bl = k.b();
  if (IsFloat(base)) {
    llvm::Value* e = k.Convert(b, exp, base);
    return k.Intrinsic2(llvm::Intrinsic::pow, a, e);
  }
  // Integer base: compute in double, then truncate like ONNX Runtime.
  llvm::Value* fa = k.Convert(a, base, DType::kFloat64);
  llvm::Value* fb = k.Convert(b, exp, DType::kFloat64);
  (void)bl;
  return k.Convert(k.Intrinsic2(llvm::Intrinsic::pow, fa, fb), DType::kFloat64, base);
}

void RegisterBinary(OpTable& r) {
  r.DefineEmitter("Add", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return k.Add(d, a, b);
                  }));
  r.DefineEmitter("Sub", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return k.Sub(d, a, b);
                  }));
  r.DefineEmitter("Mul", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return k.Mul(d, a, b);
                  }));
  r.DefineEmitter("Div", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return k.Div(d, a, b);
                  }));
  r.DefineEmitter("Mod", [](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    bool fmod = k.node().attr_int("fmod", 0) != 0;
    EmitBroadcastElementwise(
        k, {0, 1}, [=](KernelContext& kk, const std::vector<llvm::Value*>& v) -> llvm::Value* {
          auto& b = kk.b();
          if (IsFloat(d)) {
            llvm::Value* r = b.CreateFRem(v[0], v[1]);
            if (fmod) return r;
            llvm::Value* fix = b.CreateAnd(b.CreateFCmpUNE(r, kk.Const(d, 0)),
                                           b.CreateXor(b.CreateFCmpOLT(r, kk.Const(d, 0)),
                                                       b.CreateFCmpOLT(v[1], kk.Const(d, 0))));
            return b.CreateSelect(fix, b.CreateFAdd(r, v[1]), r);
          }
          // Rem never traps: x % 0 = 0 and INT_MIN % -1 = 0.
          llvm::Value* zero = kk.Const(d, 0);
          llvm::Value* r = kk.Rem(d, v[0], v[1]);
          if (fmod || !IsSigned(d)) return r;
          // Floor modulo takes the divisor's sign; r != 0 implies the divisor is neither 0 nor -1.
          llvm::Value* fix =
              b.CreateAnd(b.CreateICmpNE(r, zero),
                          b.CreateXor(b.CreateICmpSLT(r, zero), b.CreateICmpSLT(v[1], zero)));
          return b.CreateSelect(fix, b.CreateAdd(r, v[1]), r);
        });
    return absl::OkStatus();
  });
  r.DefineEmitter("Pow", [](KernelContext& k) -> absl::Status {
    DType base = k.in_dtype(0), exp = k.in_dtype(1);
    // A constant scalar exponent of 1, 2 or 3 (LayerNorm's x^2) is exact as multiplications,
    // which vectorise where a pow call does not.
    const HostTensor* e = k.in_constant(1);
    if (IsFloat(base) && e != nullptr && e->num_elements() == 1) {
      double ev = e->GetAsDouble(0);
      if (ev == 1 || ev == 2 || ev == 3) {
        EmitBroadcastElementwise(k, {0},
                                 [=](KernelContext& kk, const std::vector<llvm::Value*>& v) {
                                   llvm::Value* y = v[0];
                                   for (int i = 1; i < static_cast<int>(ev); ++i)
                                     y = kk.b().CreateFMul(y, v[0]);
                                   return y;
                                 });
        return absl::OkStatus();
      }
    }
    EmitBroadcastElementwise(k, {0, 1}, [=](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      return PowScalar(kk, base, exp, v[0], v[1]);
    });
    return absl::OkStatus();
  });
  r.DefineEmitter("BitShift", [](KernelContext& k) -> absl::Status {
    bool left = k.node().attr_string("direction", "") == "LEFT";
    EmitBroadcastElementwise(k, {0, 1}, [=](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      return left ? kk.b().CreateShl(v[0], v[1]) : kk.b().CreateLShr(v[0], v[1]);
    });
    return absl::OkStatus();
  });
  r.DefineEmitter("And", Binary([](KernelContext& k, DType, llvm::Value* a, llvm::Value* b) {
                    return k.b().CreateAnd(a, b);
                  }));
  r.DefineEmitter("Or", Binary([](KernelContext& k, DType, llvm::Value* a, llvm::Value* b) {
                    return k.b().CreateOr(a, b);
                  }));
  r.DefineEmitter("Xor", Binary([](KernelContext& k, DType, llvm::Value* a, llvm::Value* b) {
                    return k.b().CreateXor(a, b);
                  }));
  r.DefineEmitter("Equal", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return ToBool(k, k.Equal(d, a, b));
                  }));
  r.DefineEmitter("Less", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return ToBool(k, k.Less(d, a, b));
                  }));
  r.DefineEmitter("Greater", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
                    return ToBool(k, k.Greater(d, a, b));
                  }));
  r.DefineEmitter(
      "LessOrEqual", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
        llvm::Value* r =
            IsFloat(d) ? k.b().CreateFCmpOLE(a, b)
                       : (IsSigned(d) ? k.b().CreateICmpSLE(a, b) : k.b().CreateICmpULE(a, b));
        return ToBool(k, r);
      }));
  r.DefineEmitter(
      "GreaterOrEqual", Binary([](KernelContext& k, DType d, llvm::Value* a, llvm::Value* b) {
        llvm::Value* r =
            IsFloat(d) ? k.b().CreateFCmpOGE(a, b)
                       : (IsSigned(d) ? k.b().CreateICmpSGE(a, b) : k.b().CreateICmpUGE(a, b));
        return ToBool(k, r);
      }));
  r.DefineEmitter("PRelu", [](KernelContext& k) -> absl::Status {
    DType d = k.in_dtype(0);
    EmitBroadcastElementwise(k, {0, 1}, [d](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      llvm::Value* zero = kk.Const(d, 0);
      return kk.b().CreateSelect(kk.Less(d, v[0], zero), kk.Mul(d, v[0], v[1]), v[0]);
    });
    return absl::OkStatus();
  });
  r.DefineEmitter("Where", [](KernelContext& k) -> absl::Status {
    EmitBroadcastElementwise(
        k, {0, 1, 2}, [](KernelContext& kk, const std::vector<llvm::Value*>& v) {
          return kk.b().CreateSelect(kk.b().CreateICmpNE(v[0], kk.b().getInt8(0)), v[1], v[2]);
        });
    return absl::OkStatus();
  });
}

void RegisterVariadic(OpTable& r) {
  auto variadic = [](const char* op) -> EmitFn {
    std::string name = op;
    return [name](KernelContext& k) -> absl::Status {
      DType d = k.in_dtype(0);
      std::vector<size_t> ins;
      for (size_t i = 0; i < k.num_inputs(); ++i) ins.push_back(i);
      EmitBroadcastElementwise(k, ins, [&](KernelContext& kk, const std::vector<llvm::Value*>& v) {
        llvm::Value* acc = v[0];
        for (size_t i = 1; i < v.size(); ++i) {
          if (name == "Max")
            acc = kk.Max(d, acc, v[i]);
          else if (name == "Min")
            acc = kk.Min(d, acc, v[i]);
          else
            acc = kk.Add(d, acc, v[i]);
        }
        if (name == "Mean") acc = kk.Div(d, acc, kk.Const(d, static_cast<double>(v.size())));
        return acc;
      });
      return absl::OkStatus();
    };
  };
  for (const char* op : {"Sum", "Mean", "Max", "Min"}) r.DefineEmitter(op, variadic(op));
}

absl::Status EmitClip(KernelContext& k) {
  DType d = k.in_dtype(0);
  const ir::Node& n = k.node();
  bool attr_form = n.opset < 11;
  // Bounds: attributes (opset < 11) or optional scalar inputs; absent bounds do not clip.
  EmitBroadcastElementwise(k, {0}, [&](KernelContext& kk, const std::vector<llvm::Value*>& v) {
    auto& b = kk.b();
    llvm::Value* x = v[0];
    llvm::Value* lo = nullptr;
    llvm::Value* hi = nullptr;
    if (attr_form) {
      lo = kk.Const(d, n.attr_float("min", -std::numeric_limits<float>::infinity()));
      hi = kk.Const(d, n.attr_float("max", std::numeric_limits<float>::infinity()));
    } else {
      if (kk.has_input(1)) lo = kk.Load(d, kk.in(1), kk.I64(0));
      if (kk.has_input(2)) hi = kk.Load(d, kk.in(2), kk.I64(0));
    }
    if (lo) x = b.CreateSelect(kk.Less(d, x, lo), lo, x);
    if (hi) x = b.CreateSelect(kk.Greater(d, x, hi), hi, x);
    return x;
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterElementwiseKernels(OpTable& r) {
  RegisterUnary(r);
  RegisterBinary(r);
  RegisterVariadic(r);
  r.DefineEmitter("Clip", EmitClip);
  r.DefineEmitter("Cast", [](KernelContext& k) -> absl::Status {
    DType from = k.in_dtype(0), to = k.out_dtype(0);
    if (from == DType::kString || to == DType::kString) return EmitStringCast(k);
    EmitBroadcastElementwise(k, {0}, [=](KernelContext& kk, const std::vector<llvm::Value*>& v) {
      return kk.Convert(v[0], from, to);
    });
    return absl::OkStatus();
  });
}

}  // namespace cuvil::codegen
