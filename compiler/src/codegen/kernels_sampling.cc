// Code generation for the sampling ops, all arithmetic in double.
//
// GridSample follows PyTorch's grid_sampler (which ONNX does): grid coordinates in [-1, 1] are
// unnormalised to pixel coordinates; bilinear and nearest apply the padding mode to the
// coordinate, bicubic to each of its 16 taps; a tap outside the image contributes zero.
// RoiAlign averages (or takes the max of) bilinear samples on a regular grid in each output bin,
// as ONNX Runtime does; a batch index outside [0, N) fails the execution.
#include <array>
#include <cmath>

#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

class GridSampler {
 public:
  explicit GridSampler(KernelContext& k) : k_(k), b_(k.b()) {
    mode_ = k.node().attr_string("mode", "bilinear");
    padding_ = k.node().attr_string("padding_mode", "zeros");
    align_ = k.node().attr_int("align_corners", 0) != 0;
  }

  absl::Status Emit() {
    DType d = k_.in_dtype(0);
    const SymShape& x = k_.in_shape(0);
    const SymShape& out = k_.out_shape(0);
    // The image size may be symbolic (RAFT samples feature maps of H/8 x W/8): a static one
    // folds to the constants.
    h_ = k_.Dim(x[2]);
    w_ = k_.Dim(x[3]);
    hf_ = b_.CreateSIToFP(h_, b_.getDoubleTy());
    wf_ = b_.CreateSIToFP(w_, b_.getDoubleTy());
    llvm::Value* channels = k_.Dim(x[1]);
    llvm::Value* ho = k_.Dim(out[2]);
    llvm::Value* wo = k_.Dim(out[3]);
    llvm::Value* plane = b_.CreateMul(h_, w_);
    k_.ForNest({k_.Dim(x[0]), ho, wo}, [&](const Idx& at) {
      llvm::Value* g = b_.CreateMul(
          b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(at[0], ho), at[1]), wo), at[2]),
          k_.I64(2));
      llvm::Value* gx = k_.Convert(k_.Load(d, k_.in(1), g), d, DType::kFloat64);
      llvm::Value* gy =
          k_.Convert(k_.Load(d, k_.in(1), b_.CreateAdd(g, k_.I64(1))), d, DType::kFloat64);
      llvm::Value* ix = Unnormalize(gx, wf_);
      llvm::Value* iy = Unnormalize(gy, hf_);
      if (mode_ != "bicubic") {
        ix = Pad(ix, wf_);
        iy = Pad(iy, hf_);
      }
      k_.For(k_.I64(0), channels, [&](llvm::Value* ch) {
        llvm::Value* image = b_.CreateMul(b_.CreateAdd(b_.CreateMul(at[0], channels), ch), plane);
        llvm::Value* v = Sample(d, image, ix, iy);
        llvm::Value* dst = b_.CreateAdd(
            b_.CreateMul(
                b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(at[0], channels), ch), ho),
                             at[1]),
                wo),
            at[2]);
        k_.Store(d, k_.out(0), dst, k_.Convert(v, DType::kFloat64, d));
      });
    });
    return absl::OkStatus();
  }

 private:
  llvm::Value* F(double v) { return llvm::ConstantFP::get(b_.getDoubleTy(), v); }
  llvm::Value* Floor(llvm::Value* v) { return k_.Intrinsic(llvm::Intrinsic::floor, v); }
  llvm::Value* Clamp(llvm::Value* v, llvm::Value* lo, llvm::Value* hi) {
    return k_.Intrinsic2(llvm::Intrinsic::minnum, k_.Intrinsic2(llvm::Intrinsic::maxnum, v, lo),
                         hi);
  }
  llvm::Value* Clamp(llvm::Value* v, double lo, double hi) { return Clamp(v, F(lo), F(hi)); }

  // A coordinate in [-1, 1] to pixels along an axis of `size` (double) pixels.
  llvm::Value* Unnormalize(llvm::Value* c, llvm::Value* size) {
    llvm::Value* one = b_.CreateFAdd(c, F(1));
    if (align_) return b_.CreateFMul(b_.CreateFDiv(one, F(2)), b_.CreateFSub(size, F(1)));
    return b_.CreateFDiv(b_.CreateFSub(b_.CreateFMul(one, size), F(1)), F(2));
  }

  // Reflects c into [low, high] (given doubled, as PyTorch does), by repeated mirroring; 0 when
  // the range is empty.
  llvm::Value* Reflect(llvm::Value* c, llvm::Value* twice_low, llvm::Value* twice_high) {
    llvm::Value* min = b_.CreateFDiv(twice_low, F(2));
    llvm::Value* span = b_.CreateFDiv(b_.CreateFSub(twice_high, twice_low), F(2));
    llvm::Value* in = k_.Intrinsic(llvm::Intrinsic::fabs, b_.CreateFSub(c, min));
    llvm::Value* extra = b_.CreateFRem(in, span);
    llvm::Value* flips = ToIndex(Floor(b_.CreateFDiv(in, span)));
    llvm::Value* even = b_.CreateICmpEQ(b_.CreateAnd(flips, k_.I64(1)), k_.I64(0));
    llvm::Value* r = b_.CreateSelect(even, b_.CreateFAdd(extra, min),
                                     b_.CreateFAdd(b_.CreateFSub(span, extra), min));
    return b_.CreateSelect(b_.CreateFCmpOEQ(span, F(0)), F(0), r);
  }

  // The padding mode applied to a coordinate along an axis of `size` (double) pixels.
  llvm::Value* Pad(llvm::Value* c, llvm::Value* size) {
    llvm::Value* last = b_.CreateFSub(size, F(1));
    if (padding_ == "border") return Clamp(c, F(0), last);
    if (padding_ == "reflection") {
      llvm::Value* r = align_ ? Reflect(c, F(0), b_.CreateFMul(F(2), last))
                              : Reflect(c, F(-1), b_.CreateFSub(b_.CreateFMul(F(2), size), F(1)));
      return Clamp(r, F(0), last);
    }
    return c;
  }

  // X[image + y * W + x] as double, or 0 when (x, y) (i64) lies outside the image.
  llvm::Value* Tap(DType d, llvm::Value* image, llvm::Value* x, llvm::Value* y) {
    llvm::Value* inside =
        b_.CreateAnd(b_.CreateAnd(b_.CreateICmpSGE(x, k_.I64(0)), b_.CreateICmpSLT(x, w_)),
                     b_.CreateAnd(b_.CreateICmpSGE(y, k_.I64(0)), b_.CreateICmpSLT(y, h_)));
    llvm::Value* sx = b_.CreateSelect(inside, x, k_.I64(0));
    llvm::Value* sy = b_.CreateSelect(inside, y, k_.I64(0));
    llvm::Value* at = b_.CreateAdd(image, b_.CreateAdd(b_.CreateMul(sy, w_), sx));
    llvm::Value* v = k_.Convert(k_.Load(d, k_.in(0), at), d, DType::kFloat64);
    return b_.CreateSelect(inside, v, F(0));
  }

  llvm::Value* ToIndex(llvm::Value* c) {
    // Saturating, so NaN or huge coordinates stay defined (and land outside the image).
    return b_.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {k_.I64Ty(), c->getType()},
                              {Clamp(c, -1e9, 1e9)});
  }

  // Cubic convolution weights (A = -0.75) for taps at floor - 1 .. floor + 2.
  std::vector<llvm::Value*> CubicWeights(llvm::Value* t) {
    double a = -0.75;
    auto near = [&](llvm::Value* x) {  // ((A + 2) x - (A + 3)) x^2 + 1
      llvm::Value* p = b_.CreateFSub(b_.CreateFMul(F(a + 2), x), F(a + 3));
      return b_.CreateFAdd(b_.CreateFMul(b_.CreateFMul(p, x), x), F(1));
    };
    auto far = [&](llvm::Value* x) {  // ((A x - 5A) x + 8A) x - 4A
      llvm::Value* p = b_.CreateFSub(b_.CreateFMul(F(a), x), F(5 * a));
      p = b_.CreateFAdd(b_.CreateFMul(p, x), F(8 * a));
      return b_.CreateFSub(b_.CreateFMul(p, x), F(4 * a));
    };
    llvm::Value* inv = b_.CreateFSub(F(1), t);
    return {far(b_.CreateFAdd(t, F(1))), near(t), near(inv), far(b_.CreateFAdd(inv, F(1)))};
  }

  llvm::Value* Sample(DType d, llvm::Value* image, llvm::Value* ix, llvm::Value* iy) {
    if (mode_ == "nearest") {
      llvm::Value* rx = k_.Intrinsic(llvm::Intrinsic::rint, ix);
      llvm::Value* ry = k_.Intrinsic(llvm::Intrinsic::rint, iy);
      return Tap(d, image, ToIndex(rx), ToIndex(ry));
    }
    llvm::Value* fx = Floor(ix);
    llvm::Value* fy = Floor(iy);
    llvm::Value* tx = b_.CreateFSub(ix, fx);
    llvm::Value* ty = b_.CreateFSub(iy, fy);
    llvm::Value* x0 = ToIndex(fx);
    llvm::Value* y0 = ToIndex(fy);
    if (mode_ == "bilinear") {
      llvm::Value* x1 = b_.CreateAdd(x0, k_.I64(1));
      llvm::Value* y1 = b_.CreateAdd(y0, k_.I64(1));
      llvm::Value* ux = b_.CreateFSub(F(1), tx);
      llvm::Value* uy = b_.CreateFSub(F(1), ty);
      llvm::Value* v = b_.CreateFMul(Tap(d, image, x0, y0), b_.CreateFMul(ux, uy));
      v = b_.CreateFAdd(v, b_.CreateFMul(Tap(d, image, x1, y0), b_.CreateFMul(tx, uy)));
      v = b_.CreateFAdd(v, b_.CreateFMul(Tap(d, image, x0, y1), b_.CreateFMul(ux, ty)));
      return b_.CreateFAdd(v, b_.CreateFMul(Tap(d, image, x1, y1), b_.CreateFMul(tx, ty)));
    }
    std::vector<llvm::Value*> wx = CubicWeights(tx), wy = CubicWeights(ty);
    llvm::Value* v = F(0);
    for (int j = 0; j < 4; ++j) {
      for (int i = 0; i < 4; ++i) {
        // Each tap goes through the padding mode itself (as a coordinate), then the bounds check.
        llvm::Value* cx = b_.CreateFAdd(fx, F(i - 1));
        llvm::Value* cy = b_.CreateFAdd(fy, F(j - 1));
        llvm::Value* px = ToIndex(Pad(cx, wf_));
        llvm::Value* py = ToIndex(Pad(cy, hf_));
        v = b_.CreateFAdd(v, b_.CreateFMul(Tap(d, image, px, py), b_.CreateFMul(wx[i], wy[j])));
      }
    }
    return v;
  }

  KernelContext& k_;
  llvm::IRBuilder<>& b_;
  std::string mode_, padding_;
  bool align_ = false;
  llvm::Value* h_ = nullptr;  // The image's height and width, i64 and double.
  llvm::Value* w_ = nullptr;
  llvm::Value* hf_ = nullptr;
  llvm::Value* wf_ = nullptr;
};

absl::Status GridSample(KernelContext& k) { return GridSampler(k).Emit(); }

absl::Status RoiAlign(KernelContext& k) {
  DType d = k.in_dtype(0);
  auto& b = k.b();
  const ir::Node& n = k.node();
  const SymShape& x = k.in_shape(0);
  int64_t h = x[2].coef(), w = x[3].coef();
  int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1);
  int64_t ratio = n.attr_int("sampling_ratio", 0);
  double scale = n.attr_float("spatial_scale", 1.0f);
  bool half_pixel = n.attr_int(attr::kHalfPixel, 1) != 0;
  bool is_max = n.attr_string("mode", "avg") == "max";
  llvm::Type* f64 = b.getDoubleTy();
  auto f = [&](double v) { return llvm::ConstantFP::get(f64, v); };
  auto load = [&](size_t input, llvm::Value* i) {
    return k.Convert(k.Load(k.in_dtype(input), k.in(input), i), k.in_dtype(input), DType::kFloat64);
  };
  llvm::Value* batch = k.Dim(x[0]);
  llvm::Value* channels = k.Dim(x[1]);
  llvm::Value* acc = k.Scratch(f64);
  k.For(k.I64(0), k.Dim(k.in_shape(1)[0]), [&](llvm::Value* roi) {
    DType id = k.in_dtype(2);
    llvm::Value* image = k.Convert(k.Load(id, k.in(2), roi), id, DType::kInt64);
    llvm::Value* valid =
        b.CreateAnd(b.CreateICmpSGE(image, k.I64(0)), b.CreateICmpSLT(image, batch));
    k.FailIf(b.CreateNot(valid), kEntryIndexOutOfBounds);
    image = b.CreateSelect(valid, image, k.I64(0));
    llvm::Value* r4 = b.CreateMul(roi, k.I64(4));
    auto coord = [&](int i) {
      llvm::Value* v = b.CreateFMul(load(1, b.CreateAdd(r4, k.I64(i))), f(scale));
      return half_pixel ? b.CreateFSub(v, f(0.5)) : v;
    };
    llvm::Value *x0 = coord(0), *y0 = coord(1), *x1 = coord(2), *y1 = coord(3);
    llvm::Value* rw = b.CreateFSub(x1, x0);
    llvm::Value* rh = b.CreateFSub(y1, y0);
    if (!half_pixel) {
      rw = k.Intrinsic2(llvm::Intrinsic::maxnum, rw, f(1));
      rh = k.Intrinsic2(llvm::Intrinsic::maxnum, rh, f(1));
    }
    llvm::Value* bin_h = b.CreateFDiv(rh, f(static_cast<double>(oh)));
    llvm::Value* bin_w = b.CreateFDiv(rw, f(static_cast<double>(ow)));
    auto grid = [&](llvm::Value* bin) -> llvm::Value* {
      if (ratio > 0) return k.I64(ratio);
      llvm::Value* g = k.Intrinsic(llvm::Intrinsic::ceil, bin);
      // Saturating and bounded, so a huge or NaN roi cannot make an endless loop.
      g = k.Intrinsic2(llvm::Intrinsic::minnum, k.Intrinsic2(llvm::Intrinsic::maxnum, g, f(0)),
                       f(1 << 16));
      return b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {k.I64Ty(), f64}, {g});
    };
    llvm::Value* gh = grid(bin_h);
    llvm::Value* gw = grid(bin_w);
    llvm::Value* count = b.CreateSIToFP(k.Max(DType::kInt64, b.CreateMul(gh, gw), k.I64(1)), f64);
    k.ForNest({channels, k.I64(oh), k.I64(ow)}, [&](const Idx& at) {
      llvm::Value* plane =
          b.CreateMul(b.CreateAdd(b.CreateMul(image, channels), at[0]), k.I64(h * w));
      b.CreateStore(is_max ? f(-INFINITY) : f(0), acc);
      k.ForNest({gh, gw}, [&](const Idx& g) {
        auto sample_at = [&](llvm::Value* start, llvm::Value* bin, llvm::Value* cell,
                             llvm::Value* i, llvm::Value* n_grid) {
          llvm::Value* frac = b.CreateFDiv(b.CreateFAdd(b.CreateSIToFP(i, f64), f(0.5)),
                                           b.CreateSIToFP(n_grid, f64));
          return b.CreateFAdd(start,
                              b.CreateFMul(bin, b.CreateFAdd(b.CreateSIToFP(cell, f64), frac)));
        };
        llvm::Value* yy = sample_at(y0, bin_h, at[1], g[0], gh);
        llvm::Value* xx = sample_at(x0, bin_w, at[2], g[1], gw);
        llvm::Value* outside =
            b.CreateOr(b.CreateOr(b.CreateFCmpULT(yy, f(-1)), b.CreateFCmpUGT(yy, f(h))),
                       b.CreateOr(b.CreateFCmpULT(xx, f(-1)), b.CreateFCmpUGT(xx, f(w))));
        // Low and high taps per axis; at the last pixel both are that pixel.
        auto taps = [&](llvm::Value* c, int64_t size) {
          c = k.Intrinsic2(llvm::Intrinsic::minnum, k.Intrinsic2(llvm::Intrinsic::maxnum, c, f(0)),
                           f(size));
          llvm::Value* lo = b.CreateFPToSI(c, k.I64Ty());
          llvm::Value* at_end = b.CreateICmpSGE(lo, k.I64(size - 1));
          lo = b.CreateSelect(at_end, k.I64(size - 1), lo);
          llvm::Value* hi = b.CreateSelect(at_end, lo, b.CreateAdd(lo, k.I64(1)));
          c = b.CreateSelect(at_end, b.CreateSIToFP(lo, f64), c);
          llvm::Value* l = b.CreateFSub(c, b.CreateSIToFP(lo, f64));
          return std::array<llvm::Value*, 4>{lo, hi, b.CreateFSub(f(1), l), l};
        };
        auto [ylo, yhi, hy, ly] = taps(yy, h);
        auto [xlo, xhi, hx, lx] = taps(xx, w);
        auto v = [&](llvm::Value* yi, llvm::Value* xi) {
          return load(0, b.CreateAdd(plane, b.CreateAdd(b.CreateMul(yi, k.I64(w)), xi)));
        };
        llvm::Value* t1 = b.CreateFMul(b.CreateFMul(hy, hx), v(ylo, xlo));
        llvm::Value* t2 = b.CreateFMul(b.CreateFMul(hy, lx), v(ylo, xhi));
        llvm::Value* t3 = b.CreateFMul(b.CreateFMul(ly, hx), v(yhi, xlo));
        llvm::Value* t4 = b.CreateFMul(b.CreateFMul(ly, lx), v(yhi, xhi));
        llvm::Value* old = b.CreateLoad(f64, acc);
        llvm::Value* next;
        if (is_max) {
          llvm::Value* m =
              k.Intrinsic2(llvm::Intrinsic::maxnum, k.Intrinsic2(llvm::Intrinsic::maxnum, t1, t2),
                           k.Intrinsic2(llvm::Intrinsic::maxnum, t3, t4));
          next = k.Intrinsic2(llvm::Intrinsic::maxnum, old, b.CreateSelect(outside, f(0), m));
        } else {
          llvm::Value* sum = b.CreateFAdd(b.CreateFAdd(t1, t2), b.CreateFAdd(t3, t4));
          next = b.CreateFAdd(old, b.CreateSelect(outside, f(0), sum));
        }
        b.CreateStore(next, acc);
      });
      llvm::Value* result = b.CreateLoad(f64, acc);
      if (!is_max) result = b.CreateFDiv(result, count);
      llvm::Value* dst = b.CreateAdd(
          b.CreateMul(
              b.CreateAdd(b.CreateMul(b.CreateAdd(b.CreateMul(roi, channels), at[0]), k.I64(oh)),
                          at[1]),
              k.I64(ow)),
          at[2]);
      k.Store(d, k.out(0), dst, k.Convert(result, DType::kFloat64, d));
    });
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterSamplingKernels(OpTable& r) {
  r.DefineEmitter("GridSample", GridSample);
  r.DefineEmitter("RoiAlign", RoiAlign);
}

}  // namespace cuvil::codegen
