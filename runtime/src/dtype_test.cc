#include "cuvil/runtime/dtype.h"

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8);
  EXPECT_EQ(DTypeSize(DType::kBool), 1);
  EXPECT_STREQ(DTypeName(DType::kUInt8), "uint8");
  EXPECT_STREQ(DTypeKServeName(DType::kFloat32), "FP32");
}

TEST(DTypeTest, KServeRoundTrip) {
  for (DType d :
       {DType::kFloat32, DType::kInt8, DType::kUInt8, DType::kInt32, DType::kInt64, DType::kBool}) {
    auto parsed = DTypeFromKServeName(DTypeKServeName(d));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, d);
  }
  EXPECT_FALSE(DTypeFromKServeName("FP8").ok());
}

TEST(DTypeTest, OnnxUnsupportedTypeIsError) {
  EXPECT_EQ(*DTypeFromOnnx(10), DType::kFloat16);
  EXPECT_EQ(*DTypeFromOnnx(8), DType::kString);
  EXPECT_FALSE(DTypeFromOnnx(14).ok());             // complex64
  EXPECT_FALSE(DTypeFromKServeName("BYTES").ok());  // Not decoded from the wire.
  EXPECT_EQ(*DTypeFromOnnx(1), DType::kFloat32);
}

}  // namespace
}  // namespace cuvil
