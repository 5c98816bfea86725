#include "cuvil/observability/metrics.h"

#include <atomic>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::observability {
namespace {

class FakeClock final : public Clock {
 public:
  int64_t NowNanos() const override { return now_.load(); }
  void Advance(int64_t ns) { now_ += ns; }

 private:
  std::atomic<int64_t> now_{1'000'000'000'000};
};

constexpr int64_t kSecond = 1'000'000'000;

SummaryOptions WithClock(const Clock* clock, int64_t window_ns = 60 * kSecond,
                         int sub_windows = 6) {
  SummaryOptions o;
  o.clock = clock;
  o.window_ns = window_ns;
  o.sub_windows = sub_windows;
  return o;
}

TEST(CounterTest, CountsExactly) {
  Counter c;
  for (int i = 0; i < 1000; ++i) c.Increment();
  c.Increment(5);
  EXPECT_EQ(c.Value(), 1005u);
}

TEST(CounterTest, ConcurrentIncrementsSumExactly) {
  Counter c;
  Histogram h({1, 2, 3});
  constexpr int kThreads = 4;
  constexpr int kPerThread = 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        c.Increment();
        h.Observe(t % 2 == 0 ? 1.0 : 2.5);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.Value(), uint64_t{kThreads} * kPerThread);
  MetricPoint p;
  h.Snapshot(&p);
  EXPECT_EQ(p.count, uint64_t{kThreads} * kPerThread);
  EXPECT_THAT(p.cumulative_counts, ::testing::ElementsAre(2 * kPerThread, 2 * kPerThread,
                                                          4 * kPerThread, 4 * kPerThread));
  EXPECT_DOUBLE_EQ(p.sum, 2.0 * kPerThread * 1.0 + 2.0 * kPerThread * 2.5);
}

TEST(GaugeTest, SetAndAdd) {
  Gauge g;
  g.Set(3);
  g.Add(-1.5);
  EXPECT_DOUBLE_EQ(g.Value(), 1.5);
}

TEST(HistogramTest, LeSemanticsAndCumulativeCounts) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 1.0, 5.0, 100.0, 1000.0}) h.Observe(v);
  MetricPoint p;
  h.Snapshot(&p);
  // <=0.1: 0.05, 0.1; <=1: +0.5, 1.0; <=10: +5; +Inf: +100, 1000.
  EXPECT_THAT(p.cumulative_counts, ::testing::ElementsAre(2, 4, 5, 7));
  EXPECT_EQ(p.count, 7u);
  EXPECT_DOUBLE_EQ(p.sum, 0.05 + 0.1 + 0.5 + 1.0 + 5.0 + 100.0 + 1000.0);
  EXPECT_THAT(p.bucket_bounds, ::testing::ElementsAre(0.1, 1, 10));
}

TEST(SummaryTest, BucketIndexIsMonotonicAndAccurate) {
  size_t prev = 0;
  for (double v = 1e-9; v < 1000; v *= 1.01) {
    const size_t b = Summary::BucketIndex(v);
    ASSERT_GE(b, prev);
    prev = b;
    if (v > 2e-9) {
      EXPECT_NEAR(Summary::BucketValue(b) / v, 1.0, 0.016) << v;
    }
  }
  EXPECT_EQ(Summary::BucketIndex(0), 0u);
  EXPECT_EQ(Summary::BucketIndex(-1), 0u);
  EXPECT_EQ(Summary::BucketIndex(NAN), 0u);
  EXPECT_EQ(Summary::BucketIndex(1e9), Summary::kBuckets - 1);
}

TEST(SummaryTest, QuantilesOfKnownDistribution) {
  FakeClock clock;
  Summary s(WithClock(&clock));
  // 1..10000 microseconds, shuffled: the q-quantile is q * 10 ms.
  std::vector<int> values(10000);
  for (int i = 0; i < 10000; ++i) values[i] = i + 1;
  std::shuffle(values.begin(), values.end(), std::mt19937(42));
  for (int v : values) s.Observe(v * 1e-6);
  EXPECT_NEAR(s.Quantile(0.5), 5e-3, 5e-3 * 0.02);
  EXPECT_NEAR(s.Quantile(0.9), 9e-3, 9e-3 * 0.02);
  EXPECT_NEAR(s.Quantile(0.99), 9.9e-3, 9.9e-3 * 0.02);
  MetricPoint p;
  s.Snapshot(&p);
  ASSERT_EQ(p.quantiles.size(), 3u);
  EXPECT_EQ(p.quantiles[0].first, 0.5);
  EXPECT_NEAR(p.quantiles[2].second, 9.9e-3, 9.9e-3 * 0.02);
  EXPECT_EQ(p.count, 10000u);
  EXPECT_NEAR(p.sum, 10000.0 * 10001 / 2 * 1e-6, 1e-6);
}

TEST(SummaryTest, WindowForgetsOldSamples) {
  FakeClock clock;
  Summary s(WithClock(&clock, 60 * kSecond, 6));
  EXPECT_TRUE(std::isnan(s.Quantile(0.5)));
  for (int i = 0; i < 1000; ++i) s.Observe(1.0);  // old, slow samples
  clock.Advance(30 * kSecond);
  for (int i = 0; i < 100; ++i) s.Observe(0.001);
  // Both still in the window: the median is the slow one.
  EXPECT_NEAR(s.Quantile(0.5), 1.0, 0.02);
  clock.Advance(35 * kSecond);  // 65 s after the slow samples, 35 s after the fast ones
  EXPECT_NEAR(s.Quantile(0.5), 0.001, 0.001 * 0.02);
  EXPECT_NEAR(s.Quantile(0.99), 0.001, 0.001 * 0.02);
  clock.Advance(60 * kSecond);
  EXPECT_TRUE(std::isnan(s.Quantile(0.5)));
  // Cumulative _count/_sum do not forget.
  MetricPoint p;
  s.Snapshot(&p);
  EXPECT_EQ(p.count, 1100u);
  EXPECT_NEAR(p.sum, 1000.1, 1e-9);
  // A recycled sub-window starts from zero.
  s.Observe(0.25);
  EXPECT_NEAR(s.Quantile(0.99), 0.25, 0.25 * 0.02);
}

TEST(SummaryTest, ConcurrentObserveCountsExactly) {
  Summary s(SummaryOptions{});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50000; ++i) s.Observe(0.002);
    });
  }
  for (auto& t : threads) t.join();
  MetricPoint p;
  s.Snapshot(&p);
  EXPECT_EQ(p.count, 200000u);
  EXPECT_NEAR(p.sum, 400.0, 1e-6);
  EXPECT_NEAR(p.quantiles[1].second, 0.002, 0.002 * 0.02);
}

TEST(FamilyTest, ChildrenPerLabelValuesAreStable) {
  Registry r;
  Family<Counter>* f = *r.AddCounter("requests", "Requests.", {"model", "version"});
  auto a = f->WithLabels({"m", "1"});
  auto b = f->WithLabels({"m", "1"});
  auto c = f->WithLabels({"m", "2"});
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_EQ(f->WithLabels({"only-one"}), nullptr);
  a->Increment(3);
  f->Remove({"m", "1"});
  a->Increment();  // still valid after Remove
  EXPECT_EQ(a->Value(), 4u);
  std::vector<MetricFamilySnapshot> snap = r.Collect();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].points.size(), 1u);
  EXPECT_EQ(snap[0].points[0].labels, (std::vector<Label>{{"model", "m"}, {"version", "2"}}));
  // Re-creating after Remove gives a fresh child.
  EXPECT_EQ(f->WithLabels({"m", "1"})->Value(), 0u);
}

TEST(FamilyTest, ConcurrentChildCreationAndRecording) {
  Registry r;
  Family<Counter>* f = *r.AddCounter("c", "", {"k"});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) f->WithLabels({i % 2 ? "odd" : "even"})->Increment();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(f->WithLabels({"odd"})->Value(), 20000u);
  EXPECT_EQ(f->WithLabels({"even"})->Value(), 20000u);
}

TEST(RegistryTest, RejectsBadRegistrations) {
  Registry r;
  EXPECT_TRUE(r.AddCounter("ok", "", {}).ok());
  EXPECT_EQ(r.AddGauge("ok", "", {}).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(r.AddCounter("x_total", "", {}).ok());
  EXPECT_TRUE(r.AddCounter("y_total", "", {}, "", /*total_suffix=*/false).ok());
  EXPECT_FALSE(r.AddGauge("1bad", "", {}).ok());
  EXPECT_FALSE(r.AddGauge("bad-name", "", {}).ok());
  EXPECT_FALSE(r.AddGauge("g1", "", {"__reserved"}).ok());
  EXPECT_FALSE(r.AddGauge("g2", "", {"a", "a"}).ok());
  EXPECT_FALSE(r.AddGauge("g3", "", {}, "seconds").ok());
  EXPECT_TRUE(r.AddGauge("g3_seconds", "", {}, "seconds").ok());
  EXPECT_FALSE(r.AddHistogram("h1", "", {}, {1, 1}).ok());
  EXPECT_FALSE(r.AddHistogram("h2", "", {}, {1, INFINITY}).ok());
  EXPECT_FALSE(r.AddHistogram("h3", "", {"le"}, {1}).ok());
  EXPECT_FALSE(r.AddSummary("s1", "", {"quantile"}, {}).ok());
  SummaryOptions bad_quantile;
  bad_quantile.quantiles = {1.5};
  EXPECT_FALSE(r.AddSummary("s2", "", {}, bad_quantile).ok());
  EXPECT_TRUE(IsValidMetricName("a:b_c9"));
  EXPECT_FALSE(IsValidLabelName("a:b"));
}

}  // namespace
}  // namespace cuvil::observability
