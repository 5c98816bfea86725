// The quantized convolution (qgemm.cc) on every tier this CPU runs against a scalar reference:
// saturation edges, reduction lengths that are not a multiple of 4, odd channel and position
// counts, padding with a zero point, int8 and uint8 inputs, per-channel scales, every output type.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct Case {
  int64_t c, h, w, m, kh, kw, stride, pad, dilation;
  bool x_signed;
  int64_t out_type;
};

cuvil_uk_qconv_params Params(const Case& t) {
  cuvil_uk_qconv_params p{};
  p.conv.channels = t.c;
  p.conv.height = t.h;
  p.conv.width = t.w;
  p.conv.out_channels = t.m;
  p.conv.kernel_h = t.kh;
  p.conv.kernel_w = t.kw;
  p.conv.stride_h = p.conv.stride_w = t.stride;
  p.conv.dilation_h = p.conv.dilation_w = t.dilation;
  p.conv.pad_top = p.conv.pad_left = t.pad;
  p.conv.out_height = (t.h + 2 * t.pad - t.dilation * (t.kh - 1) - 1) / t.stride + 1;
  p.conv.out_width = (t.w + 2 * t.pad - t.dilation * (t.kw - 1) - 1) / t.stride + 1;
  p.conv.groups = 1;
  p.x_signed = t.x_signed ? 1 : 0;
  p.x_zero = t.x_signed ? -7 : 131;
  p.out_type = t.out_type;
  return p;
}

// Integer conv of (x - x_zero) with w, in int64: the exact value the kernel must reproduce.
std::vector<int64_t> ReferenceAcc(const cuvil_uk_qconv_params& qp, const std::vector<int32_t>& x,
                                  const std::vector<int8_t>& w, int64_t batch) {
  const cuvil_uk_conv_params& p = qp.conv;
  const int64_t oh = p.out_height, ow = p.out_width;
  std::vector<int64_t> out(batch * p.out_channels * oh * ow, 0);
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t m = 0; m < p.out_channels; ++m) {
      for (int64_t oy = 0; oy < oh; ++oy) {
        for (int64_t ox = 0; ox < ow; ++ox) {
          int64_t acc = 0;
          for (int64_t c = 0; c < p.channels; ++c) {
            for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
              for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
                int64_t iy = oy * p.stride_h - p.pad_top + ky * p.dilation_h;
                int64_t ix = ox * p.stride_w - p.pad_left + kx * p.dilation_w;
                if (iy < 0 || iy >= p.height || ix < 0 || ix >= p.width) continue;
                int64_t xv = x[((n * p.channels + c) * p.height + iy) * p.width + ix];
                int64_t wv = w[((m * p.channels + c) * p.kernel_h + ky) * p.kernel_w + kx];
                acc += (xv - qp.x_zero) * wv;
              }
            }
          }
          out[((n * p.out_channels + m) * oh + oy) * ow + ox] = acc;
        }
      }
    }
  }
  return out;
}

enum class Fill { kRandom, kMaxTimesMax, kZeroTimesMin, kMaxTimesMin };

// Runs case `t` on every supported tier and compares with the reference.
void CheckCase(const Case& t, Fill fill, int64_t batch = 2) {
  const cuvil_uk_qconv_params qp = Params(t);
  const cuvil_uk_conv_params& p = qp.conv;
  const int64_t k = t.c * t.kh * t.kw;
  std::mt19937 rng(static_cast<uint32_t>(t.c * 131 + t.m * 7 + t.kh + t.w));
  std::vector<int32_t> xv(batch * t.c * t.h * t.w);
  std::vector<int8_t> w(t.m * k);
  const int32_t xmin = t.x_signed ? -128 : 0, xmax = t.x_signed ? 127 : 255;
  std::uniform_int_distribution<int32_t> xd(xmin, xmax), wd(-128, 127);
  for (auto& v : xv) {
    v = fill == Fill::kRandom ? xd(rng) : fill == Fill::kZeroTimesMin ? xmin : xmax;
  }
  for (auto& v : w) {
    v = static_cast<int8_t>(fill == Fill::kRandom        ? wd(rng)
                            : fill == Fill::kMaxTimesMax ? 127
                                                         : -128);
  }
  std::vector<uint8_t> xbytes(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) xbytes[i] = static_cast<uint8_t>(xv[i]);

  std::vector<int8_t> packed(cuvil_uk_qconv_weights_size(t.m, k));
  std::vector<int32_t> sums(t.m);
  cuvil_uk_pack_qconv_weights(w.data(), t.m, k, packed.data(), sums.data());
  // The padding value the kernel reads, in the uint8 domain it computes in.
  const int32_t zero_u8 = static_cast<int32_t>(qp.x_zero) + (t.x_signed ? 128 : 0);
  std::vector<int32_t> comp(t.m);
  std::vector<float> mult(t.m), bias(t.m);
  for (int64_t m = 0; m < t.m; ++m) {
    int32_t s = 0;
    for (int64_t r = 0; r < k; ++r) s += w[m * k + r];
    ASSERT_EQ(sums[m], s);
    comp[m] = zero_u8 * s;
    mult[m] = t.out_type == CUVIL_UK_QOUT_FLOAT ? 1.0f : 1.0f / (2048.0f + 37.0f * m);
    bias[m] =
        t.out_type == CUVIL_UK_QOUT_FLOAT ? 0.5f * m : (t.out_type == CUVIL_UK_QOUT_U8 ? 100 : -3);
  }
  const float lo = t.out_type == CUVIL_UK_QOUT_U8   ? 0
                   : t.out_type == CUVIL_UK_QOUT_S8 ? -128
                                                    : -std::numeric_limits<float>::infinity();
  const float hi = t.out_type == CUVIL_UK_QOUT_U8   ? 255
                   : t.out_type == CUVIL_UK_QOUT_S8 ? 127
                                                    : std::numeric_limits<float>::infinity();
  const std::vector<int64_t> acc = ReferenceAcc(qp, xv, w, batch);
  const int64_t plane = p.out_height * p.out_width;
  for (const uk::QTable* table : uk::SupportedQTables()) {
    SCOPED_TRACE(table->name);
    std::vector<float> yf(acc.size(), -1.0f);
    std::vector<uint8_t> yq(acc.size(), 0xAB);
    std::vector<int32_t> yi(acc.size(), -7);
    void* y = t.out_type == CUVIL_UK_QOUT_FLOAT ? static_cast<void*>(yf.data())
              : t.out_type == CUVIL_UK_QOUT_S32 ? static_cast<void*>(yi.data())
                                                : yq.data();
    uk::QConv2d(*table, qp, xbytes.data(), packed.data(), comp.data(), mult.data(), bias.data(),
                nullptr, y, batch, lo, hi);
    int64_t bad = 0;
    for (size_t i = 0; i < acc.size() && bad < 5; ++i) {
      const int64_t m = static_cast<int64_t>(i) / plane % t.m;
      if (t.out_type == CUVIL_UK_QOUT_S32) {
        // ConvInteger's exact sum of (x - x_zero) * w.
        if (yi[i] != acc[i]) {
          ++bad;
          ADD_FAILURE() << "y[" << i << "] = " << yi[i] << ", want " << acc[i];
        }
      } else if (t.out_type == CUVIL_UK_QOUT_FLOAT) {
        // mult = 1: the float value is the exact accumulator plus the bias.
        const float want = static_cast<float>(acc[i]) + bias[m];
        if (yf[i] != want) {
          ++bad;
          ADD_FAILURE() << "y[" << i << "] = " << yf[i] << ", want " << want;
        }
      } else {
        float v = std::nearbyint(static_cast<float>(acc[i]) * mult[m] + bias[m]);
        v = std::fmin(std::fmax(v, lo), hi);
        const int32_t want = static_cast<int32_t>(v);
        const int32_t got = t.out_type == CUVIL_UK_QOUT_U8 ? static_cast<int32_t>(yq[i])
                                                           : static_cast<int8_t>(yq[i]);
        if (got != want) {
          ++bad;
          ADD_FAILURE() << "y[" << i << "] = " << got << ", want " << want;
        }
      }
    }
  }
}

TEST(QConvTest, TiersAreNamed) {
  const uk::TierList<uk::QTable> tables = uk::SupportedQTables();
  ASSERT_GT(tables.size(), 0);
  EXPECT_STREQ(tables.back()->name, "generic");
  EXPECT_NE(cuvil_uk_qtier(), nullptr);
}

TEST(QConvTest, PackingPadsKAndM) {
  // 3 channels x 5 weights: one panel (rows 3..7 zero) of two quads (the last one 3/4 zero).
  const int64_t m = 3, k = 5;
  std::vector<int8_t> w(m * k);
  for (int64_t i = 0; i < m * k; ++i) w[i] = static_cast<int8_t>(i + 1);
  ASSERT_EQ(cuvil_uk_qconv_weights_size(m, k), 1 * 2 * CUVIL_UK_QMR * 4);
  std::vector<int8_t> packed(cuvil_uk_qconv_weights_size(m, k), 99);
  cuvil_uk_pack_qconv_weights(w.data(), m, k, packed.data(), nullptr);
  for (int64_t kk = 0; kk < 2; ++kk) {
    for (int64_t r = 0; r < CUVIL_UK_QMR; ++r) {
      for (int64_t t = 0; t < 4; ++t) {
        const int64_t col = kk * 4 + t;
        const int8_t want = r < m && col < k ? w[r * k + col] : 0;
        EXPECT_EQ(packed[(kk * CUVIL_UK_QMR + r) * 4 + t], want) << kk << " " << r << " " << t;
      }
    }
  }
  EXPECT_EQ(cuvil_uk_qconv_weights_size(-1, 4), -1);
  EXPECT_EQ(cuvil_uk_qconv_weights_size(int64_t{1} << 40, int64_t{1} << 40), -1);
}

TEST(QConvTest, SaturationEdges) {
  // 255 x 127 and 255 x -128 over a long reduction: vpmaddubsw would saturate int16 pairs.
  for (bool s : {false, true}) {
    const Case c{64, 6, 5, 9, 3, 3, 1, 1, 1, s, CUVIL_UK_QOUT_FLOAT};
    CheckCase(c, Fill::kMaxTimesMax);
    CheckCase(c, Fill::kZeroTimesMin);
    CheckCase(c, Fill::kMaxTimesMin);
  }
}

TEST(QConvTest, OddSizesEveryOutputType) {
  for (int64_t out : {CUVIL_UK_QOUT_FLOAT, CUVIL_UK_QOUT_U8, CUVIL_UK_QOUT_S8, CUVIL_UK_QOUT_S32}) {
    for (bool s : {false, true}) {
      // k = 3 (not a multiple of 4), m = 7, 13 positions.
      CheckCase({3, 1, 13, 7, 1, 1, 1, 0, 1, s, out}, Fill::kRandom);
      // k = 45, m = 13, 5 x 3 output, padding reads the zero point.
      CheckCase({5, 5, 3, 13, 3, 3, 1, 1, 1, s, out}, Fill::kRandom);
      // Stride 2, 7x7 (ResNet's stem shape, small), m = 17.
      CheckCase({3, 15, 17, 17, 7, 7, 2, 3, 1, s, out}, Fill::kRandom);
      // Dilation 2, 1 image.
      CheckCase({6, 9, 9, 8, 3, 3, 1, 2, 2, s, out}, Fill::kRandom, 1);
    }
  }
}

TEST(QConvTest, WideRowsSpanSeveralBlocks) {
  // K = 576: a block holds ~85 columns, so the 40 x 40 output takes several blocks and ragged
  // tiles; 64 output channels make 8 panels.
  CheckCase({64, 40, 40, 64, 3, 3, 1, 1, 1, false, CUVIL_UK_QOUT_U8}, Fill::kRandom, 1);
  // 1x1 stride 1 (B read from x's planes), int8 inputs, whole quads and a ragged one.
  CheckCase({22, 4, 9, 11, 1, 1, 1, 0, 1, true, CUVIL_UK_QOUT_S8}, Fill::kRandom);
  // Stride 2 with output rows of 40 and 70 (the vector gather of even columns and its tail), int8
  // inputs (flipped) and uint8, the input's last column read by the last output.
  CheckCase({3, 80, 80, 8, 7, 7, 2, 3, 1, true, CUVIL_UK_QOUT_U8}, Fill::kRandom, 1);
  CheckCase({2, 9, 139, 5, 3, 3, 2, 1, 1, false, CUVIL_UK_QOUT_FLOAT}, Fill::kRandom, 1);
  // 1x1 with 130 channels, 7x7 (the late ResNet layers' spatial size).
  CheckCase({130, 7, 7, 33, 1, 1, 1, 0, 1, false, CUVIL_UK_QOUT_FLOAT}, Fill::kRandom);
}

// CUVIL_UK_QOUT_FLOAT_MEAN (a GlobalAveragePool fused in) equals the float output averaged in
// position order, bit for bit, on every tier: one block and several, padded rows, a clamp.
TEST(QConvTest, FusedMeanIsTheFloatOutputAveraged) {
  const Case cases[] = {
      {64, 25, 5, 64, 1, 1, 1, 0, 1, false, CUVIL_UK_QOUT_FLOAT},  // the DS-CNN's last 1x1
      {5, 9, 7, 13, 3, 3, 1, 1, 1, true, CUVIL_UK_QOUT_FLOAT},     // padded rows (wr > ow)
      {64, 40, 40, 9, 3, 3, 1, 1, 1, false, CUVIL_UK_QOUT_FLOAT},  // several blocks
      {3, 15, 17, 17, 7, 7, 2, 3, 1, false, CUVIL_UK_QOUT_FLOAT},  // stride 2
  };
  const int64_t batch = 3;
  for (const Case& t : cases) {
    SCOPED_TRACE(testing::Message() << "c=" << t.c << " h=" << t.h << " w=" << t.w);
    cuvil_uk_qconv_params qp = Params(t);
    const int64_t k = t.c * t.kh * t.kw;
    std::mt19937 rng(static_cast<uint32_t>(k + t.m));
    std::uniform_int_distribution<int32_t> xd(0, 255), wd(-128, 127);
    std::vector<uint8_t> x(batch * t.c * t.h * t.w);
    for (auto& v : x) v = static_cast<uint8_t>(xd(rng));
    std::vector<int8_t> w(t.m * k);
    for (auto& v : w) v = static_cast<int8_t>(wd(rng));
    std::vector<int8_t> packed(cuvil_uk_qconv_weights_size(t.m, k));
    std::vector<int32_t> sums(t.m), comp(t.m);
    cuvil_uk_pack_qconv_weights(w.data(), t.m, k, packed.data(), sums.data());
    std::vector<float> mult(t.m), bias(t.m);
    for (int64_t m = 0; m < t.m; ++m) {
      comp[m] = static_cast<int32_t>(qp.x_zero + (t.x_signed ? 128 : 0)) * sums[m];
      mult[m] = 1.0f / (1000.0f + 17.0f * m);
      bias[m] = 0.01f * m - 0.05f;
    }
    const int64_t plane = qp.conv.out_height * qp.conv.out_width;
    for (const uk::QTable* table : uk::SupportedQTables()) {
      SCOPED_TRACE(table->name);
      std::vector<float> full(batch * t.m * plane), mean(batch * t.m, -1.0f);
      qp.out_type = CUVIL_UK_QOUT_FLOAT;
      uk::QConv2d(*table, qp, x.data(), packed.data(), comp.data(), mult.data(), bias.data(),
                  nullptr, full.data(), batch, 0.0f, 6.0f);
      qp.out_type = CUVIL_UK_QOUT_FLOAT_MEAN;
      uk::QConv2d(*table, qp, x.data(), packed.data(), comp.data(), mult.data(), bias.data(),
                  nullptr, mean.data(), batch, 0.0f, 6.0f);
      int nonzero = 0;
      for (int64_t i = 0; i < batch * t.m; ++i) {
        float s = 0.0f;
        for (int64_t q = 0; q < plane; ++q) s += full[i * plane + q];
        ASSERT_EQ(mean[i], s / static_cast<float>(plane))
            << std::hexfloat << mean[i] << " " << s << std::defaultfloat << " image " << i / t.m
            << " channel " << i % t.m;
        nonzero += mean[i] != 0.0f;
      }
      EXPECT_GT(nonzero, batch * t.m / 2);
    }
  }
}

TEST(QConvTest, ResidualAndClampOnFloatOutput) {
  const Case t{4, 3, 3, 2, 1, 1, 1, 0, 1, false, CUVIL_UK_QOUT_FLOAT};
  const cuvil_uk_qconv_params qp = Params(t);
  std::vector<uint8_t> x(4 * 9, 131 + 2);  // x - zero = 2 everywhere
  std::vector<int8_t> w = {1, 1, 1, 1, -1, -1, -1, -1};
  std::vector<int8_t> packed(cuvil_uk_qconv_weights_size(2, 4));
  std::vector<int32_t> sums(2);
  cuvil_uk_pack_qconv_weights(w.data(), 2, 4, packed.data(), sums.data());
  std::vector<int32_t> comp = {131 * sums[0], 131 * sums[1]};
  std::vector<float> mult = {0.5f, 0.5f}, bias = {1.0f, 1.0f};
  std::vector<float> residual(18);
  for (int i = 0; i < 18; ++i) residual[i] = 0.25f * i;
  std::vector<float> y(18);
  for (const uk::QTable* table : uk::SupportedQTables()) {
    SCOPED_TRACE(table->name);
    uk::QConv2d(*table, qp, x.data(), packed.data(), comp.data(), mult.data(), bias.data(),
                residual.data(), y.data(), 1, 0.0f, 5.0f);
    for (int i = 0; i < 18; ++i) {
      // Channel 0: 8 * 0.5 + 1 = 5; channel 1: -8 * 0.5 + 1 = -3; plus residual, clamped.
      const float v = (i < 9 ? 5.0f : -3.0f) + residual[i];
      EXPECT_EQ(y[i], std::fmin(std::fmax(v, 0.0f), 5.0f)) << i;
    }
  }
}

}  // namespace
}  // namespace cuvil
