#include "latency_stats.h"

#include <vector>

#include "gtest/gtest.h"

namespace cuvil::perf {
namespace {

TEST(PercentileTest, NearestRank) {
  std::vector<int64_t> v = {10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 90), 90);
  EXPECT_EQ(Percentile(v, 91), 100);
  EXPECT_EQ(Percentile(v, 99), 100);
  EXPECT_EQ(Percentile(v, 100), 100);
  EXPECT_EQ(Percentile(v, 0.1), 10);
  EXPECT_EQ(Percentile(v, 10), 10);
  EXPECT_EQ(Percentile(v, 10.5), 20);
}

TEST(PercentileTest, EdgeCases) {
  EXPECT_EQ(Percentile({}, 50), 0);
  EXPECT_EQ(Percentile({7}, 1), 7);
  EXPECT_EQ(Percentile({7}, 100), 7);
  EXPECT_EQ(Percentile({1, 2}, 50), 1);
  EXPECT_EQ(Percentile({1, 2}, 51), 2);
}

TEST(PercentileTest, HundredValues) {
  std::vector<int64_t> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 50), 50);
  EXPECT_EQ(Percentile(v, 95), 95);
  EXPECT_EQ(Percentile(v, 99), 99);
  EXPECT_EQ(Percentile(v, 99.9), 100);
}

TEST(SummarizeTest, SortsAndConvertsToMicroseconds) {
  std::vector<int64_t> ns;
  for (int i = 1000; i >= 1; --i) ns.push_back(i * 1000);  // 1..1000 us, descending.
  LatencySummary s = Summarize(&ns, 99.9);
  EXPECT_EQ(s.count, 1000u);
  EXPECT_DOUBLE_EQ(s.mean_us, 500.5);
  EXPECT_DOUBLE_EQ(s.p50_us, 500);
  EXPECT_DOUBLE_EQ(s.p90_us, 900);
  EXPECT_DOUBLE_EQ(s.p95_us, 950);
  EXPECT_DOUBLE_EQ(s.p99_us, 990);
  EXPECT_DOUBLE_EQ(s.extra_percentile, 99.9);
  EXPECT_DOUBLE_EQ(s.extra_us, 999);
}

TEST(SummarizeTest, Empty) {
  std::vector<int64_t> ns;
  LatencySummary s = Summarize(&ns, 99);
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.p99_us, 0);
  EXPECT_EQ(s.mean_us, 0);
}

}  // namespace
}  // namespace cuvil::perf
