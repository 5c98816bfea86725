// The convolution microkernels against a naive reference: odd sizes around the 6x16 tile, K
// around the K block, strides, dilations, padding, groups, depthwise, every epilogue, 1-2 threads.
#include "cuvil/runtime/ukernels.h"

#include <cmath>
#include <random>
#include <vector>

#include "cuvil/runtime/parallel.h"
#include "gtest/gtest.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct Case {
  int64_t c, h, w, m, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr, groups;
};

float Act(float v, int64_t act, float alpha, float beta) {
  switch (act) {
    case CUVIL_UK_ACT_RELU:
      return std::max(v, 0.0f);
    case CUVIL_UK_ACT_CLIP:
      return std::min(std::max(v, alpha), beta);
    case CUVIL_UK_ACT_HARDSIGMOID:
      return std::min(std::max(alpha * v + beta, 0.0f), 1.0f);
    case CUVIL_UK_ACT_HARDSWISH:
      return v * std::min(std::max(v / 6.0f + 0.5f, 0.0f), 1.0f);
    case CUVIL_UK_ACT_SIGMOID:
      return 1.0f / (1.0f + std::exp(-v));
    default:
      return v;
  }
}

void RunCase(const Case& k, int64_t batch, int64_t act, bool with_residual, int threads) {
  SCOPED_TRACE(testing::Message() << "c=" << k.c << " h=" << k.h << " w=" << k.w << " m=" << k.m
                                  << " k=" << k.kh << "x" << k.kw << " s=" << k.sh << "," << k.sw
                                  << " d=" << k.dh << " pads=" << k.pt << "," << k.pl << "," << k.pb
                                  << "," << k.pr << " g=" << k.groups << " batch=" << batch
                                  << " act=" << act << " res=" << with_residual
                                  << " threads=" << threads);
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
          want[o] = Act(static_cast<float>(s), act, alpha, beta);
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
    p.flags = CUVIL_UK_CONV_PACKED;
    int64_t size = cuvil_uk_packed_conv_weights_size(k.groups, mg, kk);
    ASSERT_GT(size, 0);
    wp.resize(size);
    cuvil_uk_pack_conv_weights(w.data(), k.groups, mg, kk, wp.data());
    wptr = wp.data();
  }
  std::vector<float> got(want.size(), 12345.0f);
  SetIntraOpThreads(threads);
  cuvil_uk_conv2d(&p, x.data(), wptr, bias.data(), with_residual ? res.data() : nullptr, got.data(),
                  batch, alpha, beta);
  SetIntraOpThreads(1);
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << "at " << i;
  }
}

TEST(UkernelsTest, TierIsNamed) {
  std::string tier = cuvil_uk_tier();
  EXPECT_TRUE(tier == "avx2_fma" || tier == "generic") << tier;
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

TEST(UkernelsTest, Depthwise) {
  const Case cases[] = {
      {8, 13, 13, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 8},
      {5, 14, 14, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 5},
      {3, 20, 37, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 3},
      {3, 4, 4, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3},
  };
  for (const Case& c : cases) {
    for (int64_t act = 0; act <= CUVIL_UK_ACT_SIGMOID; ++act) RunCase(c, 2, act, act == 2, 2);
  }
}

TEST(UkernelsTest, EveryEpilogue) {
  for (int64_t act = 0; act <= CUVIL_UK_ACT_SIGMOID; ++act) {
    for (bool res : {false, true}) {
      RunCase({7, 6, 7, 11, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1, act, res, 1);
      RunCase({7, 6, 7, 11, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 1, act, res, 1);
    }
  }
}

// The portable tile against the active one at every partial size.
TEST(UkernelsTest, GenericTileMatchesActive) {
  const uk::Table* avx2 = uk::Avx2Table();
  if (avx2 == nullptr || std::string(cuvil_uk_tier()) != "avx2_fma") GTEST_SKIP();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (int64_t kc : {1, 2, 31}) {
    std::vector<float> a(kc * uk::kMR), b(kc * 40);
    for (float& v : a) v = dist(rng);
    for (float& v : b) v = dist(rng);
    std::vector<int64_t> off(kc);
    for (int64_t k = 0; k < kc; ++k) off[k] = k * 40 + (k % 3);
    for (int64_t mr = 1; mr <= uk::kMR; ++mr) {
      for (int64_t nr = 1; nr <= uk::kNR; ++nr) {
        std::vector<float> c1(uk::kMR * 20, 1.0f), c2 = c1;
        avx2->gemm_tile(kc, a.data(), b.data(), off.data(), c1.data(), 20, mr, nr, true, nullptr);
        uk::GenericTable().gemm_tile(kc, a.data(), b.data(), off.data(), c2.data(), 20, mr, nr,
                                     true, nullptr);
        for (size_t i = 0; i < c1.size(); ++i) ASSERT_NEAR(c1[i], c2[i], 1e-4f);
      }
    }
  }
}

}  // namespace
}  // namespace cuvil
