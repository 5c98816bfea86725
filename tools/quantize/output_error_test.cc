#include "output_error.h"

#include <vector>

#include "gtest/gtest.h"

namespace cuvil::quantize {
namespace {

TEST(OutputErrorTest, RowArgmaxPicksTheFirstLargest) {
  std::vector<float> v = {1, 3, 3, 0, -1, -2, -5, 4, 9};
  EXPECT_EQ(RowArgmax(v, 3), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(RowArgmax(v, 4), (std::vector<int64_t>{1, 3}));  // The partial row is ignored.
}

TEST(OutputErrorTest, AccumulatesCosineMaxErrorAndTop1OverRuns) {
  OutputError e;
  std::vector<float> ref1 = {1, 0, 0, 1}, got1 = {1, 0, 0, 1};
  std::vector<float> ref2 = {0, 2}, got2 = {2, 0};  // Orthogonal, top-1 flips.
  e.Add(ref1, got1, 2);
  e.Add(ref2, got2, 2);
  // dot = 2, |ref|^2 = 6, |got|^2 = 6.
  EXPECT_NEAR(e.cosine(), 2.0 / 6.0, 1e-12);
  EXPECT_DOUBLE_EQ(e.max_abs_error(), 2.0);
  EXPECT_EQ(e.rows(), 3);
  EXPECT_EQ(e.top1_matches(), 2);
  OutputError zero;
  EXPECT_DOUBLE_EQ(zero.cosine(), 1.0);
}

}  // namespace
}  // namespace cuvil::quantize
