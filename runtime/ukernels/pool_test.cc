// cuvil_uk_maxpool2d against a naive reference: padding, strides, dilations, ceil-mode overhang,
// windows with no input element, NaN, odd sizes, 1-2 threads.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

std::vector<float> Reference(const cuvil_uk_pool_params& p, const std::vector<float>& x,
                             int64_t planes) {
  std::vector<float> y(planes * p.out_height * p.out_width);
  for (int64_t n = 0; n < planes; ++n) {
    for (int64_t oy = 0; oy < p.out_height; ++oy) {
      for (int64_t ox = 0; ox < p.out_width; ++ox) {
        float m = -std::numeric_limits<float>::infinity();
        for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
          for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
            int64_t iy = oy * p.stride_h + ky * p.dilation_h - p.pad_top;
            int64_t ix = ox * p.stride_w + kx * p.dilation_w - p.pad_left;
            if (iy < 0 || iy >= p.height || ix < 0 || ix >= p.width) continue;
            float v = x[(n * p.height + iy) * p.width + ix];
            if (std::isnan(v) || v > m) m = v;
          }
        }
        y[(n * p.out_height + oy) * p.out_width + ox] = m;
      }
    }
  }
  return y;
}

void RunPool(cuvil_uk_pool_params p, int64_t planes, int threads, bool with_nan = false) {
  SCOPED_TRACE(testing::Message() << "in " << p.height << "x" << p.width << " out " << p.out_height
                                  << "x" << p.out_width << " k " << p.kernel_h << "x" << p.kernel_w
                                  << " s " << p.stride_h << "," << p.stride_w << " d "
                                  << p.dilation_h << "," << p.dilation_w << " pads " << p.pad_top
                                  << "," << p.pad_left << " threads " << threads);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(planes * p.height * p.width);
  for (float& v : x) v = dist(rng);
  if (with_nan) x[x.size() / 3] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> want = Reference(p, x, planes);
  std::vector<float> got(want.size(), 12345.0f);
  SetIntraOpThreads(threads);
  cuvil_uk_maxpool2d(&p, x.data(), got.data(), planes);
  SetIntraOpThreads(1);
  int nans = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      ASSERT_TRUE(std::isnan(got[i])) << "at " << i;
      ++nans;
    } else {
      ASSERT_EQ(got[i], want[i]) << "at " << i;
    }
  }
  if (with_nan) {
    EXPECT_GT(nans, 0);
  }
}

// Output size as ONNX computes it (ceil_mode rounds up).
int64_t OutSize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pads, bool ceil_mode) {
  int64_t span = in + pads - ((k - 1) * d + 1);
  return (ceil_mode ? (span + s - 1) / s : span / s) + 1;
}

cuvil_uk_pool_params Params(int64_t h, int64_t w, int64_t k, int64_t s, int64_t d, int64_t pad,
                            bool ceil_mode) {
  return {h,
          w,
          OutSize(h, k, s, d, 2 * pad, ceil_mode),
          OutSize(w, k, s, d, 2 * pad, ceil_mode),
          k,
          k,
          s,
          s,
          d,
          d,
          pad,
          pad};
}

TEST(MaxPoolTest, ResnetStem) { RunPool(Params(112, 112, 3, 2, 1, 1, false), 8, 2); }

// SqueezeNet's unpadded 3x3 stride-2 ceil-mode pools (the stride-2 row kernel over 16-lane blocks
// and their tails), an even width whose ceil-mode overhang takes a window of two columns, NaN.
TEST(MaxPoolTest, SqueezenetStrideTwo) {
  for (int64_t size : {111, 55, 27}) RunPool(Params(size, size, 3, 2, 1, 0, true), 4, 1);
  RunPool(Params(56, 34, 3, 2, 1, 0, true), 3, 2);
  RunPool(Params(27, 27, 3, 2, 1, 0, true), 4, 1, true);
}

TEST(MaxPoolTest, OddGeometry) {
  for (bool ceil_mode : {false, true}) {
    RunPool(Params(13, 11, 3, 2, 1, 1, ceil_mode), 3, 1);
    RunPool(Params(9, 17, 2, 2, 1, 0, ceil_mode), 2, 2);
    RunPool(Params(10, 10, 3, 1, 2, 2, ceil_mode), 2, 1);  // dilation 2
    RunPool(Params(7, 5, 5, 3, 1, 2, ceil_mode), 5, 2);    // kernel wider than the interior
    RunPool(Params(1, 1, 3, 1, 1, 1, ceil_mode), 2, 1);    // 1x1 plane, padded
  }
  // Asymmetric: 2x3 window, stride (1, 2), dilation (2, 1), pads (0, 1).
  RunPool({6, 9, 4, 5, 2, 3, 1, 2, 2, 1, 0, 1}, 3, 1);
}

TEST(MaxPoolTest, WindowsWithoutInput) {
  // Dilation 3 with pad 2: the first column's taps fall on -2, 1, 4 ...; with height 1 and pad 2
  // some rows hold no input element at all.
  RunPool({1, 8, 3, 4, 3, 3, 1, 2, 3, 3, 2, 2}, 2, 1);
}

TEST(MaxPoolTest, NanPropagates) { RunPool(Params(12, 12, 3, 2, 1, 1, false), 4, 1, true); }

// Odd windows at stride 1 padded to keep the size (the whole-plane path): GoogLeNet's 3x3 pad 1
// on 28x28 / 14x14 / 7x7, 5x5 and 3x5, planes narrower or shorter than the window, NaN.
TEST(MaxPoolTest, SameSizeStrideOne) {
  for (int64_t size : {28, 14, 7, 2, 1}) {
    RunPool(Params(size, size, 3, 1, 1, 1, true), 6, 1);
    RunPool(Params(size, size, 3, 1, 1, 1, false), 9, 2);
  }
  RunPool(Params(9, 11, 5, 1, 1, 2, false), 3, 1);
  RunPool(Params(3, 12, 5, 1, 1, 2, false), 3, 1);  // shorter than the window
  RunPool({6, 10, 6, 10, 3, 5, 1, 1, 1, 1, 1, 2}, 4, 1);
  RunPool({6, 3, 6, 3, 1, 7, 1, 1, 1, 1, 0, 3}, 4, 1);  // 1x7 over 3 columns
  RunPool({5, 4, 5, 4, 5, 1, 1, 1, 1, 1, 2, 0}, 4, 1);  // 5x1
  RunPool(Params(14, 14, 3, 1, 1, 1, true), 4, 1, true);
}

// The 2x2 stride-2 fast path: LeNet's planes, an odd floor-mode plane (last row and column
// unused), ceil mode (overhang: the general path) and 2 threads.
TEST(MaxPoolTest, TwoByTwoStrideTwo) {
  RunPool(Params(24, 24, 2, 2, 1, 0, false), 48, 1);
  RunPool(Params(8, 8, 2, 2, 1, 0, false), 128, 2);
  RunPool(Params(9, 17, 2, 2, 1, 0, false), 3, 1);
  RunPool(Params(9, 17, 2, 2, 1, 0, true), 3, 1);
  RunPool(Params(2, 2, 2, 2, 1, 0, false), 5, 1);
}

// A NaN at each of the four places of a 2x2 window comes out of that window (and only it).
TEST(MaxPoolTest, TwoByTwoNanAtEveryWindowPlace) {
  const cuvil_uk_pool_params p = Params(4, 6, 2, 2, 1, 0, false);
  for (int64_t at : {0, 1, 6, 7}) {
    std::vector<float> x(24);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) - 2.0f;
    x[at + 2] = std::numeric_limits<float>::quiet_NaN();  // window (0, 1) holds 2, 3, 8, 9
    const std::vector<float> want = Reference(p, x, 1);
    std::vector<float> got(want.size(), 12345.0f);
    cuvil_uk_maxpool2d(&p, x.data(), got.data(), 1);
    for (size_t i = 0; i < want.size(); ++i) {
      if (i == 1) {
        EXPECT_TRUE(std::isnan(got[i])) << "NaN at " << at + 2;
      } else {
        EXPECT_EQ(got[i], want[i]) << "NaN at " << at + 2 << ", output " << i;
      }
    }
  }
}

}  // namespace
}  // namespace cuvil
