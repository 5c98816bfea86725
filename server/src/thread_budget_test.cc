#include "thread_budget.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

TEST(ThreadBudgetTest, SizesFromTheCoreCount) {
  ThreadBudget b = ComputeThreadBudget(8, 32);
  EXPECT_EQ(b.cores, 8);
  EXPECT_EQ(b.intra_op_pool, 7);
  EXPECT_EQ(b.grpc_threads, 8);
  EXPECT_EQ(b.grpc_blocking_threads, 4);
  EXPECT_EQ(b.http_threads, 32);
}

TEST(ThreadBudgetTest, DegenerateInputsAreClamped) {
  ThreadBudget b = ComputeThreadBudget(0, 0);
  EXPECT_EQ(b.cores, 1);
  EXPECT_EQ(b.intra_op_pool, 0);
  EXPECT_EQ(b.grpc_threads, 1);
  EXPECT_EQ(b.http_threads, 1);
}

TEST(ThreadBudgetTest, ExecutionAboveTheCoresIsFlagged) {
  SchedulerOptions fits;
  fits.instance_count = 2;
  fits.intra_op_threads = 1;
  EXPECT_FALSE(Oversubscribes(fits, 2));
  EXPECT_THAT(DescribeModelThreads("mlp", 1, fits, 2), ::testing::Not(HasSubstr("above the")));
  SchedulerOptions over = fits;
  over.intra_op_threads = 2;
  EXPECT_TRUE(Oversubscribes(over, 2));
  EXPECT_THAT(DescribeModelThreads("mlp", 1, over, 2),
              HasSubstr("2 instance worker(s) x 2 intra-op thread(s) (above the 2 cores"));
}

TEST(ThreadBudgetTest, DescriptionNamesEverySize) {
  std::string line = DescribeThreadBudget(ComputeThreadBudget(2, 3));
  EXPECT_THAT(line, HasSubstr("2 cores"));
  EXPECT_THAT(line, HasSubstr("gRPC 2 completion-queue threads run every method"));
  EXPECT_THAT(line, HasSubstr("4 more for calls that block"));
  EXPECT_THAT(line, HasSubstr("HTTP 3 connection threads"));
  EXPECT_THAT(line, HasSubstr("intra-op pool 1 workers"));
}

}  // namespace
}  // namespace cuvil
