#include "quant_params.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil::quantize {
namespace {

TEST(QuantParamsTest, UInt8ActivationsCoverTheRangeWithAnExactZero) {
  QuantParams relu6 = ActivationParams({0.0f, 6.0f}, ActivationType::kUInt8);
  EXPECT_FLOAT_EQ(relu6.scale, 6.0f / 255.0f);
  EXPECT_EQ(relu6.zero_point, 0);
  QuantParams sym = ActivationParams({-1.0f, 1.0f}, ActivationType::kUInt8);
  EXPECT_FLOAT_EQ(sym.scale, 2.0f / 255.0f);
  EXPECT_EQ(sym.zero_point, 128);  // 127.5 rounds half to even.
  QuantParams positive = ActivationParams({2.0f, 4.0f}, ActivationType::kUInt8);
  EXPECT_FLOAT_EQ(positive.scale, 4.0f / 255.0f);  // Widened to [0, 4].
  EXPECT_EQ(positive.zero_point, 0);
  QuantParams empty = ActivationParams({0.0f, 0.0f}, ActivationType::kUInt8);
  EXPECT_FLOAT_EQ(empty.scale, 1.0f);
}

TEST(QuantParamsTest, Int8ActivationsShiftTheZeroPoint) {
  QuantParams p = ActivationParams({0.0f, 2.55f}, ActivationType::kInt8);
  EXPECT_NEAR(p.scale, 0.01f, 1e-7);
  EXPECT_EQ(p.zero_point, -128);
  // Real 0 maps to an integer exactly.
  EXPECT_EQ(QuantizeValue(0.0f, p.scale, p.zero_point, -128, 127), -128);
}

TEST(QuantParamsTest, QuantizeValueRoundsHalfToEvenAndSaturates) {
  EXPECT_EQ(QuantizeValue(2.5f, 1.0f, 0, -127, 127), 2);
  EXPECT_EQ(QuantizeValue(3.5f, 1.0f, 0, -127, 127), 4);
  EXPECT_EQ(QuantizeValue(-1000.0f, 1.0f, 0, -127, 127), -127);
  EXPECT_EQ(QuantizeValue(1000.0f, 1.0f, 10, 0, 255), 255);
}

TEST(QuantParamsTest, PerChannelWeightsScaleEachOutputChannel) {
  // [2, 3]: channel 0 = row 0 along axis 0; along axis 1 the channels are columns.
  std::vector<float> w = {1.0f, -2.0f, 0.5f, 0.0f, 0.0f, 0.0f};
  auto rows = QuantizeWeight(w, {2, 3}, 0);
  ASSERT_TRUE(rows.ok()) << rows.status();
  ASSERT_EQ(rows->scales.size(), 2u);
  EXPECT_FLOAT_EQ(rows->scales[0], 2.0f / 127.0f);
  EXPECT_FLOAT_EQ(rows->scales[1], 1.0f);  // All-zero channel.
  EXPECT_EQ(rows->values, (std::vector<int8_t>{64, -127, 32, 0, 0, 0}));
  auto cols = QuantizeWeight(w, {2, 3}, 1);
  ASSERT_TRUE(cols.ok());
  ASSERT_EQ(cols->scales.size(), 3u);
  EXPECT_FLOAT_EQ(cols->scales[0], 1.0f / 127.0f);
  EXPECT_FLOAT_EQ(cols->scales[1], 2.0f / 127.0f);
  EXPECT_FLOAT_EQ(cols->scales[2], 0.5f / 127.0f);
  EXPECT_EQ(cols->values, (std::vector<int8_t>{127, -127, 127, 0, 0, 0}));
  auto tensor = QuantizeWeight(w, {2, 3}, -1);
  ASSERT_TRUE(tensor.ok());
  EXPECT_EQ(tensor->scales.size(), 1u);
  EXPECT_FALSE(QuantizeWeight(w, {2, 3}, 2).ok());
  EXPECT_FALSE(QuantizeWeight(w, {2, 2}, 0).ok());
}

TEST(QuantParamsTest, SqnrOfKnownNoise) {
  std::vector<float> ref = {1.0f, 1.0f}, got = {1.0f, 0.0f};
  EXPECT_NEAR(Sqnr(ref, got), 10.0 * std::log10(2.0), 1e-12);
  EXPECT_TRUE(std::isinf(Sqnr(ref, ref)));
}

}  // namespace
}  // namespace cuvil::quantize
