#include "cuvil/scheduler/request_validation.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

const TensorSpec kFixed{"input", DType::kFloat32, {784}, true};
const TensorSpec kVarying{"tokens", DType::kFloat32, {-1, -1}, true};

TEST(RequestValidationTest, AcceptsMatchingTensors) {
  auto rows = ValidateInputTensor(kFixed, true, 8, {3, 784}, 3 * 784 * 4);
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_EQ(*rows, 3);
  EXPECT_EQ(*ValidateInputTensor(kVarying, true, 8, {2, 5, 7}, 2 * 5 * 7 * 4), 2);
  EXPECT_EQ(*ValidateInputTensor({"s", DType::kInt64, {}, false}, false, 0, {}, 8), 1);
}

TEST(RequestValidationTest, RejectsShapesTheCodeDoesNotRead) {
  auto narrow = ValidateInputTensor(kFixed, true, 8, {1, 1}, 4);
  EXPECT_EQ(narrow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(narrow.status().message(), HasSubstr("expected shape [-1,784], got [1,1]"));
  EXPECT_FALSE(ValidateInputTensor(kFixed, true, 8, {1, 0}, 0).ok());
  EXPECT_FALSE(ValidateInputTensor(kFixed, true, 8, {784}, 784 * 4).ok());
  EXPECT_FALSE(ValidateInputTensor(kVarying, true, 8, {1, -1, 4}, 0).ok());
}

TEST(RequestValidationTest, RejectsBatchOutsideLimits) {
  EXPECT_THAT(ValidateInputTensor(kFixed, true, 8, {9, 784}, 9 * 784 * 4).status().message(),
              HasSubstr("batch size 9 is outside 1..8"));
  EXPECT_FALSE(ValidateInputTensor(kFixed, true, 8, {0, 784}, 0).ok());
}

TEST(RequestValidationTest, RejectsByteCountsThatDoNotMatch) {
  EXPECT_THAT(ValidateInputTensor(kFixed, true, 8, {1, 784}, 100).status().message(),
              HasSubstr("needs 3136 bytes, got 100"));
}

TEST(RequestValidationTest, RejectsShapesWhoseSizeWraps) {
  // 2^32 x 2^32 x 4 bytes wraps to 0 in 64 bits: an unchecked product accepts an empty body.
  const int64_t big = int64_t{1} << 32;
  auto wrapped = ValidateInputTensor(kVarying, true, 8, {1, big, big}, 0);
  EXPECT_EQ(wrapped.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrapped.status().message(), HasSubstr("input 'tokens'"));
}

}  // namespace
}  // namespace cuvil
