#include "cuvil/runtime/selection_ops.h"

#include <cmath>
#include <vector>

#include "cuvil/runtime/dtype.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(SelectionOpsTest, UniqueWithoutAxisInFirstOccurrenceAndSortedOrder) {
  const std::vector<float> x = {2, 1, 1, 3, 4, 3};
  std::vector<float> y(6, -1);
  std::vector<int64_t> first(6, -1), inverse(6, -1), counts(6, -1);
  ASSERT_EQ(cuvil_rt_unique(x.data(), static_cast<int32_t>(DType::kFloat32), 1, 6, 1, 0, y.data(),
                            first.data(), inverse.data(), counts.data()),
            4);
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 4), (std::vector<float>{2, 1, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(first.begin(), first.begin() + 4),
            (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(inverse, (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(std::vector<int64_t>(counts.begin(), counts.begin() + 4),
            (std::vector<int64_t>{1, 2, 2, 1}));

  ASSERT_EQ(cuvil_rt_unique(x.data(), static_cast<int32_t>(DType::kFloat32), 1, 6, 1, 1, y.data(),
                            first.data(), inverse.data(), counts.data()),
            4);
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 4), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(std::vector<int64_t>(first.begin(), first.begin() + 4),
            (std::vector<int64_t>{1, 0, 3, 4}));
  EXPECT_EQ(inverse, (std::vector<int64_t>{1, 0, 0, 2, 3, 2}));
}

TEST(SelectionOpsTest, UniqueAlongAnAxisComparesWholeSlices) {
  // x[2][3] viewed along axis 1: columns (1,4), (1,4), (0,5) → sorted (0,5), (1,4).
  const std::vector<int64_t> x = {1, 1, 0, 4, 4, 5};
  std::vector<int64_t> y(6, -1), first(3, -1), inverse(3, -1), counts(3, -1);
  ASSERT_EQ(cuvil_rt_unique(x.data(), static_cast<int32_t>(DType::kInt64), 2, 3, 1, 1, y.data(),
                            first.data(), inverse.data(), counts.data()),
            2);
  EXPECT_EQ(std::vector<int64_t>(y.begin(), y.begin() + 4), (std::vector<int64_t>{0, 1, 5, 4}));
  EXPECT_EQ(inverse, (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(std::vector<int64_t>(counts.begin(), counts.begin() + 2), (std::vector<int64_t>{1, 2}));
}

TEST(SelectionOpsTest, UniqueOptionalOutputsNansAndBadTypes) {
  const std::vector<double> x = {NAN, 1, NAN, 1};
  std::vector<double> y(4, 0);
  ASSERT_EQ(cuvil_rt_unique(x.data(), static_cast<int32_t>(DType::kFloat64), 1, 4, 1, 1, y.data(),
                            nullptr, nullptr, nullptr),
            2);
  EXPECT_EQ(y[0], 1);
  EXPECT_TRUE(std::isnan(y[1]));
  EXPECT_EQ(cuvil_rt_unique(x.data(), static_cast<int32_t>(DType::kFloat16), 1, 4, 1, 1, y.data(),
                            nullptr, nullptr, nullptr),
            -1);
  EXPECT_EQ(cuvil_rt_unique(x.data(), static_cast<int32_t>(DType::kFloat64), 1, 0, 1, 1, y.data(),
                            nullptr, nullptr, nullptr),
            0);
}

TEST(SelectionOpsTest, NmsSuppressesOverlapsPerClassAndHonoursLimits) {
  // Boxes 0 and 1 overlap (IoU 0.81), box 2 is apart; box 3 has no area.
  const std::vector<float> boxes = {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 10, 1, 11, 5, 5, 5, 6};
  const std::vector<float> scores = {0.9f, 0.95f, 0.3f, 0.8f,    // class 0
                                     0.1f, 0.2f,  0.7f, 0.05f};  // class 1
  std::vector<int64_t> out(2 * 4 * 3, -1);
  int64_t n = cuvil_rt_nms(boxes.data(), scores.data(), 1, 2, 4, 10, 0.5f, 0, 0, 0, out.data());
  ASSERT_EQ(n, 6);
  EXPECT_EQ(std::vector<int64_t>(out.begin(), out.begin() + 18),
            (std::vector<int64_t>{0, 0, 1, 0, 0, 3, 0, 0, 2,  // 0 suppressed by 1
                                  0, 1, 2, 0, 1, 1, 0, 1, 3}));
  // A score threshold and a per-class limit of one.
  n = cuvil_rt_nms(boxes.data(), scores.data(), 1, 2, 4, 1, 0.5f, 0.5f, 1, 0, out.data());
  ASSERT_EQ(n, 2);
  EXPECT_EQ(std::vector<int64_t>(out.begin(), out.begin() + 6),
            (std::vector<int64_t>{0, 0, 1, 0, 1, 2}));
  EXPECT_EQ(cuvil_rt_nms(boxes.data(), scores.data(), 1, 2, 4, 0, 0.5f, 0, 0, 0, out.data()), 0);
  // Centre format: (0.5, 0.5, 1, 1) is box 0; a flipped corner order reads the same box.
  const std::vector<float> centre = {0.5f, 0.5f, 1, 1, 0.5f, 0.55f, 1, 1};
  const std::vector<float> two = {0.9f, 0.8f};
  EXPECT_EQ(cuvil_rt_nms(centre.data(), two.data(), 1, 1, 2, 5, 0.5f, 0, 0, 1, out.data()), 1);
  const std::vector<float> flipped = {1, 1, 0, 0, 0, 0, 1, 1};
  EXPECT_EQ(cuvil_rt_nms(flipped.data(), two.data(), 1, 1, 2, 5, 0.5f, 0, 0, 0, out.data()), 1);
}

}  // namespace
}  // namespace cuvil
