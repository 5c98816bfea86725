#include "calibration.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil::quantize {
namespace {

TEST(CalibrationTest, MinMaxSkipsNonFiniteValues) {
  MinMaxObserver m;
  EXPECT_FALSE(m.seen());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> a = {0.5f, nan, -2.0f, inf};
  std::vector<float> b = {3.25f, -inf, 1.0f};
  m.Add(a.data(), a.size());
  m.Add(b.data(), b.size());
  ASSERT_TRUE(m.seen());
  EXPECT_FLOAT_EQ(m.range().lo, -2.0f);
  EXPECT_FLOAT_EQ(m.range().hi, 3.25f);
}

TEST(CalibrationTest, AbsHistogramBinsMagnitudesAndClampsOutliers) {
  AbsHistogram h(4, 4.0f);  // Bins [0,1) [1,2) [2,3) [3,4+).
  std::vector<float> v = {0.5f, -0.5f, 1.5f, -2.5f, 3.5f, 100.0f};
  h.Add(v.data(), v.size());
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 1, 1, 2}));
  EXPECT_EQ(h.total(), 6u);
  EXPECT_FLOAT_EQ(h.bin_width(), 1.0f);
}

TEST(CalibrationTest, PercentileThresholdIsTheUpperEdgeOfTheBinReachingIt) {
  AbsHistogram h(100, 100.0f);
  std::vector<float> v;
  for (int i = 0; i < 100; ++i) v.push_back(static_cast<float>(i) + 0.5f);  // One per bin.
  h.Add(v.data(), v.size());
  EXPECT_FLOAT_EQ(PercentileThreshold(h, 50.0), 50.0f);
  EXPECT_FLOAT_EQ(PercentileThreshold(h, 99.0), 99.0f);
  EXPECT_FLOAT_EQ(PercentileThreshold(h, 100.0), 100.0f);
  EXPECT_FLOAT_EQ(PercentileThreshold(AbsHistogram(10, 1.0f), 99.0), 0.0f);
}

TEST(CalibrationTest, KlDivergenceMatchesTheClosedForm) {
  EXPECT_DOUBLE_EQ(KlDivergence({1, 3}, {2, 6}), 0.0);  // Same distribution once normalised.
  double want = 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75);
  EXPECT_NEAR(KlDivergence({1, 1}, {1, 3}), want, 1e-12);
  EXPECT_GT(KlDivergence({1, 1}, {1, 0}), 10.0);  // q empty where p is not: heavily penalised.
}

TEST(CalibrationTest, EntropyKeepsAHistogramThatFitsTheQuantizedBins) {
  // All mass in the first 128 bins: 128 levels represent it exactly, so the smallest candidate
  // (128 bins) has zero divergence.
  AbsHistogram h(2048, 2048.0f);
  std::vector<float> v;
  for (int i = 0; i < 128; ++i) v.push_back(static_cast<float>(i) + 0.5f);
  h.Add(v.data(), v.size());
  EXPECT_FLOAT_EQ(EntropyThreshold(h, 128), 128.0f);
}

TEST(CalibrationTest, EntropyClipsARareOutlier) {
  // A dense bell over [0, 400) and one far outlier: min/max would spend the range on the
  // outlier, the KL threshold stays near the bulk.
  AbsHistogram h(2048, 2048.0f);
  std::vector<float> v;
  for (int i = 0; i < 400; ++i) {
    int copies = 1 + static_cast<int>(1000.0 * std::exp(-0.5 * std::pow(i / 100.0, 2)));
    for (int c = 0; c < copies; ++c) v.push_back(static_cast<float>(i) + 0.5f);
  }
  v.push_back(2000.0f);
  h.Add(v.data(), v.size());
  float t = EntropyThreshold(h, 128);
  EXPECT_GE(t, 200.0f);
  EXPECT_LE(t, 420.0f);
}

TEST(CalibrationTest, EntropyIgnoresTheZeroSpikeOfARelu) {
  // Half the values are exact zeros (a ReLU's), the rest spread evenly over [0, 1000): nothing
  // is an outlier, so the threshold stays near the top of the data.
  AbsHistogram h(2048, 2048.0f);
  std::vector<float> v(100000, 0.0f);
  for (int i = 0; i < 1000; ++i) {
    for (int c = 0; c < 100; ++c) v.push_back(static_cast<float>(i) + 0.5f);
  }
  h.Add(v.data(), v.size());
  EXPECT_GE(EntropyThreshold(h, 255), 900.0f);
}

TEST(CalibrationTest, CalibratedRangeContainsZeroAndClipsBothEnds) {
  AbsHistogram h(100, 100.0f);
  std::vector<float> v;
  for (int i = 0; i < 100; ++i) v.push_back(static_cast<float>(i) + 0.5f);
  h.Add(v.data(), v.size());
  Range mm = CalibratedRange(CalibrationMethod::kMinMax, {2.0f, 5.0f}, &h);
  EXPECT_FLOAT_EQ(mm.lo, 0.0f);
  EXPECT_FLOAT_EQ(mm.hi, 5.0f);
  Range p = CalibratedRange(CalibrationMethod::kPercentile, {-99.5f, 99.5f}, &h, 90.0);
  EXPECT_FLOAT_EQ(p.lo, -90.0f);
  EXPECT_FLOAT_EQ(p.hi, 90.0f);
}

TEST(CalibrationTest, ParsesMethodNames) {
  EXPECT_EQ(*ParseCalibrationMethod("entropy"), CalibrationMethod::kEntropy);
  EXPECT_EQ(*ParseCalibrationMethod("percentile"), CalibrationMethod::kPercentile);
  EXPECT_EQ(*ParseCalibrationMethod("minmax"), CalibrationMethod::kMinMax);
  EXPECT_FALSE(ParseCalibrationMethod("kl").ok());
}

}  // namespace
}  // namespace cuvil::quantize
