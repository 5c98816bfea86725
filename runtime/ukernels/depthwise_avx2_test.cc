// The AVX2 3x3 depthwise plane kernel against a scalar reference: every plane size around its
// 8- and 16-column blocks and 3- and 7-row strips, both strides, every top/left and bottom/right
// pad it takes, epilogues, residuals, geometry changes between calls (its per-thread padded
// planes), guard values around the output, and the geometry it must decline.
#include "depthwise_avx2.h"

#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "activation_reference.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

bool HasAvx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

struct Plane {
  int64_t h, w, s, pt, pl, pb, pr;
};

cuvil_uk_conv_params Params(const Plane& g, int64_t act) {
  const int64_t oh = (g.h + g.pt + g.pb - 3) / g.s + 1, ow = (g.w + g.pl + g.pr - 3) / g.s + 1;
  return cuvil_uk_conv_params{
      1, g.h, g.w, 1, oh, ow, 3, 3, g.s, g.s, 1, 1, g.pt, g.pl, 1, act, CUVIL_UK_CONV_DEPTHWISE};
}

// Runs one plane through the kernel (output framed by guard values) and checks every element.
void CheckPlane(const Plane& g, int64_t act, bool with_res, std::mt19937& rng) {
  const cuvil_uk_conv_params p = Params(g, act);
  if (p.out_height <= 0 || p.out_width <= 0) return;
  SCOPED_TRACE(testing::Message() << "h=" << g.h << " w=" << g.w << " s=" << g.s << " pads=" << g.pt
                                  << "," << g.pl << "," << g.pb << "," << g.pr << " act=" << act
                                  << " res=" << with_res);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const int64_t oh = p.out_height, ow = p.out_width;
  std::vector<float> x(g.h * g.w), wt(9), res(oh * ow);
  for (float& v : x) v = dist(rng);
  for (float& v : wt) v = dist(rng);
  for (float& v : res) v = dist(rng);
  const float bias = dist(rng);
  const uk::Epilogue ep{nullptr, nullptr, act, -0.25f, 0.5f};
  constexpr int64_t kGuard = 40;
  std::vector<float> got(oh * ow + 2 * kGuard, -99.0f);
  ASSERT_TRUE(uk::Depthwise3x3Avx2(p, x.data(), wt.data(), bias, with_res ? res.data() : nullptr,
                                   got.data() + kGuard, ep));
  for (int64_t i = 0; i < kGuard; ++i) {
    ASSERT_EQ(got[i], -99.0f) << "written before the plane at " << i;
    ASSERT_EQ(got[kGuard + oh * ow + i], -99.0f) << "written past the plane at " << i;
  }
  for (int64_t oy = 0; oy < oh; ++oy) {
    for (int64_t ox = 0; ox < ow; ++ox) {
      double acc = bias;
      for (int64_t ky = 0; ky < 3; ++ky) {
        for (int64_t kx = 0; kx < 3; ++kx) {
          const int64_t iy = oy * g.s + ky - g.pt, ix = ox * g.s + kx - g.pl;
          if (iy < 0 || iy >= g.h || ix < 0 || ix >= g.w) continue;
          acc += double{wt[ky * 3 + kx]} * x[iy * g.w + ix];
        }
      }
      if (with_res) acc += res[oy * ow + ox];
      const float want = uk::ReferenceActivation(static_cast<float>(acc), act, ep.alpha, ep.beta);
      ASSERT_NEAR(got[kGuard + oy * ow + ox], want, 1e-5f * (1.0f + std::fabs(want)))
          << "at " << oy << "," << ox;
    }
  }
}

TEST(UkernelsTest, Depthwise3x3Avx2EdgeSizes) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::mt19937 rng(5);
  int checked = 0;
  for (int64_t s : {1, 2}) {
    for (int64_t h : {1, 2, 3, 4, 7, 8, 9, 14, 15}) {
      for (int64_t w : {1, 2, 3, 7, 8, 9, 14, 15, 16, 17, 18, 23, 24, 25, 28, 31, 33, 56, 57}) {
        // Symmetric "same" pads, TF-style (bottom/right only), top/left only, none, and 2.
        const int64_t pads[][2] = {{1, 1}, {0, 1}, {1, 0}, {0, 0}, {2, 2}, {2, 0}};
        for (const auto& py : pads) {
          for (const auto& px : {pads[0], pads[1], pads[3], pads[4]}) {
            const Plane g{h, w, s, py[0], px[0], py[1], px[1]};
            CheckPlane(g, (checked % 2) ? CUVIL_UK_ACT_CLIP : CUVIL_UK_ACT_NONE, checked % 3 == 0,
                       rng);
            ++checked;
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 2000);
}

TEST(UkernelsTest, Depthwise3x3Avx2MobileNetPlanesEveryEpilogue) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::mt19937 rng(6);
  const Plane planes[] = {{112, 112, 1, 1, 1, 1, 1}, {112, 112, 2, 1, 1, 1, 1},
                          {56, 56, 1, 1, 1, 1, 1},   {56, 56, 2, 1, 1, 1, 1},
                          {28, 28, 1, 1, 1, 1, 1},   {14, 14, 2, 1, 1, 1, 1},
                          {7, 7, 1, 1, 1, 1, 1},     {113, 113, 2, 0, 0, 1, 1}};
  for (const Plane& g : planes) {
    for (int64_t act = 0; act <= CUVIL_UK_ACT_SILU; ++act) CheckPlane(g, act, act == 2, rng);
  }
}

// The padded planes are kept per thread and reused while the geometry stays: changing it (a
// bigger, then a smaller, then the first plane again) must not leak one plane's data into the
// next one's padding, and two threads must not share them.
TEST(UkernelsTest, Depthwise3x3Avx2GeometryChangesAndThreads) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::mt19937 rng(7);
  const Plane seq[] = {{9, 20, 1, 1, 1, 1, 1}, {30, 41, 1, 0, 0, 2, 2}, {5, 6, 2, 1, 1, 1, 1},
                       {9, 20, 1, 1, 1, 1, 1}, {9, 20, 1, 2, 2, 0, 0},  {30, 41, 2, 2, 1, 0, 1},
                       {9, 20, 1, 1, 1, 1, 1}};
  for (const Plane& g : seq) CheckPlane(g, CUVIL_UK_ACT_RELU, true, rng);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([t, &seq] {
      std::mt19937 local(100 + t);
      for (int round = 0; round < 20; ++round) {
        for (const Plane& g : seq) CheckPlane(g, CUVIL_UK_ACT_CLIP, round % 2 == 0, local);
      }
    });
  }
  for (std::thread& th : threads) th.join();
}

TEST(UkernelsTest, Depthwise3x3Avx2DeclinesOtherGeometry) {
  if (!HasAvx2()) GTEST_SKIP() << "no AVX2+FMA on this CPU";
  std::vector<float> x(64 * 64, 1.0f), wt(25, 1.0f), y(64 * 64, -99.0f);
  const uk::Epilogue ep{nullptr, nullptr, CUVIL_UK_ACT_NONE, 0.0f, 0.0f};
  auto declines = [&](cuvil_uk_conv_params p) {
    return !uk::Depthwise3x3Avx2(p, x.data(), wt.data(), 0.0f, nullptr, y.data(), ep);
  };
  const cuvil_uk_conv_params base = Params({16, 16, 1, 1, 1, 1, 1}, CUVIL_UK_ACT_NONE);
  cuvil_uk_conv_params p = base;
  p.kernel_h = p.kernel_w = 5;
  EXPECT_TRUE(declines(p));
  p = base;
  p.dilation_h = p.dilation_w = 2;
  EXPECT_TRUE(declines(p));
  p = base;
  p.stride_w = 2;
  EXPECT_TRUE(declines(p));
  p = base;
  p.stride_h = p.stride_w = 3;
  EXPECT_TRUE(declines(p));
  p = base;
  p.pad_left = 3;
  EXPECT_TRUE(declines(p));
  for (float v : y) ASSERT_EQ(v, -99.0f) << "a declined plane wrote its output";
}

}  // namespace
}  // namespace cuvil
