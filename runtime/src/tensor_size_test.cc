#include "cuvil/runtime/tensor_size.h"

#include <limits>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(TensorSizeTest, CountsElementsAndBytes) {
  EXPECT_EQ(*CheckedElementCount({2, 3, 4}), 24);
  EXPECT_EQ(*CheckedElementCount({}), 1);
  EXPECT_EQ(*CheckedElementCount({5, 0}), 0);
  EXPECT_EQ(*CheckedTensorBytes(DType::kFloat32, {1, 784}), 3136u);
  EXPECT_EQ(*CheckedTensorBytes(DType::kInt64, {}), 8u);
}

TEST(TensorSizeTest, RejectsNegativeDims) {
  EXPECT_EQ(CheckedElementCount({2, -1}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CheckedTensorBytes(DType::kFloat32, {-3}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TensorSizeTest, RejectsProductsThatWrap) {
  // 2^32 * 2^32 wraps to 0 in 64-bit arithmetic: a plain product would accept it as empty.
  const int64_t big = int64_t{1} << 32;
  EXPECT_FALSE(CheckedElementCount({big, big}).ok());
  // 2^62 elements fit int64, but 2^62 * 4 bytes wraps.
  EXPECT_FALSE(CheckedTensorBytes(DType::kFloat32, {int64_t{1} << 62}).ok());
  EXPECT_FALSE(CheckedTensorBytes(DType::kFloat32, {std::numeric_limits<int64_t>::max(), 2}).ok());
}

TEST(TensorSizeTest, EnforcesTheTensorLimit) {
  EXPECT_TRUE(CheckedTensorBytes(DType::kUInt8, {int64_t{1} << 40}).ok());
  EXPECT_FALSE(CheckedTensorBytes(DType::kUInt8, {(int64_t{1} << 40) + 1}).ok());
  EXPECT_FALSE(CheckedTensorBytes(DType::kFloat32, {int64_t{1} << 39}).ok());
}

TEST(TensorSizeTest, CheckedArithmetic) {
  int64_t r = 0;
  EXPECT_TRUE(CheckedMul(3, 4, &r));
  EXPECT_EQ(r, 12);
  EXPECT_FALSE(CheckedMul(std::numeric_limits<int64_t>::max(), 2, &r));
  EXPECT_FALSE(CheckedMul(-1, 2, &r));
  EXPECT_TRUE(CheckedAdd(3, 4, &r));
  EXPECT_EQ(r, 7);
  EXPECT_FALSE(CheckedAdd(std::numeric_limits<int64_t>::max(), 1, &r));
}

}  // namespace
}  // namespace cuvil
