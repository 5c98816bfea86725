#include "sequence_plan.h"

#include <map>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::perf {
namespace {

PerfOptions Options(int64_t length, double variation, uint64_t first, uint64_t last) {
  PerfOptions o;
  o.sequence_length = length;
  o.sequence_length_variation = variation;
  o.sequence_id_start = first;
  o.sequence_id_end = last;
  return o;
}

TEST(SequencePlanTest, FixedLengthSequencesStartAndEnd) {
  SequencePlan plan(Options(3, 0, 10, 100), 2);
  std::vector<SequenceStep> steps;
  for (int i = 0; i < 7; ++i) steps.push_back(plan.Next(0));
  EXPECT_TRUE(steps[0].start);
  EXPECT_FALSE(steps[0].end);
  EXPECT_EQ(steps[0].id, 10u);
  EXPECT_EQ(steps[1].id, 10u);
  EXPECT_FALSE(steps[1].start || steps[1].end);
  EXPECT_TRUE(steps[2].end);
  EXPECT_EQ(steps[2].number, 3);
  EXPECT_TRUE(steps[3].start);
  EXPECT_EQ(steps[3].id, 11u);  // The next id.
  EXPECT_EQ(steps[6].id, 12u);
  EXPECT_EQ(plan.started(), 3u);
  EXPECT_EQ(plan.completed(), 2u);
  // The open one is closed with an END step carrying its next number.
  std::vector<SequenceStep> close = plan.CloseOpen();
  ASSERT_EQ(close.size(), 1u);
  EXPECT_EQ(close[0].id, 12u);
  EXPECT_TRUE(close[0].end);
  EXPECT_EQ(close[0].number, 2);
  EXPECT_TRUE(plan.CloseOpen().empty());
}

TEST(SequencePlanTest, IdsWrapAndSkipOpenOnes) {
  // Ids 1..3, two slots: slot 0 keeps id 1 open while slot 1 cycles through the others.
  SequencePlan plan(Options(1000, 0, 1, 3), 2);
  EXPECT_EQ(plan.Next(0).id, 1u);
  std::multiset<uint64_t> seen;
  PerfOptions one_step = Options(1, 0, 1, 3);
  SequencePlan short_plan(one_step, 2);
  EXPECT_EQ(short_plan.Next(0).id, 1u);  // Ends at once (length 1).
  EXPECT_EQ(short_plan.Next(1).id, 2u);
  EXPECT_EQ(short_plan.Next(1).id, 3u);
  EXPECT_EQ(short_plan.Next(1).id, 1u);  // Wrapped.
  for (int i = 0; i < 4; ++i) seen.insert(plan.Next(1).id);
  EXPECT_EQ(seen.count(1), 0u);  // Never id 1 while slot 0 holds it.
  EXPECT_TRUE(SequencePlan::Check(Options(5, 0, 1, 3), 2).ok());
  EXPECT_THAT(std::string(SequencePlan::Check(Options(5, 0, 1, 2), 2).message()),
              ::testing::HasSubstr("holds 2 ids"));
}

TEST(SequencePlanTest, LengthsVaryWithinTheBand) {
  SequencePlan plan(Options(10, 20, 1, 1000000), 1);
  std::set<int64_t> lengths;
  for (int s = 0; s < 200; ++s) {
    int64_t n = 0;
    SequenceStep step;
    do {
      step = plan.Next(0);
      ++n;
    } while (!step.end);
    lengths.insert(n);
  }
  EXPECT_GE(*lengths.begin(), 8);
  EXPECT_LE(*lengths.rbegin(), 12);
  EXPECT_GT(lengths.size(), 3u);  // Not all the same.
}

TEST(SequencePlanTest, AbandonStartsANewSequence) {
  SequencePlan plan(Options(5, 0, 1, 100), 1);
  EXPECT_TRUE(plan.Next(0).start);
  plan.Abandon(0);
  SequenceStep next = plan.Next(0);
  EXPECT_TRUE(next.start);
  EXPECT_EQ(next.id, 2u);
  EXPECT_EQ(next.number, 1);
}

TEST(SequencePlanTest, AcquireHandsOutFreeSlotsInTurn) {
  SequencePlan plan(Options(5, 0, 1, 100), 3);
  EXPECT_EQ(plan.Acquire(), 0);
  EXPECT_EQ(plan.Acquire(), 1);
  plan.Release(0);
  EXPECT_EQ(plan.Acquire(), 2);
  EXPECT_EQ(plan.Acquire(), 0);
}

}  // namespace
}  // namespace cuvil::perf
