// Code generation for the signal ops. A window is a cosine sum over n / N, with N = size for a
// periodic window and size - 1 for a symmetric one, evaluated in double and converted. DFT and
// STFT are direct O(n^2) transforms in double (the phase j * k is reduced modulo the length
// first so that long transforms keep their accuracy).
#include <algorithm>
#include <functional>
#include <numbers>
#include <utility>

#include "codegen/kernel_context.h"

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
  int64_t n_in = x[axis].coef;
  int64_t bins = k.out_shape(0)[axis].coef;
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
  int64_t signal = x[1].coef, frames = out[1].coef, bins = out[2].coef;
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

}  // namespace

void RegisterSignalKernels(OpTable& r) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"})
    r.DefineEmitter(op, Window);
  r.DefineEmitter("DFT", Dft);
  r.DefineEmitter("STFT", Stft);
}

}  // namespace cuvil::codegen
