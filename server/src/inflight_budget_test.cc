#include "inflight_budget.h"

#include <unistd.h>

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

TEST(InflightBudgetTest, RefusesAtOnceAboveTheLimitAndFreesOnRelease) {
  InflightBudget budget(100);
  absl::StatusOr<InflightBudget::Reservation> a = budget.Reserve(60, "request");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(budget.in_flight(), 60u);
  absl::StatusOr<InflightBudget::Reservation> b = budget.Reserve(41, "request");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(b.status().message(), HasSubstr("--max-inflight-bytes"));
  EXPECT_THAT(b.status().message(), HasSubstr("60 bytes of requests already in flight"));
  EXPECT_EQ(budget.in_flight(), 60u);  // A refusal holds nothing.
  absl::StatusOr<InflightBudget::Reservation> c = budget.Reserve(40, "request");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(budget.in_flight(), 100u);
  a->Release();
  a->Release();  // Idempotent.
  EXPECT_EQ(budget.in_flight(), 40u);
  {
    InflightBudget::Reservation moved = *std::move(c);
    EXPECT_EQ(moved.bytes(), 40u);
    EXPECT_EQ(budget.in_flight(), 40u);
  }
  EXPECT_EQ(budget.in_flight(), 0u);
}

TEST(InflightBudgetTest, ARequestLargerThanTheLimitIsAlwaysRefused) {
  InflightBudget budget(100);
  absl::StatusOr<InflightBudget::Reservation> r = budget.Reserve(101, "gRPC ModelInfer");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(r.status().message(), HasSubstr("gRPC ModelInfer of 101 bytes is larger than"));
  // Huge values do not wrap around.
  EXPECT_FALSE(budget.Reserve(UINT64_MAX, "request").ok());
  EXPECT_EQ(budget.in_flight(), 0u);
}

TEST(InflightBudgetTest, ExtendGrowsAReservationOrLeavesItAsItWas) {
  InflightBudget budget(100);
  InflightBudget::Reservation r;  // Empty: Extend takes it from the budget.
  ASSERT_TRUE(budget.Extend(&r, 30, "an HTTP request body").ok());
  ASSERT_TRUE(budget.Extend(&r, 30, "an HTTP request body").ok());
  EXPECT_EQ(r.bytes(), 60u);
  EXPECT_EQ(budget.in_flight(), 60u);
  absl::StatusOr<InflightBudget::Reservation> other = budget.Reserve(30, "request");
  ASSERT_TRUE(other.ok());
  // 60 + 20 with 30 of another request: over the limit, refused as busy, nothing more held.
  absl::Status busy = budget.Extend(&r, 20, "an HTTP request body");
  EXPECT_EQ(busy.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(busy.message(), HasSubstr("server is busy: an HTTP request body of 80 bytes with 30 "
                                        "bytes of other requests already in flight"));
  EXPECT_EQ(r.bytes(), 60u);
  EXPECT_EQ(budget.in_flight(), 90u);
  // On its own larger than the limit: refused whatever else is in flight.
  absl::Status alone = budget.Extend(&r, 41, "an HTTP request body");
  EXPECT_THAT(alone.message(), HasSubstr("an HTTP request body of 101 bytes is larger than the "
                                         "100 bytes all requests in flight may hold"));
  EXPECT_FALSE(budget.Extend(&r, UINT64_MAX, "x").ok());  // No wrap-around.
  other->Release();
  ASSERT_TRUE(budget.Extend(&r, 40, "x").ok());
  EXPECT_EQ(budget.in_flight(), 100u);
  r.Release();
  EXPECT_EQ(budget.in_flight(), 0u);
}

TEST(InflightBudgetTest, ZeroIsUnlimited) {
  InflightBudget budget(0);
  auto a = budget.Reserve(uint64_t{1} << 62, "request");
  auto b = budget.Reserve(uint64_t{1} << 62, "request");
  EXPECT_TRUE(a.ok());
  EXPECT_TRUE(b.ok());
}

TEST(InflightBudgetTest, MoveAssignmentReleasesWhatItReplaces) {
  InflightBudget budget(100);
  InflightBudget::Reservation r = *budget.Reserve(30, "request");
  r = *budget.Reserve(20, "request");
  EXPECT_EQ(budget.in_flight(), 20u);
  r = InflightBudget::Reservation();
  EXPECT_EQ(budget.in_flight(), 0u);
}

// Concurrent reservations never exceed the limit together, and all come back.
TEST(InflightBudgetTest, ConcurrentReservationsStayWithinTheLimit) {
  InflightBudget budget(1000);
  std::atomic<uint64_t> peak{0};
  std::atomic<int> refused{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        auto r = budget.Reserve(300, "request");
        if (!r.ok()) {
          refused.fetch_add(1);
          continue;
        }
        uint64_t now = budget.in_flight();
        uint64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_LE(peak.load(), 1000u);
  EXPECT_EQ(budget.in_flight(), 0u);
}

TEST(InflightBudgetTest, TheDefaultIsAQuarterOfPhysicalMemory) {
  const uint64_t limit = InflightBudget::DefaultLimit();
  EXPECT_GT(limit, uint64_t{0});
  const uint64_t phys =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  EXPECT_EQ(limit, phys / 4);
}

// --max-inflight-bytes is one total: gRPC's receive buffers (a soft quota a burst overshoots up
// to 2.5 times) and the requests' own bytes together stay within it.
TEST(InflightBudgetTest, TheSplitKeepsGrpcsQuotaAndTheRequestsWithinTheTotal) {
  const uint64_t total = uint64_t{1} << 30;
  InflightBudgetSplit split = SplitInflightBudget(total, uint64_t{64} << 20);
  EXPECT_EQ(split.total, total);
  EXPECT_EQ(split.grpc_quota, total / 5);
  EXPECT_EQ(split.grpc_set_aside, total / 2);
  EXPECT_EQ(split.requests, total / 2);
  EXPECT_LE(split.grpc_quota * 5 / 2 + split.requests, total);
  EXPECT_EQ(split.grpc_max_message, uint64_t{64} << 20);
  EXPECT_FALSE(split.grpc_message_lowered);
  EXPECT_FALSE(split.requests_below_max_request);
  // A connection's streams fill half the set-aside with messages of the largest size.
  EXPECT_EQ(split.grpc_streams_per_connection, 4);
  EXPECT_EQ(SplitInflightBudget(uint64_t{16} << 30, uint64_t{64} << 20).grpc_streams_per_connection,
            64);
  EXPECT_EQ(SplitInflightBudget(total, 1 << 20).grpc_streams_per_connection, 128);
  // Messages up to a tenth of the total (half the quota): a larger --max-request-bytes is lowered
  // for gRPC, and HTTP bodies above the requests' share are refused whatever it says.
  split = SplitInflightBudget(total, uint64_t{200} << 20);
  EXPECT_EQ(split.grpc_max_message, total / 10);
  EXPECT_TRUE(split.grpc_message_lowered);
  EXPECT_FALSE(split.requests_below_max_request);
  split = SplitInflightBudget(total, uint64_t{600} << 20);
  EXPECT_TRUE(split.requests_below_max_request);
  // 0: unlimited, nothing set aside.
  split = SplitInflightBudget(0, uint64_t{64} << 20);
  EXPECT_EQ(split.grpc_quota, 0u);
  EXPECT_EQ(split.requests, 0u);
  EXPECT_FALSE(split.grpc_message_lowered);
  // The refusals name where their limit comes from.
  InflightBudget budget(100, "--max-inflight-bytes 200 less 100 set aside");
  EXPECT_THAT(budget.Reserve(101, "x").status().message(),
              HasSubstr("100 bytes all requests in flight may hold (--max-inflight-bytes 200 less "
                        "100 set aside)"));
}

}  // namespace
}  // namespace cuvil
