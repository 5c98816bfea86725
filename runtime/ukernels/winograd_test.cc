// Winograd F(2x2, 3x3) against a double reference of the direct conv on every tier: odd and even
// output sizes, channel counts around the 6-row panel and the reduction block, every padding, batch
// chunks that combine images, every epilogue, 1 and 2 threads.
#include "winograd.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "activation_reference.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct WinoCase {
  int64_t c, h, w, m, pt, pl, pb, pr;
};

void RunWinograd(const WinoCase& k, int64_t batch, int64_t act, bool with_residual, int threads) {
  SCOPED_TRACE(testing::Message() << "c=" << k.c << " h=" << k.h << " w=" << k.w << " m=" << k.m
                                  << " pads=" << k.pt << "," << k.pl << "," << k.pb << "," << k.pr
                                  << " batch=" << batch << " act=" << act
                                  << " res=" << with_residual << " threads=" << threads);
  const int64_t oh = k.h + k.pt + k.pb - 2, ow = k.w + k.pl + k.pr - 2;
  ASSERT_GE(oh, 1);
  ASSERT_GE(ow, 1);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  std::vector<float> x = fill(batch * k.c * k.h * k.w), w = fill(k.m * k.c * 9), bias = fill(k.m);
  std::vector<float> res = fill(batch * k.m * oh * ow);
  const float alpha = act == CUVIL_UK_ACT_CLIP ? -0.3f : 0.2f;
  const float beta = act == CUVIL_UK_ACT_CLIP ? 0.4f : 0.5f;
  std::vector<float> want(batch * k.m * oh * ow);
  double scale = 0;  // largest |pre-activation|, for the tolerance
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < k.m; ++m) {
      for (int64_t y = 0; y < oh; ++y) {
        for (int64_t xo = 0; xo < ow; ++xo) {
          double s = bias[m];
          for (int64_t c = 0; c < k.c; ++c) {
            for (int64_t ky = 0; ky < 3; ++ky) {
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = y + ky - k.pt, ix = xo + kx - k.pl;
                if (iy < 0 || iy >= k.h || ix < 0 || ix >= k.w) continue;
                s += static_cast<double>(w[(m * k.c + c) * 9 + ky * 3 + kx]) *
                     x[((n * k.c + c) * k.h + iy) * k.w + ix];
              }
            }
          }
          const int64_t o = ((n * k.m + m) * oh + y) * ow + xo;
          if (with_residual) s += res[o];
          scale = std::max(scale, std::fabs(s));
          want[o] = uk::ReferenceActivation(static_cast<float>(s), act, alpha, beta);
        }
      }
    }
  }
  const int64_t size = cuvil_uk_winograd_weights_size(k.m, k.c);
  ASSERT_GT(size, 0);
  // NaN first: the packing must write every float the kernel reads, padding lanes included.
  std::vector<float> u(size, std::numeric_limits<float>::quiet_NaN());
  cuvil_uk_pack_winograd_weights(w.data(), k.m, k.c, u.data());
  cuvil_uk_conv_params p{
      k.c, k.h, k.w, k.m, oh, ow, 3, 3, 1, 1, 1, 1, k.pt, k.pl, 1, act, CUVIL_UK_CONV_WINOGRAD};
  ASSERT_TRUE(uk::WinogradEligible(p));
  // Winograd rounds differently from the direct sum: relative to the output's magnitude.
  const float tol = 2e-5f * static_cast<float>(std::sqrt(static_cast<double>(k.c)) * (1 + scale));
  for (const uk::Table* t : uk::SupportedTables()) {
    SCOPED_TRACE(t->name);
    std::vector<float> got(want.size(), 12345.0f);
    SetIntraOpThreads(threads);
    uk::Conv2d(*t, p, x.data(), u.data(), bias.data(), with_residual ? res.data() : nullptr,
               got.data(), batch, alpha, beta);
    SetIntraOpThreads(1);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[i], want[i], tol) << "at " << i;
    }
  }
}

TEST(UkernelsTest, WinogradEdgeSizes) {
  for (int64_t c : {1, 5, 16}) {
    for (int64_t m : {1, 6, 7, 13}) {
      for (int64_t hw : {1, 2, 3, 4, 7, 8}) {
        RunWinograd({c, hw, hw + 1, m, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_NONE, false, 1);
      }
    }
  }
}

TEST(UkernelsTest, WinogradEveryPadding) {
  for (int64_t pt : {0, 1, 2}) {
    for (int64_t pl : {0, 1, 2}) {
      for (int64_t pb : {0, 1}) {
        RunWinograd({9, 6, 9, 10, pt, pl, pb, 2 - pl % 2}, 2, CUVIL_UK_ACT_RELU, true, 1);
      }
    }
  }
}

TEST(UkernelsTest, WinogradReductionBlocksAndBatchChunks) {
  // 300 channels cross the 256-row reduction block; 7x7 and 5x5 outputs combine images per chunk
  // (the last chunk shorter), 20x20 runs one image per chunk.
  RunWinograd({300, 7, 7, 14, 1, 1, 1, 1}, 3, CUVIL_UK_ACT_NONE, true, 1);
  RunWinograd({24, 5, 5, 20, 1, 1, 1, 1}, 13, CUVIL_UK_ACT_RELU, false, 2);
  RunWinograd({17, 40, 40, 12, 1, 1, 1, 1}, 2, CUVIL_UK_ACT_RELU, true, 2);
}

TEST(UkernelsTest, WinogradEveryEpilogue) {
  for (int64_t act :
       {CUVIL_UK_ACT_NONE, CUVIL_UK_ACT_RELU, CUVIL_UK_ACT_CLIP, CUVIL_UK_ACT_HARDSIGMOID,
        CUVIL_UK_ACT_HARDSWISH, CUVIL_UK_ACT_SIGMOID, CUVIL_UK_ACT_SILU}) {
    RunWinograd({8, 9, 11, 9, 1, 1, 1, 1}, 1, act, act % 2 == 0, 1);
  }
}

TEST(UkernelsTest, WinogradTwoThreadsResNetShapes) {
  RunWinograd({64, 56, 56, 64, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_RELU, true, 2);
  RunWinograd({128, 28, 28, 128, 1, 1, 1, 1}, 2, CUVIL_UK_ACT_RELU, false, 2);
  RunWinograd({256, 14, 14, 256, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_NONE, true, 1);
  RunWinograd({64, 7, 7, 96, 1, 1, 1, 1}, 3, CUVIL_UK_ACT_RELU, true, 2);
  // Whole chunks per thread (8 chunks of 8 tile rows, the last of each image 6 rows short).
  RunWinograd({16, 60, 60, 16, 1, 1, 1, 1}, 2, CUVIL_UK_ACT_RELU, true, 2);
}

// Every way the threads share a layer: chunks re-cut to a multiple of the threads (14 tile rows
// in 3 chunks become 4 for 2 threads, 6 for 3; 7 rows in one chunk become 2 or 3, the last
// short), and fewer tile rows than threads (one tile row: each thread takes a range of output
// channels, the last range short of a panel).
TEST(UkernelsTest, WinogradThreadsShareChunksOrChannels) {
  for (int threads : {2, 3}) {
    RunWinograd({128, 28, 28, 128, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_RELU, true, threads);
    RunWinograd({256, 14, 14, 256, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_NONE, false, threads);
    RunWinograd({64, 2, 2, 100, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_RELU, true, threads);
    RunWinograd({48, 1, 3, 130, 1, 1, 1, 1}, 1, CUVIL_UK_ACT_NONE, true, threads);
  }
}

TEST(UkernelsTest, WinogradWeightsSizeOverflows) {
  EXPECT_EQ(cuvil_uk_winograd_weights_size(6, 3), 16 * 6 * 3);
  EXPECT_EQ(cuvil_uk_winograd_weights_size(7, 3), 16 * 12 * 3);
  EXPECT_EQ(cuvil_uk_winograd_weights_size(int64_t{1} << 40, int64_t{1} << 30), -1);
  EXPECT_EQ(cuvil_uk_winograd_weights_size(-1, 3), -1);
}

}  // namespace
}  // namespace cuvil
