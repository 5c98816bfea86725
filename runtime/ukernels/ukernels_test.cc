// The convolution microkernels against a naive reference: odd sizes around the 6x16 tile, K
// around the K block, strides, dilations, padding, groups, depthwise, every epilogue, 1-2 threads.
#include "cuvil/runtime/ukernels.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "activation_reference.h"
#include "cuvil/runtime/parallel.h"
#include "gtest/gtest.h"
#include "qdepthwise_direct.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct Case {
  int64_t c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, groups;
};

// Runs one conv on every tier the CPU supports and checks each against a double reference; with
// `live_taps`, a packed conv runs on the live-tap kernel (CUVIL_UK_CONV_TAP_MAJOR).
void RunCase(const Case& k, int64_t batch, int64_t act, bool with_residual, int threads,
             bool live_taps = false) {
  SCOPED_TRACE(testing::Message() << "c=" << k.c << " h=" << k.h << " w=" << k.w << " m=" << k.m
                                  << " k=" << k.kh << "x" << k.kw << " s=" << k.sh << "," << k.sw
                                  << " d=" << k.dh << " pads=" << k.pt << "," << k.pl << "," << k.pb
                                  << "," << k.pr << " g=" << k.groups << " batch=" << batch
                                  << " act=" << act << " res=" << with_residual
                                  << " threads=" << threads << " live_taps=" << live_taps);
  const int64_t oh = (k.h + k.pt + k.pb - ((k.kh - 1) * k.dh + 1)) / k.sh + 1;
  const int64_t ow = (k.w + k.pl + k.pr - ((k.kw - 1) * k.dw + 1)) / k.sw + 1;
  const int64_t cg = k.c / k.groups, mg = k.m / k.groups, kk = cg * k.kh * k.kw;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  std::vector<float> x = fill(batch * k.c * k.h * k.w), w = fill(k.m * kk), bias = fill(k.m);
  std::vector<float> res = fill(batch * k.m * oh * ow);
  const float alpha = act == CUVIL_UK_ACT_CLIP ? -0.3f : 0.2f;
  const float beta = act == CUVIL_UK_ACT_CLIP ? 0.4f : 0.5f;

  std::vector<float> want(batch * k.m * oh * ow);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < k.m; ++m) {
      int64_t g = m / mg;
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t xo = 0; xo < ow; ++xo) {
          double s = bias[m];
          for (int64_t c = 0; c < cg; ++c) {
            for (int64_t ky = 0; ky < k.kh; ++ky) {
              for (int64_t kx = 0; kx < k.kw; ++kx) {
                int64_t iy = y * k.sh + ky * k.dh - k.pt, ix = xo * k.sw + kx * k.dw - k.pl;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                s += w[(m * cg + c) * k.kh * k.kw + ky * k.kw + kx] *
                     x[((n * k.c + g * cg + c) * k.h + iy) * k.w + ix];
              }
            }
          }
          int64_t o = ((n * k.m + m) * oh + y) * ow + xo;
          if (with_residual) s += res[o];
          want[o] = uk::ReferenceActivation(static_cast<float>(s), act, alpha, beta);
        }
      }
    }
  }

  cuvil_uk_conv_params p{k.c,  k.h,  k.w,  k.m,  oh,   ow,       k.kh, k.kw, k.sh,
                         k.sw, k.dh, k.dw, k.pt, k.pl, k.groups, act,  0};
  std::vector<float> wp;
  const float* wptr = w.data();
  if (k.groups == k.c && k.groups == k.m) {
    p.flags = CUVIL_UK_CONV_DEPTHWISE;
  } else {
    p.flags = CUVIL_UK_CONV_PACKED | (live_taps ? CUVIL_UK_CONV_TAP_MAJOR : 0);
    int64_t size = cuvil_uk_packed_conv_weights_size(k.groups, mg, kk);
    ASSERT_GT(size, 0);
    wp.resize(size);
    if (live_taps) {
      cuvil_uk_pack_conv_weights_tap_major(w.data(), k.groups, mg, cg, k.kh * k.kw, wp.data());
    } else {
      cuvil_uk_pack_conv_weights(w.data(), k.groups, mg, kk, wp.data());
    }
    wptr = wp.data();
  }
  for (const uk::Table* t : uk::SupportedTables()) {
    SCOPED_TRACE(t->name);
    std::vector<float> got(want.size(), 12345.0f);
    SetIntraOpThreads(threads);
    uk::Conv2d(*t, p, x.data(), wptr, bias.data(), with_residual ? res.data() : nullptr, got.data(),
               batch, alpha, beta);
    SetIntraOpThreads(1);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "at " << i;
    }
  }
}

TEST(UkernelsTest, TierIsNamed) {
  std::string tier = cuvil_uk_tier();
  EXPECT_TRUE(tier == "avx512" || tier == "avx2_fma" || tier == "generic") << tier;
  const char* forced = std::getenv("CUVIL_UK_TIER");
  if (forced == nullptr) {
    EXPECT_EQ(tier, uk::SupportedTables().front()->name);
  }
  EXPECT_EQ(std::string(uk::SupportedTables().back()->name), "generic");
}

// An empty output (a zero batch, or a map a small input shrinks to nothing, as a server's load
// probe of a shape-generic model sends) computes nothing, on every path and at two threads: the
// task plans used to divide by its zero tiles (SIGFPE loading googlenet with free H and W).
TEST(UkernelsTest, EmptyOutputComputesNothing) {
  SetIntraOpThreads(2);
  for (int64_t flags : {CUVIL_UK_CONV_PACKED, CUVIL_UK_CONV_DEPTHWISE, CUVIL_UK_CONV_WINOGRAD}) {
    for (int64_t batch : {0, 1}) {
      cuvil_uk_conv_params p{};
      p.channels = p.out_channels = p.groups = 8;
      if (flags != CUVIL_UK_CONV_DEPTHWISE) p.groups = 1;
      p.height = p.width = 2;
      p.out_height = batch == 0 ? 1 : 0;  // batch 1: a 0x1 output; batch 0: no image
      p.out_width = 1;
      p.kernel_h = p.kernel_w = 3;
      p.stride_h = p.stride_w = p.dilation_h = p.dilation_w = 1;
      p.flags = flags;
      // Null buffers: any read or write would crash.
      cuvil_uk_conv2d(&p, nullptr, nullptr, nullptr, nullptr, nullptr, batch, 0.0f, 0.0f);
    }
  }
  SetIntraOpThreads(1);
}

TEST(UkernelsTest, PointwiseEdgeSizes) {
  for (int64_t c : {1, 3, 17}) {
    for (int64_t m : {1, 5, 6, 7, 13}) {
      for (int64_t hw : {1, 4, 5}) {
        RunCase({c, hw, hw + 1, m, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, CUVIL_UK_ACT_NONE, false,
                1);
      }
    }
  }
}

TEST(UkernelsTest, LargeKCrossesTheKBlock) {
  RunCase({300, 5, 7, 8, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 2, CUVIL_UK_ACT_RELU, true, 2);
  RunCase({40, 9, 9, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_CLIP, true, 1);
}

TEST(UkernelsTest, WindowedConvs) {
  const Case cases[] = {
      {3, 11, 13, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},  // 3x3 same
      {4, 12, 12, 9, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1},  // 3x3 stride 2
      {3, 15, 15, 8, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},  // resnet stem
      {5, 9, 10, 6, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1},   // 1x1 stride 2 (downsample)
      {2, 10, 9, 3, 3, 2, 1, 3, 2, 1, 2, 0, 1, 2, 1},   // asymmetric everything
      {6, 8, 8, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 2},    // grouped, no padding
      {4, 5, 5, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},    // 1x1 with padding
      {2, 1, 1, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1},    // 1x1 image
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) RunCase(c, 2, CUVIL_UK_ACT_NONE, false, threads);
  }
}

// Strides whose taps read only some stride phases (the driver stores only those planes).
TEST(UkernelsTest, StridesThatSkipPhases) {
  const Case cases[] = {
      {5, 11, 13, 7, 1, 1, 3, 2, 1, 1, 0, 0, 0, 0, 1},  // 1x1 stride (3, 2): one of six phases
      {3, 17, 16, 6, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1},  // dilation = stride: phase (0, 0) only
      {4, 13, 18, 5, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1},  // dilation 2, stride 2
      {3, 16, 15, 4, 2, 2, 4, 3, 1, 1, 1, 0, 1, 1, 1},  // 2x2, stride (4, 3): two rows, two cols
      {6, 10, 12, 8, 1, 3, 2, 3, 1, 1, 0, 1, 0, 1, 2},  // grouped 1x3, stride (2, 3)
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) RunCase(c, 2, CUVIL_UK_ACT_RELU, true, threads);
  }
  // resnet18's downsample (6.4M multiply-adds): big enough to split over two threads.
  RunCase({64, 56, 56, 128, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1}, 1, CUVIL_UK_ACT_NONE, true, 2);
}

// Dilations as large as the map, as in DeepLab's ASPP: the outer taps read only padding and are
// cut off (the conv becomes 1x1 or 1x3), and partly live ones stay; also a tap dead on one side
// only, with a stride, and with the trimmed window starting inside the input (negative pad).
// Where the padded planes would be far wider than the output, the driver stores im2col rows.
TEST(UkernelsTest, DilatedTapsThatReadOnlyPadding) {
  const Case cases[] = {
      {6, 7, 7, 5, 3, 3, 1, 1, 12, 12, 12, 12, 12, 12, 1},  // every outer tap dead: 1x1
      {6, 7, 9, 5, 3, 3, 1, 1, 8, 4, 8, 4, 8, 4, 1},        // rows dead, columns live
      {4, 9, 9, 7, 3, 3, 2, 2, 10, 10, 10, 10, 10, 10, 1},  // with stride 2
      {5, 8, 8, 6, 3, 3, 1, 1, 9, 9, 9, 0, 9, 18, 1},       // left tap live, right dead
      {4, 6, 6, 6, 3, 3, 1, 1, 7, 7, 7, 7, 7, 7, 2},        // grouped
      {3, 5, 5, 4, 5, 5, 1, 1, 3, 3, 4, 4, 4, 4, 1},        // 5x5, dilation 3
      // Live taps but pads wide against the map: B is stored row by row (im2col).
      {4, 6, 6, 7, 3, 3, 1, 1, 4, 4, 4, 4, 4, 4, 1},            // dilation 4 over 6x6
      {4, 9, 9, 5, 3, 3, 2, 2, 3, 3, 3, 3, 3, 3, 1},            // with stride 2
      {6, 5, 7, 6, 3, 2, 1, 2, 2, 5, 3, 1, 2, 6, 3},            // asymmetric, grouped
      {40, 14, 14, 24, 3, 3, 1, 1, 12, 12, 12, 12, 12, 12, 1},  // ASPP's dilation 12, smaller
      {64, 12, 12, 96, 3, 3, 2, 2, 6, 6, 6, 6, 6, 6, 1},        // stride 2
      {64, 12, 13, 96, 3, 3, 2, 2, 6, 5, 6, 4, 7, 5, 1},        // stride 2, asymmetric pads
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) RunCase(c, 2, CUVIL_UK_ACT_RELU, true, threads);
  }
}

// The live-tap kernel (weights tap-major, each tap over the outputs it reads input for)
// on the geometries above: dilations wide against the map, strides, groups, asymmetric pads,
// borders whose every tap reads padding (the 1x1 with padding), and ASPP's layer at a size that
// splits over two threads, each with the epilogue and a residual.
TEST(UkernelsTest, LiveTapKernel) {
  const Case cases[] = {
      {6, 7, 7, 5, 3, 3, 1, 1, 12, 12, 12, 12, 12, 12, 1},      // only the centre tap live
      {6, 7, 9, 5, 3, 3, 1, 1, 8, 4, 8, 4, 8, 4, 1},            // rows dead, columns live
      {4, 9, 9, 7, 3, 3, 2, 2, 10, 10, 10, 10, 10, 10, 1},      // stride 2
      {5, 8, 8, 6, 3, 3, 1, 1, 9, 9, 9, 0, 9, 18, 1},           // left tap live, right dead
      {4, 6, 6, 6, 3, 3, 1, 1, 7, 7, 7, 7, 7, 7, 2},            // grouped
      {3, 5, 5, 4, 5, 5, 1, 1, 3, 3, 4, 4, 4, 4, 1},            // 5x5, dilation 3
      {6, 5, 7, 6, 3, 2, 1, 2, 2, 5, 3, 1, 2, 6, 3},            // asymmetric, grouped
      {3, 11, 13, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},          // 3x3 same: nine tap rectangles
      {4, 5, 5, 4, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},            // border reads only padding
      {3, 15, 15, 8, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1},          // resnet stem
      {64, 12, 13, 96, 3, 3, 2, 2, 6, 5, 6, 4, 7, 5, 1},        // stride 2, asymmetric pads
      {96, 14, 14, 40, 3, 3, 1, 1, 12, 12, 12, 12, 12, 12, 1},  // ASPP's dilation 12
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      RunCase(c, 2, CUVIL_UK_ACT_RELU, true, threads, /*live_taps=*/true);
      RunCase(c, 1, CUVIL_UK_ACT_CLIP, false, threads, /*live_taps=*/true);
    }
  }
}

TEST(UkernelsTest, Depthwise) {
  const Case cases[] = {
      {8, 13, 13, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8},
      {5, 14, 14, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5},
      {3, 20, 37, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 3},
      {3, 4, 4, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3},
      {4, 9, 45, 4, 3, 3, 2, 2, 1, 1, 1, 1, 0, 2, 4},   // stride 2, wide, asymmetric pads
      {2, 12, 35, 2, 3, 3, 1, 2, 2, 2, 2, 2, 2, 2, 2},  // dilation 2, stride (1, 2)
      {3, 11, 20, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3},  // stride (3, 1)
      {2, 3, 3, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 2},    // kernel wider than the image
      {2, 7, 7, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2},    // 7x7 plane (one item per row)
      {2, 10, 40, 2, 3, 3, 1, 3, 1, 1, 1, 1, 1, 1, 2},  // stride 3 in x: padded-copy path
      {2, 6, 40, 2, 1, 17, 1, 1, 1, 1, 0, 8, 0, 8, 2},  // 17 taps wide: padded-copy path
      {2, 15, 70, 2, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 2},  // stride 2, no padding
  };
  for (const Case& c : cases) {
    for (int64_t act = 0; act <= CUVIL_UK_ACT_SILU; ++act) RunCase(c, 2, act, act == 2, 2);
  }
}

// Every tier's unpadded plane kernel against a scalar reference: odd and tiny planes (one column
// block, partial blocks, interior blocks), both strides on each axis, every pad on each edge, a
// 5x5 and a dilated kernel. Nothing outside the output plane may be written.
TEST(UkernelsTest, DepthwisePlaneEveryTierEdgeSizes) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  constexpr int64_t kGuard = 32;
  struct Kernel {
    int64_t kh, kw, dh, dw;
  };
  const Kernel kernels[] = {{3, 3, 1, 1}, {5, 5, 1, 1}, {3, 3, 2, 2}, {1, 1, 1, 1}};
  int planes_checked = 0;
  for (const uk::Table* t : uk::SupportedTables()) {
    if (t->depthwise_plane == nullptr) continue;
    SCOPED_TRACE(t->name);
    for (const Kernel& k : kernels) {
      for (int64_t h : {1, 2, 5, 9, 17, 35}) {
        for (int64_t w : {1, 3, 7, 8, 9, 15, 16, 17, 23, 33, 41}) {
          for (int64_t s = 0; s < 4; ++s) {
            const int64_t sh = 1 + s / 2, sw = 1 + s % 2;
            // Per axis: symmetric "same" pads, only bottom/right, only top/left.
            for (int64_t pad = 0; pad < 9; ++pad) {
              const int64_t hy = (k.kh - 1) * k.dh / 2, hx = (k.kw - 1) * k.dw / 2;
              const int64_t pt = pad / 3 == 1 ? 0 : hy, pb = pad / 3 == 2 ? 0 : hy;
              const int64_t pl = pad % 3 == 1 ? 0 : hx, pr = pad % 3 == 2 ? 0 : hx;
              const int64_t oh = (h + pt + pb - ((k.kh - 1) * k.dh + 1)) / sh + 1;
              const int64_t ow = (w + pl + pr - ((k.kw - 1) * k.dw + 1)) / sw + 1;
              if (oh <= 0 || ow <= 0) continue;
              SCOPED_TRACE(testing::Message()
                           << "k=" << k.kh << "x" << k.kw << " d=" << k.dh << " h=" << h
                           << " w=" << w << " s=" << sh << "," << sw << " pads=" << pt << "," << pl
                           << "," << pb << "," << pr);
              std::vector<float> x(h * w), wt(k.kh * k.kw), res(oh * ow);
              for (float& v : x) v = dist(rng);
              for (float& v : wt) v = dist(rng);
              for (float& v : res) v = dist(rng);
              const float bias = dist(rng);
              cuvil_uk_conv_params p{1,
                                     h,
                                     w,
                                     1,
                                     oh,
                                     ow,
                                     k.kh,
                                     k.kw,
                                     sh,
                                     sw,
                                     k.dh,
                                     k.dw,
                                     pt,
                                     pl,
                                     1,
                                     0,
                                     CUVIL_UK_CONV_DEPTHWISE};
              for (int64_t act : {CUVIL_UK_ACT_NONE, CUVIL_UK_ACT_CLIP, CUVIL_UK_ACT_SIGMOID,
                                  CUVIL_UK_ACT_SILU}) {
                for (bool with_res : {false, true}) {
                  p.activation = act;
                  const uk::Epilogue ep{nullptr, nullptr, act,
                                        act == CUVIL_UK_ACT_CLIP ? 0.0f : 0.2f,
                                        act == CUVIL_UK_ACT_CLIP ? 0.6f : 0.5f};
                  std::vector<float> got(oh * ow + 2 * kGuard, 7.0f);
                  ASSERT_TRUE(t->depthwise_plane(p, x.data(), wt.data(), bias,
                                                 with_res ? res.data() : nullptr,
                                                 got.data() + kGuard, ep));
                  ++planes_checked;
                  for (int64_t i = 0; i < kGuard; ++i) {
                    ASSERT_EQ(got[i], 7.0f) << "written before the plane at " << i;
                    ASSERT_EQ(got[kGuard + oh * ow + i], 7.0f) << "written past the plane at " << i;
                  }
                  for (int64_t oy = 0; oy < oh; ++oy) {
                    for (int64_t ox = 0; ox < ow; ++ox) {
                      double acc = bias;
                      for (int64_t ky = 0; ky < k.kh; ++ky) {
                        for (int64_t kx = 0; kx < k.kw; ++kx) {
                          const int64_t iy = oy * sh + ky * k.dh - pt,
                                        ix = ox * sw + kx * k.dw - pl;
                          if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                          acc += double{wt[ky * k.kw + kx]} * x[iy * w + ix];
                        }
                      }
                      if (with_res) acc += res[oy * ow + ox];
                      const float e =
                          uk::ReferenceActivation(static_cast<float>(acc), act, ep.alpha, ep.beta);
                      ASSERT_NEAR(got[kGuard + oy * ow + ox], e, 1e-5f * (1.0f + std::fabs(e)))
                          << "act=" << act << " res=" << with_res << " at " << oy << "," << ox;
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  // This host's best tier is AVX2 or AVX-512, and both have the plane kernel.
  if (std::string(uk::SupportedTables().front()->name) != "generic") {
    EXPECT_GT(planes_checked, 0);
  }
}

// MobileNet's depthwise layers through the driver: channel counts that are not a multiple of 8,
// 112x112 stride 2, 56x56 and 7x7 stride 1, Clip with a residual and Relu, 1 and 2 threads (the
// first two are big enough for the driver to split their channels over both threads).
TEST(UkernelsTest, DepthwiseMobileNetShapes) {
  const Case cases[] = {
      {45, 112, 112, 45, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 45},  // stride 2, even size
      {61, 56, 56, 61, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 61},    // stride 1
      {19, 7, 7, 19, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 19},      // plane narrower than a vector
      {11, 29, 31, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 11},    // odd sizes, stride 2
      {9, 15, 15, 9, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 9},       // TF-style pads (bottom/right)
  };
  for (const Case& c : cases) {
    for (int threads : {1, 2}) {
      RunCase(c, 2, CUVIL_UK_ACT_CLIP, true, threads);
      RunCase(c, 1, CUVIL_UK_ACT_RELU, false, threads);
    }
  }
}

TEST(UkernelsTest, EveryEpilogue) {
  for (int64_t act = 0; act <= CUVIL_UK_ACT_SILU; ++act) {
    for (bool res : {false, true}) {
      RunCase({7, 6, 7, 11, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, act, res, 1);
      RunCase({7, 6, 7, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, act, res, 1);
    }
  }
}

// Every tier's tile against a scalar reference at every partial size, with and without
// accumulation and the epilogue.
TEST(UkernelsTest, TileEveryTierEverySize) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  constexpr int64_t kLd = 80, kStride = 100;
  for (const uk::Table* t : uk::SupportedTables()) {
    SCOPED_TRACE(t->name);
    ASSERT_LE(t->nr, kLd);
    for (int64_t kc : {1, 2, 31}) {
      std::vector<float> a(kc * uk::kMR), b(kc * kStride), bias(uk::kMR), res(uk::kMR * kLd);
      for (float& v : a) v = dist(rng);
      for (float& v : b) v = dist(rng);
      for (float& v : bias) v = dist(rng);
      for (float& v : res) v = dist(rng);
      std::vector<int64_t> off(kc);
      for (int64_t k = 0; k < kc; ++k) off[k] = k * kStride + (k % 3);
      for (int64_t mr = 1; mr <= uk::kMR; ++mr) {
        for (int64_t nr = 1; nr <= t->nr; ++nr) {
          for (int64_t act = -1; act <= CUVIL_UK_ACT_SILU; ++act) {
            // act -1: no epilogue at all; with one, the residual is used on every other (nr, act).
            uk::Epilogue ep{bias.data(), (nr + act) % 2 == 1 ? res.data() : nullptr, act, 0.2f,
                            0.5f};
            if (act == CUVIL_UK_ACT_CLIP) ep.alpha = -0.3f, ep.beta = 0.4f;
            const uk::Epilogue* epp = act < 0 ? nullptr : &ep;
            const bool accumulate = (mr + nr + kc) % 2 == 0;
            std::vector<float> got(uk::kMR * kLd, 1.0f), want = got;
            t->gemm_tile(kc, a.data(), b.data(), off.data(), got.data(), kLd, mr, nr, accumulate,
                         epp);
            for (int64_t r = 0; r < mr; ++r) {
              for (int64_t j = 0; j < nr; ++j) {
                double s = accumulate ? want[r * kLd + j] : 0.0;
                for (int64_t k = 0; k < kc; ++k) s += a[k * uk::kMR + r] * b[off[k] + j];
                if (epp != nullptr) {
                  s += bias[r];
                  if (ep.residual != nullptr) s += res[r * kLd + j];
                  s = uk::ReferenceActivation(static_cast<float>(s), act, ep.alpha, ep.beta);
                }
                want[r * kLd + j] = static_cast<float>(s);
              }
            }
            for (size_t i = 0; i < got.size(); ++i) {
              ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i])))
                  << "kc=" << kc << " mr=" << mr << " nr=" << nr << " act=" << act << " at " << i;
            }
          }
        }
      }
    }
  }
}

// The row kernels at every length up to a few vectors, so each tail is exercised.
TEST(UkernelsTest, RowsEveryTierEveryLength) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  constexpr int64_t kMax = 100, kTaps = 9;
  std::vector<float> src(kMax + 64), res(kMax), wt(kTaps);
  for (float& v : src) v = dist(rng);
  for (float& v : res) v = dist(rng);
  for (float& v : wt) v = dist(rng);
  std::vector<int64_t> off(kTaps);
  for (int64_t t = 0; t < kTaps; ++t) off[t] = t * 7;
  for (const uk::Table* t : uk::SupportedTables()) {
    SCOPED_TRACE(t->name);
    for (int64_t act = 0; act <= CUVIL_UK_ACT_SILU; ++act) {
      const uk::Epilogue ep{nullptr, nullptr, act, act == CUVIL_UK_ACT_CLIP ? -0.3f : 0.2f,
                            act == CUVIL_UK_ACT_CLIP ? 0.4f : 0.5f};
      for (int64_t n = 0; n <= kMax; ++n) {
        for (bool with_res : {false, true}) {
          const float* r = with_res ? res.data() : nullptr;
          std::vector<float> got(kMax + 1, 7.0f), dw(kMax + 1, 7.0f);
          t->epilogue_row(got.data(), src.data(), n, 0.25f, r, ep);
          t->depthwise_row(dw.data(), src.data(), off.data(), wt.data(), kTaps, n, 0.25f, r, ep);
          for (int64_t i = 0; i <= kMax; ++i) {
            if (i == n) {  // nothing past n is written
              ASSERT_EQ(got[i], 7.0f);
              ASSERT_EQ(dw[i], 7.0f);
              break;
            }
            float e = uk::ReferenceActivation(src[i] + 0.25f + (with_res ? res[i] : 0.0f), act,
                                              ep.alpha, ep.beta);
            ASSERT_NEAR(got[i], e, 1e-5f) << "epilogue n=" << n << " act=" << act << " at " << i;
            double d = 0.25;
            for (int64_t k = 0; k < kTaps; ++k) d += wt[k] * src[off[k] + i];
            if (with_res) d += res[i];
            e = uk::ReferenceActivation(static_cast<float>(d), act, ep.alpha, ep.beta);
            ASSERT_NEAR(dw[i], e, 1e-4f) << "depthwise n=" << n << " act=" << act << " at " << i;
          }
        }
      }
    }
  }
}

// Sigmoid and SiLU run on each tier's own exp (a polynomial on AVX2 and AVX-512): over the whole
// float range that matters, including where exp(-x) overflows or underflows, they stay within a
// few ulp of the libm definition (absolutely within 1e-35 where exp(-x) passes e^87, which the
// tiers clamp to).
TEST(UkernelsTest, SigmoidAndSiluAcrossTheFloatRange) {
  std::vector<float> src;
  for (float x = -120.0f; x <= 120.0f; x += 0.0371f) src.push_back(x);
  for (float x : {0.0f, -0.0f, 1e-30f, -1e-30f, 87.5f, -87.5f, 88.7f, -88.7f, 1e30f, -1e30f}) {
    src.push_back(x);
  }
  const int64_t n = static_cast<int64_t>(src.size());
  for (const uk::Table* t : uk::SupportedTables()) {
    SCOPED_TRACE(t->name);
    for (int64_t act : {CUVIL_UK_ACT_SIGMOID, CUVIL_UK_ACT_SILU}) {
      const uk::Epilogue ep{nullptr, nullptr, act, 0.0f, 0.0f};
      std::vector<float> got(src.size());
      t->epilogue_row(got.data(), src.data(), n, 0.0f, nullptr, ep);
      for (int64_t i = 0; i < n; ++i) {
        const double x = src[i], sig = 1.0 / (1.0 + std::exp(-x));
        const double want = act == CUVIL_UK_ACT_SILU ? x * sig : sig;
        ASSERT_NEAR(got[i], want, 4e-7 * std::fabs(want) + 1e-35)
            << "act=" << act << " x=" << src[i];
      }
    }
  }
}

// Big enough for the driver to use a second thread (it keeps small convs on one).
TEST(UkernelsTest, TwoThreadsShareBigConvs) {
  RunCase({48, 30, 30, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 2, CUVIL_UK_ACT_RELU, true, 2);
  RunCase({512, 40, 40, 512, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 512}, 1, CUVIL_UK_ACT_CLIP, true, 2);
}

// Shapes of the zoo's deep layers: few columns, many channels, K over several blocks.
TEST(UkernelsTest, SmallSpatialManyChannels) {
  RunCase({96, 7, 7, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_RELU, true, 1);
  RunCase({64, 14, 14, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1}, 2, CUVIL_UK_ACT_NONE, false, 2);
  RunCase({160, 7, 7, 50, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 3, CUVIL_UK_ACT_CLIP, true, 2);
  RunCase({24, 14, 14, 36, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, CUVIL_UK_ACT_HARDSWISH, false, 1);
  RunCase({8, 9, 70, 12, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2}, 1, CUVIL_UK_ACT_NONE, false, 2);
}

// 1x1 convs whose rows of tiles end in a few columns past whole vectors (the AVX-512 tier computes
// those as column vectors): MobileNet's 7x7 (49 = 3 * 16 + 1) and 14x14 (196 = 3 * 64 + 4) layers,
// K within and across the K block (accumulated passes), every epilogue, 1-2 threads, batch 1-2.
TEST(UkernelsTest, PointwiseColumnTails) {
  for (int64_t hw : {1, 2, 3, 4, 17, 19, 20, 35, 49, 52, 196}) {
    for (int64_t c : {5, 160, 300}) {
      const int64_t h = hw == 49 ? 7 : (hw == 196 ? 14 : 1);
      const int64_t m = c == 160 ? 50 : 13;
      for (int64_t act = 0; act <= CUVIL_UK_ACT_SILU; ++act) {
        RunCase({c, h, hw / h, m, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1 + act % 2, act, act % 3 == 1,
                1 + (act + hw) % 2);
      }
    }
  }
  // MobileNet v2's 7x7 project and expand layers as they run.
  RunCase({960, 7, 7, 160, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, CUVIL_UK_ACT_NONE, true, 2);
  RunCase({160, 7, 7, 960, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, CUVIL_UK_ACT_CLIP, false, 1);
  RunCase({64, 14, 14, 384, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, CUVIL_UK_ACT_CLIP, false, 2);
}

}  // namespace
}  // namespace cuvil

namespace cuvil {
namespace {

// QuantizeLinear's formula, written plainly.
int32_t ReferenceQuantize(float v, float scale, int32_t zero, bool is_signed) {
  const int32_t lo = is_signed ? -128 : 0, hi = is_signed ? 127 : 255;
  if (std::isnan(v)) return lo;
  const double q = std::nearbyint(static_cast<double>(v / scale)) + zero;
  return static_cast<int32_t>(std::clamp<double>(q, lo, hi));
}

TEST(UkernelsTest, QuantizeRowEveryTierTiesSaturationAndNaN) {
  const std::vector<float> v = {0.5f,      1.5f, 2.5f,  -0.5f, -1.5f,  1e9f,   -1e9f,  INFINITY,
                                -INFINITY, NAN,  0.24f, 0.26f, 126.5f, 127.5f, -128.5f};
  for (const uk::Table* t : uk::SupportedTables()) {
    SCOPED_TRACE(t->name);
    for (const bool is_signed : {false, true}) {
      for (const int32_t zero : {0, 3, is_signed ? -7 : 200}) {
        std::vector<uint8_t> got(v.size());
        t->quantize_row(v.data(), static_cast<int64_t>(v.size()), 1.0f, zero, is_signed,
                        got.data());
        for (size_t i = 0; i < v.size(); ++i) {
          const int32_t g = is_signed ? static_cast<int8_t>(got[i]) : got[i];
          EXPECT_EQ(g, ReferenceQuantize(v[i], 1.0f, zero, is_signed))
              << "v=" << v[i] << " zero=" << zero << " signed=" << is_signed;
        }
      }
    }
    const std::vector<int8_t> q = {-128, -1, 0, 1, 127};
    std::vector<float> back(q.size());
    t->dequantize_row(q.data(), true, 5, 0.5f, -2, back.data());
    EXPECT_EQ(back, (std::vector<float>{-63.0f, 0.5f, 1.0f, 1.5f, 64.5f}));
  }
}

// The fused 8-bit depthwise conv equals dequantize -> float depthwise conv -> quantize on every
// tier, bit for bit: uint8 and int8 on each side, both strides, an activation, outputs that
// saturate at both ends; planes with only border row blocks, with interior ones (41 rows) and
// with several column blocks (37, 64 columns).
TEST(UkernelsTest, QuantizedDepthwiseEqualsDequantizeConvQuantize) {
  std::mt19937 rng(5);
  const int64_t batch = 2, c = 6;
  const std::pair<int64_t, int64_t> sizes[] = {{13, 17}, {41, 37}, {20, 64}};
  for (const auto& [h, w] : sizes) {
    for (const int64_t stride : {1, 2}) {
      const int64_t oh = (h + 2 - 3) / stride + 1, ow = (w + 2 - 3) / stride + 1;
      cuvil_uk_conv_params p{c,
                             h,
                             w,
                             c,
                             oh,
                             ow,
                             3,
                             3,
                             stride,
                             stride,
                             1,
                             1,
                             1,
                             1,
                             c,
                             CUVIL_UK_ACT_CLIP,
                             CUVIL_UK_CONV_DEPTHWISE};
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> wt(c * 9), bias(c);
      for (float& x : wt) x = dist(rng);
      for (float& x : bias) x = dist(rng);
      for (const bool x_signed : {false, true}) {
        for (const bool y_signed : {false, true}) {
          SCOPED_TRACE(testing::Message() << "h=" << h << " w=" << w << " stride=" << stride
                                          << " x_signed=" << x_signed << " y_signed=" << y_signed);
          std::vector<uint8_t> x(batch * c * h * w);
          for (uint8_t& b : x) b = static_cast<uint8_t>(rng());
          const float x_scale = 0.05f, y_scale = 0.01f;  // Outputs beyond +-1.28 saturate.
          const int32_t x_zero = x_signed ? -3 : 130, y_zero = y_signed ? 5 : 120;
          std::vector<float> xf(x.size());
          for (size_t i = 0; i < x.size(); ++i) {
            const int32_t q = x_signed ? static_cast<int8_t>(x[i]) : x[i];
            xf[i] = static_cast<float>(q - x_zero) * x_scale;
          }
          for (const uk::Table* t : uk::SupportedTables()) {
            SCOPED_TRACE(t->name);
            std::vector<float> yf(batch * c * oh * ow);
            uk::Conv2d(*t, p, xf.data(), wt.data(), bias.data(), nullptr, yf.data(), batch, -1.5f,
                       1.5f);
            std::vector<uint8_t> got(yf.size(), 77);
            uk::QDepthwise2d(*t, p, x.data(), x_signed, x_scale, x_zero, wt.data(), bias.data(),
                             got.data(), y_signed, y_scale, y_zero, batch, -1.5f, 1.5f);
            int saturated = 0;
            for (size_t i = 0; i < yf.size(); ++i) {
              const int32_t want = ReferenceQuantize(yf[i], y_scale, y_zero, y_signed);
              const int32_t g = y_signed ? static_cast<int8_t>(got[i]) : got[i];
              ASSERT_EQ(g, want) << "element " << i << " float " << yf[i];
              saturated += want == (y_signed ? -128 : 0) || want == (y_signed ? 127 : 255);
            }
            EXPECT_GT(saturated, 0);
          }
        }
      }
    }
  }
}

// The 8-bit plane kernel's contract: it declines (returns false, writes nothing) geometry and
// activations it does not compute, and a plane it computes writes exactly its output bytes.
// The microcontroller build's depthwise (qdepthwise_direct.h) writes what the generic tier's
// dequantize -> depthwise -> quantize writes, bit for bit, for every geometry the fusion can
// produce: strides, dilations, kernel sizes, asymmetric and oversized padding, both 8-bit types
// and every activation.
TEST(UkernelsTest, DirectQuantizedDepthwisePlaneEqualsTheGenericTier) {
  std::mt19937 rng(44);
  struct Geometry {
    int64_t h, w, kh, kw, stride_h, stride_w, dil_h, dil_w, pad_top, pad_left, pad_bottom,
        pad_right;
  };
  const Geometry geometries[] = {
      {25, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   // the keyword-spotting DS-CNN's
      {13, 17, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},  // stride 2
      {12, 11, 3, 3, 1, 2, 1, 1, 0, 1, 2, 0},  // asymmetric stride and padding
      {9, 10, 5, 5, 1, 1, 2, 2, 4, 4, 4, 4},   // 5x5, dilation 2
      {7, 8, 3, 3, 1, 1, 2, 1, 2, 1, 2, 1},    // dilated rows only
      {4, 3, 3, 3, 1, 1, 1, 1, 3, 3, 3, 3},    // padding wider than the input
      {1, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    // one pixel
      {6, 6, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},    // 1x1
  };
  const int64_t activations[] = {CUVIL_UK_ACT_NONE,        CUVIL_UK_ACT_RELU,
                                 CUVIL_UK_ACT_CLIP,        CUVIL_UK_ACT_HARDSWISH,
                                 CUVIL_UK_ACT_HARDSIGMOID, CUVIL_UK_ACT_SIGMOID};
  const int64_t c = 3, batch = 2;
  int compared = 0;
  for (const Geometry& g : geometries) {
    const int64_t oh =
        (g.h + g.pad_top + g.pad_bottom - ((g.kh - 1) * g.dil_h + 1)) / g.stride_h + 1;
    const int64_t ow =
        (g.w + g.pad_left + g.pad_right - ((g.kw - 1) * g.dil_w + 1)) / g.stride_w + 1;
    for (const int64_t act : activations) {
      for (const bool x_signed : {false, true}) {
        const bool y_signed = !x_signed;
        SCOPED_TRACE(testing::Message() << "h=" << g.h << " w=" << g.w << " k=" << g.kh << "x"
                                        << g.kw << " act=" << act << " x_signed=" << x_signed);
        cuvil_uk_conv_params p{};
        p.channels = p.out_channels = p.groups = c;
        p.height = g.h;
        p.width = g.w;
        p.out_height = oh;
        p.out_width = ow;
        p.kernel_h = g.kh;
        p.kernel_w = g.kw;
        p.stride_h = g.stride_h;
        p.stride_w = g.stride_w;
        p.dilation_h = g.dil_h;
        p.dilation_w = g.dil_w;
        p.pad_top = g.pad_top;
        p.pad_left = g.pad_left;
        p.activation = act;
        p.flags = CUVIL_UK_CONV_DEPTHWISE;
        std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
        std::vector<float> wt(c * g.kh * g.kw), bias(c);
        for (float& v : wt) v = dist(rng);
        for (float& v : bias) v = dist(rng);
        std::vector<uint8_t> x(batch * c * g.h * g.w);
        for (uint8_t& b : x) b = static_cast<uint8_t>(rng());
        const float x_scale = 0.04f, y_scale = 0.015f,
                    alpha = act == CUVIL_UK_ACT_CLIP ? -1.0f : 0.2f,
                    beta = act == CUVIL_UK_ACT_CLIP ? 1.25f : 0.5f;
        const int32_t x_zero = x_signed ? 4 : 125, y_zero = y_signed ? -6 : 131;
        std::vector<uint8_t> want(batch * c * oh * ow, 7), got(want.size(), 9);
        uk::QDepthwise2d(uk::GenericTable(), p, x.data(), x_signed, x_scale, x_zero, wt.data(),
                         bias.data(), want.data(), y_signed, y_scale, y_zero, batch, alpha, beta);
        const uk::QuantizedPlane q{x_signed, x_scale, x_zero, y_signed, y_scale, y_zero};
        const uk::Epilogue ep{nullptr, nullptr, act, alpha, beta};
        const int64_t floats = uk::QDepthwisePlaneDirectScratchFloats(p);
        ASSERT_GT(floats, 0);
        std::vector<float> scratch(floats);
        for (int64_t i = 0; i < batch * c; ++i) {
          uk::QDepthwisePlaneDirect(p, x.data() + i * g.h * g.w, wt.data() + (i % c) * g.kh * g.kw,
                                    bias[i % c], got.data() + i * oh * ow, q, ep, scratch.data(),
                                    /*padded=*/i > 0);
        }
        ASSERT_EQ(got, want);
        ++compared;
      }
    }
  }
  EXPECT_EQ(compared, 8 * 6 * 2);
}

TEST(UkernelsTest, QuantizedDepthwisePlaneDeclinesWhatItCannotComputeAndStaysInItsPlane) {
  constexpr int64_t kGuard = 64;
  const int64_t h = 11, w = 19;
  std::vector<uint8_t> x(h * w);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 37);
  const std::vector<float> wt(25, 0.1f);
  const uk::QuantizedPlane q{false, 0.05f, 128, false, 0.02f, 128};
  struct Geometry {
    int64_t k, stride, dilation, activation;
    bool computed;
  };
  const Geometry geometries[] = {
      {3, 1, 1, CUVIL_UK_ACT_RELU, true},  {3, 2, 1, CUVIL_UK_ACT_NONE, true},
      {5, 1, 1, CUVIL_UK_ACT_NONE, false}, {3, 1, 2, CUVIL_UK_ACT_NONE, false},
      {3, 3, 1, CUVIL_UK_ACT_NONE, false}, {3, 1, 1, CUVIL_UK_ACT_SIGMOID, false},
      {3, 1, 1, CUVIL_UK_ACT_SILU, false},
  };
  int checked = 0;
  for (const uk::Table* t : uk::SupportedTables()) {
    if (t->qdepthwise_plane == nullptr) continue;
    SCOPED_TRACE(t->name);
    for (const Geometry& g : geometries) {
      SCOPED_TRACE(testing::Message() << "k=" << g.k << " stride=" << g.stride
                                      << " dilation=" << g.dilation << " act=" << g.activation);
      const int64_t pad = (g.k - 1) * g.dilation / 2;
      const int64_t span = (g.k - 1) * g.dilation + 1;
      const int64_t oh = (h + 2 * pad - span) / g.stride + 1;
      const int64_t ow = (w + 2 * pad - span) / g.stride + 1;
      cuvil_uk_conv_params p{};
      p.channels = p.out_channels = p.groups = 1;
      p.height = h;
      p.width = w;
      p.out_height = oh;
      p.out_width = ow;
      p.kernel_h = p.kernel_w = g.k;
      p.stride_h = p.stride_w = g.stride;
      p.dilation_h = p.dilation_w = g.dilation;
      p.pad_top = p.pad_left = pad;
      p.activation = g.activation;
      p.flags = CUVIL_UK_CONV_DEPTHWISE;
      const uk::Epilogue ep{nullptr, nullptr, g.activation, 0.0f, 0.0f};
      std::vector<uint8_t> y(oh * ow + 2 * kGuard, 0xA5);
      const bool ran = t->qdepthwise_plane(p, x.data(), wt.data(), 0.0f, y.data() + kGuard, q, ep);
      EXPECT_EQ(ran, g.computed);
      for (int64_t i = 0; i < kGuard; ++i) {
        ASSERT_EQ(y[i], 0xA5) << "written before the plane at " << i;
        ASSERT_EQ(y[kGuard + oh * ow + i], 0xA5) << "written past the plane at " << i;
      }
      int64_t untouched = 0;
      for (int64_t i = 0; i < oh * ow; ++i) untouched += y[kGuard + i] == 0xA5;
      if (ran) {
        EXPECT_LT(untouched, oh * ow / 4);
      } else {
        EXPECT_EQ(untouched, oh * ow);
      }
      ++checked;
    }
  }
  // AVX-512 hosts (this project's benchmark host) have the kernel; others skip the checks.
  if (std::string(uk::SupportedTables().front()->name) == "avx512") EXPECT_GT(checked, 0);
}

// max_stride2_row on every tier against a scalar reference: lengths around the 16-lane block,
// windows of 1-4 taps, NaN at every place of a window (in first and later taps), and no read past
// the row's last tap (the row ends against an inaccessible page, so an over-read faults).
TEST(UkernelsTest, MaxStride2RowMatchesReferenceAndReadsOnlyItsTaps) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t bytes = 2 * page;
  void* map = mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  ASSERT_EQ(mprotect(static_cast<char*>(map) + bytes, bytes, PROT_NONE), 0);
  float* end = reinterpret_cast<float*>(static_cast<char*>(map) + bytes);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  int compared = 0;
  for (const uk::Table* t : uk::SupportedTables()) {
    ASSERT_NE(t->max_stride2_row, nullptr) << t->name;
    SCOPED_TRACE(t->name);
    for (int64_t kw = 1; kw <= 4; ++kw) {
      for (int64_t n : {1, 2, 7, 15, 16, 17, 31, 32, 33, 55, 64}) {
        SCOPED_TRACE(testing::Message() << "kw=" << kw << " n=" << n);
        const int64_t len = 2 * (n - 1) + kw;
        float* src = end - len;  // the last tap's float is the page's last
        for (int64_t i = 0; i < len; ++i) src[i] = dist(rng);
        // NaN places: none, then one at a time across the first two windows and the last one.
        std::vector<int64_t> places = {-1};
        for (int64_t i = 0; i < std::min<int64_t>(len, 2 + kw); ++i) places.push_back(i);
        places.push_back(len - 1);
        for (int64_t at : places) {
          const float saved = at >= 0 ? src[at] : 0.0f;
          if (at >= 0) src[at] = nan;
          std::vector<float> want(n), got(n + 1, 12345.0f);
          for (int64_t j = 0; j < n; ++j) {
            float m = src[2 * j];
            for (int64_t k = 1; k < kw; ++k) {
              const float v = src[2 * j + k];
              if (std::isnan(v) || v > m) m = v;
            }
            want[j] = m;
          }
          t->max_stride2_row(got.data(), src, n, kw);
          for (int64_t j = 0; j < n; ++j) {
            if (std::isnan(want[j])) {
              ASSERT_TRUE(std::isnan(got[j])) << "NaN at " << at << ", output " << j;
            } else {
              ASSERT_EQ(got[j], want[j]) << "NaN at " << at << ", output " << j;
            }
          }
          ASSERT_EQ(got[n], 12345.0f) << "wrote past the row";
          if (at >= 0) src[at] = saved;
          ++compared;
        }
      }
    }
  }
  munmap(map, 2 * bytes);
  EXPECT_GT(compared, 0);
}

}  // namespace
}  // namespace cuvil
