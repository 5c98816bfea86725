// Code generation for the quant op family. Quantization is y = saturate(roundeven(x / scale) + zp)
// computed in float32; integer MatMul/Conv subtract zero points and accumulate in int32, and the
// QLinear variants requantize the accumulator with scale = in_scale * w_scale / y_scale.
#include "codegen/kernel_context.h"
#include "cuvil/runtime/ukernel_scratch.h"
#include "cuvil/runtime/ukernels.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

constexpr DType kF32 = DType::kFloat32;
constexpr DType kI32 = DType::kInt32;

// A scale or zero-point input: absent (reads as 0), one value, or one value per channel.
struct QParam {
  DType dtype = DType::kUInt8;
  llvm::Value* base = nullptr;
  bool per_channel = false;
};

QParam Param(KernelContext& k, size_t i) {
  if (!k.has_input(i)) return {};
  return {k.in_dtype(i), k.in(i), SymNumElements(k.in_shape(i)) != SymDim::Const(1)};
}

// The parameter's value for `channel`, converted to `to`.
llvm::Value* LoadParam(KernelContext& k, const QParam& p, llvm::Value* channel, DType to) {
  if (p.base == nullptr) return k.Const(to, 0);
  return k.Convert(k.Load(p.dtype, p.base, p.per_channel ? channel : k.I64(0)), p.dtype, to);
}

// Final step of every quantizing op: round half to even, add the (float) zero point, saturate.
// The clamp is done in float (maxnum maps NaN to the low bound, as a saturating conversion does),
// so the conversion itself is a plain one, which vectorises.
llvm::Value* ToQuant(KernelContext& k, llvm::Value* v, llvm::Value* zp, DType to) {
  llvm::Value* q = k.Add(kF32, k.Intrinsic(llvm::Intrinsic::roundeven, v), zp);
  const bool int8 = to == DType::kInt8;
  if (to != DType::kUInt8 && !int8) return k.Convert(q, kF32, to);
  auto& b = k.b();
  q = b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, q, k.F32(int8 ? -128.0f : 0.0f));
  q = b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, q, k.F32(int8 ? 127.0f : 255.0f));
  return int8 ? b.CreateFPToSI(q, b.getInt8Ty()) : b.CreateFPToUI(q, b.getInt8Ty());
}

// Runs body(flat index, channel) over every element of input 0; `channel` is the index along
// `axis` when parameters are per-axis, else 0.
void ForChannels(KernelContext& k, bool per_axis, int axis,
                 const std::function<void(llvm::Value*, llvm::Value*)>& body) {
  const SymShape& s = k.in_shape(0);
  if (!per_axis) {
    k.For(k.I64(0), k.NumElements(s), [&](llvm::Value* i) { body(i, k.I64(0)); });
    return;
  }
  llvm::Value* channels = k.Dim(s[axis]);
  llvm::Value* inner = k.NumElements(SymShape(s.begin() + axis + 1, s.end()));
  llvm::Value* outer = k.NumElements(SymShape(s.begin(), s.begin() + axis));
  k.ForNest({outer, channels, inner}, [&](const Idx& idx) {
    auto& b = k.b();
    body(
        b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(idx[0], channels), idx[1]), inner), idx[2]),
        idx[1]);
  });
}

absl::Status QuantizeLinear(KernelContext& k) {
  QParam scale = Param(k, 1), zp = Param(k, 2);
  DType in = k.in_dtype(0), out = k.out_dtype(0);
  if (!scale.per_channel && !zp.per_channel) {
    // Per tensor: the parameters are read once, before the loop. Inside it, the uint8 store could
    // alias them, so LLVM would reload both per element and not vectorise.
    llvm::Value* s = LoadParam(k, scale, k.I64(0), kF32);
    llvm::Value* z = LoadParam(k, zp, k.I64(0), kF32);
    k.For(k.I64(0), k.NumElements(k.in_shape(0)), [&](llvm::Value* i) {
      llvm::Value* x = k.Convert(k.Load(in, k.in(0), i), in, kF32);
      k.Store(out, k.out(0), i, ToQuant(k, k.Div(kF32, x, s), z, out));
    });
    return absl::OkStatus();
  }
  ForChannels(k, scale.per_channel, static_cast<int>(k.node().attr_int("axis", 1)),
              [&](llvm::Value* i, llvm::Value* c) {
                llvm::Value* x = k.Convert(k.Load(in, k.in(0), i), in, kF32);
                llvm::Value* q = k.Div(kF32, x, LoadParam(k, scale, c, kF32));
                k.Store(out, k.out(0), i, ToQuant(k, q, LoadParam(k, zp, c, kF32), out));
              });
  return absl::OkStatus();
}

absl::Status DequantizeLinear(KernelContext& k) {
  QParam scale = Param(k, 1), zp = Param(k, 2);
  DType in = k.in_dtype(0), out = k.out_dtype(0);
  if (!scale.per_channel && !zp.per_channel) {  // Parameters read once (see QuantizeLinear).
    llvm::Value* s = LoadParam(k, scale, k.I64(0), out);
    llvm::Value* z = LoadParam(k, zp, k.I64(0), kI32);
    k.For(k.I64(0), k.NumElements(k.in_shape(0)), [&](llvm::Value* i) {
      llvm::Value* x = k.Sub(kI32, k.Convert(k.Load(in, k.in(0), i), in, kI32), z);
      k.Store(out, k.out(0), i, k.Mul(out, k.Convert(x, kI32, out), s));
    });
    return absl::OkStatus();
  }
  ForChannels(
      k, scale.per_channel, static_cast<int>(k.node().attr_int("axis", 1)),
      [&](llvm::Value* i, llvm::Value* c) {
        llvm::Value* x =
            k.Sub(kI32, k.Convert(k.Load(in, k.in(0), i), in, kI32), LoadParam(k, zp, c, kI32));
        k.Store(out, k.out(0), i, k.Mul(out, k.Convert(x, kI32, out), LoadParam(k, scale, c, out)));
      });
  return absl::OkStatus();
}

// Scale and zero point cover [min(x, 0), max(x, 0)] with the uint8 range. All-zero input gives
// scale 0, whose NaN quotients saturate to 0.
absl::Status DynamicQuantizeLinear(KernelContext& k) {
  llvm::Value* n = k.NumElements(k.in_shape(0));
  llvm::Value* lo = k.Scratch(k.F32Ty());
  llvm::Value* hi = k.Scratch(k.F32Ty());
  k.b().CreateStore(k.F32(0), lo);
  k.b().CreateStore(k.F32(0), hi);
  k.For(k.I64(0), n, [&](llvm::Value* i) {
    llvm::Value* x = k.Load(kF32, k.in(0), i);
    k.b().CreateStore(k.Min(kF32, k.b().CreateLoad(k.F32Ty(), lo), x), lo);
    k.b().CreateStore(k.Max(kF32, k.b().CreateLoad(k.F32Ty(), hi), x), hi);
  });
  llvm::Value* min = k.b().CreateLoad(k.F32Ty(), lo);
  llvm::Value* scale = k.Div(kF32, k.Sub(kF32, k.b().CreateLoad(k.F32Ty(), hi), min), k.F32(255));
  llvm::Value* zp = ToQuant(k, k.b().CreateFNeg(k.Div(kF32, min, scale)), k.F32(0), DType::kUInt8);
  if (k.has_output(1)) k.Store(kF32, k.out(1), k.I64(0), scale);
  if (k.has_output(2)) k.Store(DType::kUInt8, k.out(2), k.I64(0), zp);
  llvm::Value* zp_f = k.Convert(zp, DType::kUInt8, kF32);
  k.For(k.I64(0), n, [&](llvm::Value* i) {
    llvm::Value* q = k.Div(kF32, k.Load(kF32, k.in(0), i), scale);
    k.Store(DType::kUInt8, k.out(0), i, ToQuant(k, q, zp_f, DType::kUInt8));
  });
  return absl::OkStatus();
}

// Builds the int32 accumulator `acc += (x - x_zp) * (w - w_zp)` for one product term.
void Accumulate(KernelContext& k, llvm::Value* acc, llvm::Value* x, llvm::Value* x_zp,
                llvm::Value* w, llvm::Value* w_zp) {
  llvm::Value* term = k.Mul(kI32, k.Sub(kI32, x, x_zp), k.Sub(kI32, w, w_zp));
  k.b().CreateStore(k.Add(kI32, k.b().CreateLoad(k.b().getInt32Ty(), acc), term), acc);
}

// Computes out(0) = epilogue(acc, m, n) per output element, where acc is the int32 numpy matmul
// of inputs a and b (batch dims broadcast) with their per-row / per-column zero points removed.
using MatMulEpilogue =
    std::function<llvm::Value*(llvm::Value* acc, llvm::Value* m, llvm::Value* n)>;
void EmitIntMatMul(KernelContext& k, size_t a, size_t b, const QParam& a_zp, const QParam& b_zp,
                   const MatMulEpilogue& epilogue) {
  SymShape sa = k.in_shape(a), sb = k.in_shape(b);
  if (sa.size() == 1) sa.insert(sa.begin(), SymDim::Const(1));
  if (sb.size() == 1) sb.push_back(SymDim::Const(1));
  SymDim m_dim = sa[sa.size() - 2], k_dim = sa.back(), n_dim = sb.back();
  // The output's batch dims are its shape without the matrix dims that survive.
  const SymShape& out = k.out_shape(0);
  size_t nb = out.size() - (k.in_shape(a).size() > 1 ? 1 : 0) - (k.in_shape(b).size() > 1 ? 1 : 0);
  auto with = [&](SymDim rows, SymDim cols) {
    SymShape s(out.begin(), out.begin() + nb);
    s.push_back(rows);
    s.push_back(cols);
    return s;
  };
  Idx a_str = k.BroadcastStrides(sa, with(m_dim, k_dim));
  Idx b_str = k.BroadcastStrides(sb, with(k_dim, n_dim));
  Idx out_str = k.Strides(with(m_dim, n_dim));
  llvm::Value* acc = k.Scratch(k.b().getInt32Ty());
  k.ForNest(k.Dims(with(m_dim, n_dim)), [&](const Idx& idx) {
    llvm::Value* m = idx[nb];
    llvm::Value* n = idx[nb + 1];
    llvm::Value* azp = LoadParam(k, a_zp, m, kI32);
    llvm::Value* bzp = LoadParam(k, b_zp, n, kI32);
    k.b().CreateStore(k.b().getInt32(0), acc);
    k.For(k.I64(0), k.Dim(k_dim), [&](llvm::Value* kk) {
      Idx ai(idx.begin(), idx.begin() + nb), bi = ai;
      ai.insert(ai.end(), {m, kk});
      bi.insert(bi.end(), {kk, n});
      llvm::Value* av =
          k.Convert(k.Load(k.in_dtype(a), k.in(a), k.Offset(ai, a_str)), k.in_dtype(a), kI32);
      llvm::Value* bv =
          k.Convert(k.Load(k.in_dtype(b), k.in(b), k.Offset(bi, b_str)), k.in_dtype(b), kI32);
      Accumulate(k, acc, av, azp, bv, bzp);
    });
    llvm::Value* result = epilogue(k.b().CreateLoad(k.b().getInt32Ty(), acc), m, n);
    k.Store(k.out_dtype(0), k.out(0), k.Offset(idx, out_str), result);
  });
}

// Computes out(0) = epilogue(acc, m) per output element, where acc is the int32 grouped
// convolution of inputs x and w (canonical Conv attributes) with zero points removed; padded taps
// equal the zero point and so contribute nothing.
using ConvEpilogue = std::function<llvm::Value*(llvm::Value* acc, llvm::Value* m)>;
void EmitIntConv(KernelContext& k, size_t x, size_t w, const QParam& x_zp, const QParam& w_zp,
                 const ConvEpilogue& epilogue) {
  const ir::Node& node = k.node();
  const SymShape &xs = k.in_shape(x), &ws = k.in_shape(w), &os = k.out_shape(0);
  size_t nsp = xs.size() - 2;
  std::vector<int64_t> strides = node.attr_ints("strides"), dilations = node.attr_ints("dilations");
  std::vector<int64_t> pads = node.attr_ints("pads");
  int64_t in_per_group = ws[1].coef();
  int64_t out_per_group = ws[0].coef() / node.attr_int("group", 1);
  Idx x_str = k.Strides(xs), w_str = k.Strides(ws), out_str = k.Strides(os);
  Idx taps = {k.I64(in_per_group)};  // reduction extents: channel in group, kernel positions
  for (size_t i = 0; i < nsp; ++i) taps.push_back(k.Dim(ws[2 + i]));
  llvm::Value* acc = k.Scratch(k.b().getInt32Ty());
  k.ForNest(k.Dims(os), [&](const Idx& o) {
    auto& b = k.b();
    llvm::Value* m = o[1];
    llvm::Value* xzp = LoadParam(k, x_zp, k.I64(0), kI32);
    llvm::Value* wzp = LoadParam(k, w_zp, m, kI32);
    llvm::Value* c0 = b.CreateMul(b.CreateUDiv(m, k.I64(out_per_group)), k.I64(in_per_group));
    b.CreateStore(b.getInt32(0), acc);
    k.ForNest(taps, [&](const Idx& r) {
      Idx xi = {o[0], b.CreateAdd(c0, r[0])}, wi = {m, r[0]};
      llvm::Value* inside = b.getTrue();
      for (size_t i = 0; i < nsp; ++i) {
        llvm::Value* pos =
            b.CreateAdd(b.CreateMul(o[2 + i], k.I64(strides[i])),
                        b.CreateSub(b.CreateMul(r[1 + i], k.I64(dilations[i])), k.I64(pads[i])));
        // Unsigned compare also rejects negative positions.
        inside = b.CreateAnd(inside, b.CreateICmpULT(pos, k.Dim(xs[2 + i])));
        xi.push_back(pos);
        wi.push_back(r[1 + i]);
      }
      k.If(inside, [&] {
        llvm::Value* xv =
            k.Convert(k.Load(k.in_dtype(x), k.in(x), k.Offset(xi, x_str)), k.in_dtype(x), kI32);
        llvm::Value* wv =
            k.Convert(k.Load(k.in_dtype(w), k.in(w), k.Offset(wi, w_str)), k.in_dtype(w), kI32);
        Accumulate(k, acc, xv, xzp, wv, wzp);
      });
    });
    k.Store(k.out_dtype(0), k.out(0), k.Offset(o, out_str),
            epilogue(b.CreateLoad(b.getInt32Ty(), acc), m));
  });
}

// Requantizes an int32 accumulator: ToQuant(acc * in_scale * w_scale / y_scale, y_zp).
llvm::Value* Requantize(KernelContext& k, llvm::Value* acc, llvm::Value* in_scale,
                        llvm::Value* w_scale, llvm::Value* y_scale, llvm::Value* y_zp, DType out) {
  llvm::Value* scale = k.Div(kF32, k.Mul(kF32, in_scale, w_scale), y_scale);
  return ToQuant(k, k.Mul(kF32, k.Convert(acc, kI32, kF32), scale), y_zp, out);
}

absl::Status MatMulInteger(KernelContext& k) {
  EmitIntMatMul(k, 0, 1, Param(k, 2), Param(k, 3),
                [](llvm::Value* acc, llvm::Value*, llvm::Value*) { return acc; });
  return absl::OkStatus();
}

absl::Status QLinearMatMul(KernelContext& k) {
  QParam a_scale = Param(k, 1), b_scale = Param(k, 4), y_scale = Param(k, 6), y_zp = Param(k, 7);
  EmitIntMatMul(k, 0, 3, Param(k, 2), Param(k, 5),
                [&](llvm::Value* acc, llvm::Value* m, llvm::Value* n) {
                  return Requantize(k, acc, LoadParam(k, a_scale, m, kF32),
                                    LoadParam(k, b_scale, n, kF32), LoadParam(k, y_scale, n, kF32),
                                    LoadParam(k, y_zp, n, kF32), k.out_dtype(0));
                });
  return absl::OkStatus();
}

absl::Status ConvInteger(KernelContext& k) {
  EmitIntConv(k, 0, 1, Param(k, 2), Param(k, 3),
              [](llvm::Value* acc, llvm::Value*) { return acc; });
  return absl::OkStatus();
}

absl::Status QLinearConv(KernelContext& k) {
  QParam x_scale = Param(k, 1), w_scale = Param(k, 4), y_scale = Param(k, 6), y_zp = Param(k, 7);
  QParam bias = Param(k, 8);
  bias.per_channel = true;
  EmitIntConv(k, 0, 3, Param(k, 2), Param(k, 5), [&](llvm::Value* acc, llvm::Value* m) {
    acc = k.Add(kI32, acc, LoadParam(k, bias, m, kI32));
    return Requantize(k, acc, LoadParam(k, x_scale, m, kF32), LoadParam(k, w_scale, m, kF32),
                      LoadParam(k, y_scale, m, kF32), LoadParam(k, y_zp, m, kF32), k.out_dtype(0));
  });
  return absl::OkStatus();
}

// CuvilQConv (fuse_qdq.cc): one call into cuvil_uk_qconv2d with the geometry as a constant
// cuvil_uk_qconv_params.
absl::Status QConvFused(KernelContext& k) {
  const ir::Node& n = k.node();
  const std::vector<int64_t> ks = n.attr_ints("kernel_shape"), st = n.attr_ints("strides"),
                             d = n.attr_ints("dilations"), pads = n.attr_ints("pads");
  cuvil_uk_qconv_params p{};
  p.conv.channels = k.in_shape(0)[1].coef();
  p.conv.height = k.in_shape(0)[2].coef();
  p.conv.width = k.in_shape(0)[3].coef();
  p.conv.out_channels = k.out_shape(0)[1].coef();
  p.conv.out_height = k.out_shape(0)[2].coef();
  p.conv.out_width = k.out_shape(0)[3].coef();
  if (n.attr_int(attr::kOutType, CUVIL_UK_QOUT_FLOAT) == CUVIL_UK_QOUT_FLOAT_MEAN) {
    // The output is the [N, M, 1, 1] average; the kernel still walks the whole map.
    p.conv.out_height = (p.conv.height + pads[0] + pads[2] - d[0] * (ks[0] - 1) - 1) / st[0] + 1;
    p.conv.out_width = (p.conv.width + pads[1] + pads[3] - d[1] * (ks[1] - 1) - 1) / st[1] + 1;
  }
  p.conv.kernel_h = ks[0];
  p.conv.kernel_w = ks[1];
  p.conv.stride_h = st[0];
  p.conv.stride_w = st[1];
  p.conv.dilation_h = d[0];
  p.conv.dilation_w = d[1];
  p.conv.pad_top = pads[0];
  p.conv.pad_left = pads[1];
  p.conv.groups = 1;
  p.x_signed = k.in_dtype(0) == DType::kInt8 ? 1 : 0;
  p.x_zero = n.attr_int(attr::kXZero, 0);
  p.out_type = n.attr_int(attr::kOutType, CUVIL_UK_QOUT_FLOAT);
  constexpr size_t kWords = sizeof(cuvil_uk_qconv_params) / sizeof(int64_t);
  static_assert(kWords == 20);
  const int64_t* fields = &p.conv.channels;
  std::vector<uint64_t> words(fields, fields + kWords);
  std::vector<SymDim> scratch_words;
  for (size_t i = 0; i < kWords; ++i) scratch_words.push_back(SymDim::Const(fields[i]));
  scratch_words.push_back(k.in_shape(0)[0]);
  k.NoteScratch(CUVIL_SCRATCH_QCONV2D, std::move(scratch_words));
  auto* init = llvm::ConstantDataArray::get(k.llvm_context(), words);
  auto* params = new llvm::GlobalVariable(k.module(), init->getType(), /*isConstant=*/true,
                                          llvm::GlobalValue::PrivateLinkage, init,
                                          k.function()->getName() + ".qconv_params");
  llvm::Value* residual =
      k.has_input(5) ? k.in(5) : llvm::ConstantPointerNull::get(k.b().getPtrTy());
  k.CallAbi(abi::Fn::cuvil_uk_qconv2d,
            {params, k.in(0), k.in(1), k.in(2), k.in(3), k.in(4), residual, k.out(0),
             k.Dim(k.in_shape(0)[0]), k.F32(n.attr_float(attr::kQLo, 0.0f)),
             k.F32(n.attr_float(attr::kQHi, 0.0f))});
  return absl::OkStatus();
}

// CuvilQMatMul (fuse_qdq.cc): one call into cuvil_uk_qmatmul with the shape and types as a
// constant cuvil_uk_qmatmul_params; the row count is x's first dim at run time.
absl::Status QMatMulFused(KernelContext& k) {
  const ir::Node& n = k.node();
  cuvil_uk_qmatmul_params p{};
  p.k = k.in_shape(0)[1].coef();
  p.n = n.attr_int(attr::kOutColumns, 0);
  p.x_signed = k.in_dtype(0) == DType::kInt8 ? 1 : 0;
  p.out_type = n.attr_int(attr::kOutType, CUVIL_UK_QOUT_FLOAT);
  const std::vector<uint64_t> words = {static_cast<uint64_t>(p.k), static_cast<uint64_t>(p.n),
                                       static_cast<uint64_t>(p.x_signed),
                                       static_cast<uint64_t>(p.out_type)};
  static_assert(sizeof(cuvil_uk_qmatmul_params) == 4 * sizeof(int64_t));
  auto* init = llvm::ConstantDataArray::get(k.llvm_context(), words);
  auto* params = new llvm::GlobalVariable(k.module(), init->getType(), /*isConstant=*/true,
                                          llvm::GlobalValue::PrivateLinkage, init,
                                          k.function()->getName() + ".qmatmul_params");
  k.CallAbi(abi::Fn::cuvil_uk_qmatmul,
            {params, k.in(0), k.in(1), k.in(2), k.in(3), k.in(4), k.out(0), k.Dim(k.in_shape(0)[0]),
             k.F32(n.attr_float(attr::kQLo, 0.0f)), k.F32(n.attr_float(attr::kQHi, 0.0f))});
  return absl::OkStatus();
}

// MatMulNBits in its canonical form (ops/shape_quant.cc): one call into cuvil_uk_matmul_nbits,
// every leading dim of A folded into its rows.
absl::Status MatMulNBits(KernelContext& k) {
  const ir::Node& n = k.node();
  llvm::Value* rows = k.I64(1);
  SymDim row_dim = SymDim::Const(1);
  const SymShape& a = k.in_shape(0);
  for (size_t i = 0; i + 1 < a.size(); ++i) {
    rows = k.b().CreateMul(rows, k.Dim(a[i]));
    row_dim = SymMul(row_dim, a[i]);
  }
  k.NoteScratch(CUVIL_SCRATCH_MATMUL_NBITS, {row_dim, SymDim::Const(n.attr_int("K", 0)),
                                             SymDim::Const(n.attr_int("block_size", 0))});
  llvm::Value* bias = k.has_input(4) ? k.in(4) : llvm::ConstantPointerNull::get(k.b().getPtrTy());
  k.CallAbi(abi::Fn::cuvil_uk_matmul_nbits,
            {k.in(0), rows, k.I64(n.attr_int("K", 0)), k.in(1), k.in(2), k.in(3), bias,
             k.I64(n.attr_int("N", 0)), k.I64(n.attr_int("block_size", 0)), k.out(0)});
  return absl::OkStatus();
}

}  // namespace

void RegisterQuantKernels(OpTable& r) {
  r.DefineEmitter("QuantizeLinear", QuantizeLinear);
  r.DefineEmitter("DequantizeLinear", DequantizeLinear);
  r.DefineEmitter("DynamicQuantizeLinear", DynamicQuantizeLinear);
  r.DefineEmitter("MatMulInteger", MatMulInteger);
  r.DefineEmitter("QLinearMatMul", QLinearMatMul);
  r.DefineEmitter("ConvInteger", ConvInteger);
  r.DefineEmitter("QLinearConv", QLinearConv);
  r.DefineEmitter("CuvilQConv", QConvFused);
  r.DefineEmitter("CuvilQMatMul", QMatMulFused);
  r.DefineEmitter("MatMulNBits", MatMulNBits);
}

}  // namespace cuvil::codegen
