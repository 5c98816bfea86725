// Code generation for the signal ops. A window is a cosine sum over n / N, with N = size for a
// periodic window and size - 1 for a symmetric one, evaluated in double and converted. DFT and
// STFT are direct O(n^2) transforms in double (the phase j * k is reduced modulo the length
// first so that long transforms keep their accuracy).
#include <algorithm>
#include <functional>
#include <numbers>
#include <utility>

#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil::codegen {
namespace {

absl::Status Window(KernelContext& k) {
  const std::string& op = k.node().op_type;
  // a0 - a1 cos(2 pi n / N) + a2 cos(4 pi n / N)
  double a0 = 0.5, a1 = 0.5, a2 = 0;
  if (op == "HammingWindow") {
    a0 = 25.0 / 46.0;
    a1 = 1 - a0;
  } else if (op == "BlackmanWindow") {
    a0 = 0.42;
    a2 = 0.08;
  }
  int64_t size = k.node().attr_int("size", 0);
  bool periodic = k.node().attr_int("periodic", 1) != 0;
  double denom = static_cast<double>(periodic ? size : size - 1);
  DType d = k.out_dtype(0);
  auto& b = k.b();
  llvm::Type* f64 = b.getDoubleTy();
  auto c = [&](double v) { return llvm::ConstantFP::get(f64, v); };
  k.For(k.I64(0), k.I64(size), [&](llvm::Value* i) {
    llvm::Value* phase = b.CreateFMul(b.CreateSIToFP(i, f64), c(2 * std::numbers::pi / denom));
    llvm::Value* w =
        b.CreateFSub(c(a0), b.CreateFMul(c(a1), k.Intrinsic(llvm::Intrinsic::cos, phase)));
    if (a2 != 0) {
      llvm::Value* twice = b.CreateFMul(phase, c(2));
      w = b.CreateFAdd(w, b.CreateFMul(c(a2), k.Intrinsic(llvm::Intrinsic::cos, twice)));
    }
    k.Store(d, k.out(0), i, k.Convert(w, DType::kFloat64, d));
  });
  return absl::OkStatus();
}

// sum over j in [0, count) of sample(j) * exp(sign * 2 pi i * j * bin / length), as (re, im);
// `sample` returns (re, im) doubles, im nullptr for a real signal.
std::pair<llvm::Value*, llvm::Value*> Transform(
    KernelContext& k, llvm::Value* count, llvm::Value* bin, int64_t length, double sign,
    const std::function<std::pair<llvm::Value*, llvm::Value*>(llvm::Value*)>& sample) {
  auto& b = k.b();
  llvm::Type* f64 = b.getDoubleTy();
  llvm::Value* re = k.Scratch(f64);
  llvm::Value* im = k.Scratch(f64);
  b.CreateStore(llvm::ConstantFP::get(f64, 0), re);
  b.CreateStore(llvm::ConstantFP::get(f64, 0), im);
  k.For(k.I64(0), count, [&](llvm::Value* j) {
    llvm::Value* phase = b.CreateURem(b.CreateMul(j, bin), k.I64(length));
    llvm::Value* angle =
        b.CreateFMul(b.CreateSIToFP(phase, f64),
                     llvm::ConstantFP::get(f64, sign * 2 * std::numbers::pi / length));
    llvm::Value* c = k.Intrinsic(llvm::Intrinsic::cos, angle);
    llvm::Value* s = k.Intrinsic(llvm::Intrinsic::sin, angle);
    auto [xr, xi] = sample(j);
    llvm::Value* r = b.CreateFMul(xr, c);
    llvm::Value* i = b.CreateFMul(xr, s);
    if (xi != nullptr) {
      r = b.CreateFSub(r, b.CreateFMul(xi, s));
      i = b.CreateFAdd(i, b.CreateFMul(xi, c));
    }
    b.CreateStore(b.CreateFAdd(b.CreateLoad(f64, re), r), re);
    b.CreateStore(b.CreateFAdd(b.CreateLoad(f64, im), i), im);
  });
  return {b.CreateLoad(f64, re), b.CreateLoad(f64, im)};
}

absl::Status Dft(KernelContext& k) {
  DType d = k.in_dtype(0);
  auto& b = k.b();
  const SymShape& x = k.in_shape(0);
  size_t axis = static_cast<size_t>(k.node().attr_int("axis", 1));
  int64_t length = k.node().attr_int("length", 1);
  bool inverse = k.node().attr_int("inverse", 0) != 0;
  bool complex = x.back() == SymDim::Const(2);
  int64_t n_in = x[axis].coef();
  int64_t bins = k.out_shape(0)[axis].coef();
  llvm::Value* outer = k.NumElements(SymShape(x.begin(), x.begin() + axis));
  llvm::Value* inner = k.NumElements(SymShape(x.begin() + axis + 1, x.end() - 1));
  int64_t comps = complex ? 2 : 1;
  double scale = inverse ? 1.0 / static_cast<double>(length) : 1.0;
  llvm::Value* count = k.I64(std::min(n_in, length));
  k.ForNest({outer, k.I64(bins), inner}, [&](const Idx& at) {
    auto [re, im] = Transform(
        k, count, at[1], length, inverse ? 1.0 : -1.0,
        [&](llvm::Value* j) -> std::pair<llvm::Value*, llvm::Value*> {
          llvm::Value* src = b.CreateMul(
              b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(at[0], k.I64(n_in)), j), inner),
                          at[2]),
              k.I64(comps));
          llvm::Value* xr = k.Convert(k.Load(d, k.in(0), src), d, DType::kFloat64);
          if (!complex) return {xr, nullptr};
          llvm::Value* xi =
              k.Convert(k.Load(d, k.in(0), b.CreateAdd(src, k.I64(1))), d, DType::kFloat64);
          return {xr, xi};
        });
    llvm::Value* dst = b.CreateMul(
        b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(at[0], k.I64(bins)), at[1]), inner), at[2]),
        k.I64(2));
    llvm::Value* f = llvm::ConstantFP::get(b.getDoubleTy(), scale);
    k.Store(d, k.out(0), dst, k.Convert(b.CreateFMul(re, f), DType::kFloat64, d));
    k.Store(d, k.out(0), b.CreateAdd(dst, k.I64(1)),
            k.Convert(b.CreateFMul(im, f), DType::kFloat64, d));
  });
  return absl::OkStatus();
}

absl::Status Stft(KernelContext& k) {
  DType d = k.in_dtype(0);
  auto& b = k.b();
  const SymShape& x = k.in_shape(0);
  const SymShape& out = k.out_shape(0);
  int64_t step = k.node().attr_int("frame_step", 1);
  int64_t length = k.node().attr_int("frame_length", 1);
  bool complex = x[2] == SymDim::Const(2);
  int64_t comps = complex ? 2 : 1;
  int64_t signal = x[1].coef(), frames = out[1].coef(), bins = out[2].coef();
  bool windowed = k.has_input(2);
  k.ForNest({k.Dim(x[0]), k.I64(frames), k.I64(bins)}, [&](const Idx& at) {
    llvm::Value* start =
        b.CreateAdd(b.CreateMul(at[0], k.I64(signal)), b.CreateMul(at[1], k.I64(step)));
    auto [re, im] = Transform(
        k, k.I64(length), at[2], length, -1.0,
        [&](llvm::Value* j) -> std::pair<llvm::Value*, llvm::Value*> {
          llvm::Value* src = b.CreateMul(b.CreateAdd(start, j), k.I64(comps));
          llvm::Value* w =
              windowed ? k.Convert(k.Load(d, k.in(2), j), d, DType::kFloat64) : nullptr;
          auto weigh = [&](llvm::Value* v) { return w == nullptr ? v : b.CreateFMul(v, w); };
          llvm::Value* xr = weigh(k.Convert(k.Load(d, k.in(0), src), d, DType::kFloat64));
          if (!complex) return {xr, nullptr};
          llvm::Value* xi =
              weigh(k.Convert(k.Load(d, k.in(0), b.CreateAdd(src, k.I64(1))), d, DType::kFloat64));
          return {xr, xi};
        });
    llvm::Value* dst = b.CreateMul(
        b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(at[0], k.I64(frames)), at[1]), k.I64(bins)),
                    at[2]),
        k.I64(2));
    k.Store(d, k.out(0), dst, k.Convert(re, DType::kFloat64, d));
    k.Store(d, k.out(0), b.CreateAdd(dst, k.I64(1)), k.Convert(im, DType::kFloat64, d));
  });
  return absl::OkStatus();
}

// MelWeightMatrix, as the ONNX reference builds it: num_mel_bins + 2 points equally spaced on
// the mel scale mel(f) = 2595 log10(1 + f / 700) from lower_edge_hertz to upper_edge_hertz (the
// edges and the step rounded to the edges' type), each mapped to the spectrogram bin
// floor((dft_length + 1) * f / sample_rate); mel band i is the triangle rising from point i to
// point i + 1 (value 1 there) and falling to point i + 2. A bin outside the spectrogram (or a
// sample_rate <= 0) fails the request with kEntryIndexOutOfBounds and is not written.
absl::Status MelWeightMatrix(KernelContext& k) {
  int64_t mel_bins = k.node().attr_int("num_mel_bins", 0);
  int64_t dft_length = k.node().attr_int("dft_length", 1);
  int64_t spectrum_bins = dft_length / 2 + 1;
  DType d = k.out_dtype(0);
  DType f64 = DType::kFloat64;
  DType edge = k.in_dtype(3) == DType::kFloat64 ? f64 : DType::kFloat32;
  auto& b = k.b();
  auto c = [&](double v) { return k.Const(f64, v); };
  auto scalar = [&](size_t i) {
    return k.Convert(k.Load(k.in_dtype(i), k.in(i), k.I64(0)), k.in_dtype(i), f64);
  };
  auto round_to_edge = [&](llvm::Value* v) {
    return k.Convert(k.Convert(v, f64, edge), edge, f64);
  };
  auto mel = [&](llvm::Value* hz) {
    llvm::Value* ratio = b.CreateFAdd(c(1), b.CreateFDiv(hz, c(700)));
    return round_to_edge(b.CreateFMul(c(2595), k.Intrinsic(llvm::Intrinsic::log10, ratio)));
  };
  llvm::Value* rate = scalar(2);
  llvm::Value* low = mel(scalar(3));
  llvm::Value* high = mel(scalar(4));
  llvm::Value* step =
      round_to_edge(b.CreateFDiv(b.CreateFSub(high, low), c(static_cast<double>(mel_bins + 2))));
  llvm::Value* rate_ok = b.CreateFCmpOGT(rate, c(0));
  k.FailIf(b.CreateNot(rate_ok), kEntryIndexOutOfBounds);
  // A bad sample rate writes zeros only.
  llvm::Value* bands = b.CreateSelect(rate_ok, k.I64(mel_bins), k.I64(0));
  llvm::Value* safe_rate = b.CreateSelect(rate_ok, rate, c(1));
  // Point p's bin, clamped into [-2^40, 2^40] before the integer conversion (so NaN and huge
  // values stay defined; any bin outside [0, spectrum_bins] is out of range anyway).
  auto point = [&](llvm::Value* p) {
    llvm::Value* m = b.CreateFAdd(b.CreateFMul(b.CreateSIToFP(p, b.getDoubleTy()), step), low);
    llvm::Value* hz = b.CreateFMul(
        c(700),
        b.CreateFSub(k.Intrinsic2(llvm::Intrinsic::pow, c(10), b.CreateFDiv(m, c(2595))), c(1)));
    llvm::Value* bin = k.Intrinsic(
        llvm::Intrinsic::floor,
        b.CreateFDiv(b.CreateFMul(c(static_cast<double>(dft_length + 1)), hz), safe_rate));
    bin = k.Intrinsic2(llvm::Intrinsic::maxnum, bin, c(-1099511627776.0));
    bin = k.Intrinsic2(llvm::Intrinsic::minnum, bin, c(1099511627776.0));
    return b.CreateFPToSI(bin, k.I64Ty());
  };
  k.Memset0(k.out(0), k.I64(spectrum_bins * mel_bins), d);
  llvm::Value* zero = k.I64(0);
  llvm::Value* rows = k.I64(spectrum_bins);
  auto outside = [&](llvm::Value* j) {
    return b.CreateOr(b.CreateICmpSLT(j, zero), b.CreateICmpSGE(j, rows));
  };
  auto put = [&](llvm::Value* j, llvm::Value* band, llvm::Value* value) {
    k.Store(d, k.out(0), b.CreateAdd(b.CreateMul(j, k.I64(mel_bins)), band),
            k.Convert(value, f64, d));
  };
  auto to_f64 = [&](llvm::Value* v) { return b.CreateSIToFP(v, b.getDoubleTy()); };
  k.For(k.I64(0), bands, [&](llvm::Value* i) {
    llvm::Value* left = point(i);
    llvm::Value* center = point(b.CreateAdd(i, k.I64(1)));
    llvm::Value* right = point(b.CreateAdd(i, k.I64(2)));
    // Rows [left, center] rise (or just center is 1), rows [center, right) fall: a non-empty
    // range reaching outside the spectrogram fails, and only rows inside it are visited.
    llvm::Value* peak = b.CreateICmpEQ(center, left);
    llvm::Value* rises = b.CreateICmpSLT(left, center);
    llvm::Value* falls = b.CreateICmpSLT(center, right);
    llvm::Value* bad = b.CreateAnd(peak, outside(center));
    bad = b.CreateOr(bad, b.CreateAnd(rises, b.CreateOr(outside(left), outside(center))));
    bad = b.CreateOr(bad,
                     b.CreateAnd(falls, b.CreateOr(outside(center), b.CreateICmpSGT(right, rows))));
    k.FailIf(bad, kEntryIndexOutOfBounds);
    auto clamp = [&](llvm::Value* j) {
      return k.Min(DType::kInt64, k.Max(DType::kInt64, j, zero), rows);
    };
    k.If(b.CreateAnd(peak, b.CreateNot(bad)), [&] { put(center, i, c(1)); });
    llvm::Value* rise = to_f64(b.CreateSub(center, left));
    llvm::Value* rise_begin = clamp(left);
    llvm::Value* rise_end = b.CreateSelect(rises, clamp(b.CreateAdd(center, k.I64(1))), rise_begin);
    k.For(rise_begin, rise_end,
          [&](llvm::Value* j) { put(j, i, b.CreateFDiv(to_f64(b.CreateSub(j, left)), rise)); });
    llvm::Value* fall = to_f64(b.CreateSub(right, center));
    k.For(clamp(center), clamp(right),
          [&](llvm::Value* j) { put(j, i, b.CreateFDiv(to_f64(b.CreateSub(right, j)), fall)); });
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterSignalKernels(OpTable& r) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"})
    r.DefineEmitter(op, Window);
  r.DefineEmitter("DFT", Dft);
  r.DefineEmitter("STFT", Stft);
  r.DefineEmitter("MelWeightMatrix", MelWeightMatrix);
}

}  // namespace cuvil::codegen
