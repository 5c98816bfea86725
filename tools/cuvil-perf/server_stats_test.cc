#include "server_stats.h"

#include "gtest/gtest.h"

namespace cuvil::perf {
namespace {

TEST(ServerSplitTest, AveragesOverTheWindow) {
  ServerStats before;
  before.inference_count = 100;
  before.execution_count = 50;
  before.success = {50, 0};
  before.queue = {50, 5'000'000};
  before.compute_infer = {50, 10'000'000};
  before.batch_compute_infer[2] = {50, 10'000'000};
  ServerStats after = before;
  after.inference_count += 320;  // 10 batches of 32.
  after.execution_count += 10;
  after.success = {60 + 320 - 10, 0};
  after.queue = {50 + 320, 5'000'000 + 320 * 1'500'000ull};
  after.compute_input = {320, 320 * 20'000ull};
  after.compute_infer = {50 + 320, 10'000'000 + 320 * 4'000'000ull};
  after.compute_output = {320, 320 * 10'000ull};
  after.batch_compute_infer[32] = {10, 40'000'000};
  after.fail = {3, 0};

  ServerSplit s = Diff(before, after, 2.0);
  EXPECT_DOUBLE_EQ(s.infer_per_sec, 160);
  EXPECT_EQ(s.failures, 3u);
  EXPECT_DOUBLE_EQ(s.queue_us, 1500);
  EXPECT_DOUBLE_EQ(s.compute_input_us, 20);
  EXPECT_DOUBLE_EQ(s.compute_infer_us, 4000);
  EXPECT_DOUBLE_EQ(s.compute_output_us, 10);
  EXPECT_DOUBLE_EQ(s.avg_batch, 32);
  EXPECT_EQ(s.largest_batch, 32u);
  EXPECT_DOUBLE_EQ(s.largest_batch_infer_us, 4000);
}

TEST(ServerSplitTest, LargestBatchIgnoresSizesNotRunInTheWindow) {
  ServerStats before;
  before.batch_compute_infer[32] = {5, 5'000};
  ServerStats after = before;
  after.batch_compute_infer[4] = {2, 4'000};
  ServerSplit s = Diff(before, after, 1.0);
  EXPECT_EQ(s.largest_batch, 4u);
  EXPECT_DOUBLE_EQ(s.largest_batch_infer_us, 2);
}

TEST(ServerSplitTest, IdleAndResetCountersGiveZeros) {
  ServerStats before;
  before.inference_count = 10;
  before.execution_count = 10;
  ServerStats after;  // The model was reloaded: counters restarted.
  ServerSplit s = Diff(before, after, 1.0);
  EXPECT_EQ(s.infer_per_sec, 0);
  EXPECT_EQ(s.avg_batch, 0);
  EXPECT_EQ(s.queue_us, 0);
  EXPECT_EQ(s.largest_batch, 0u);
  EXPECT_EQ(Diff(before, before, 0).infer_per_sec, 0);
}

}  // namespace
}  // namespace cuvil::perf
