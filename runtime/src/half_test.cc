#include "cuvil/runtime/half.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(HalfTest, Float16KnownValues) {
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToHalf(70000.0f), 0x7c00);                // overflow: infinity
  EXPECT_EQ(FloatToHalf(5.9604644775390625e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToHalf(2.98e-8f), 0x0000);                // below half of it: zero
  EXPECT_EQ(FloatToHalf(1.0f + 1.0f / 2048), 0x3c00);      // tie rounds to even
  EXPECT_EQ(FloatToHalf(1.0f + 3.0f / 2048), 0x3c02);      // tie rounds to even (up)
  EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(HalfToFloat(0x3555), 0.333251953125f);
  EXPECT_EQ(HalfToFloat(0x8001), -5.9604644775390625e-8f);
}

TEST(HalfTest, Float16RoundTripsEveryValue) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    uint16_t h = static_cast<uint16_t>(bits);
    float f = HalfToFloat(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(FloatToHalf(f), h) << bits;
  }
}

TEST(HalfTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(BFloat16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.00390625f), 0x3f80);  // tie: even
  EXPECT_EQ(FloatToBFloat16(1.01171875f), 0x3f82);  // tie: even (up)
  EXPECT_EQ(FloatToBFloat16(1.005f), 0x3f81);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
}

}  // namespace
}  // namespace cuvil
