#include "cuvil/runtime/symbolic_arena.h"

#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

DimExpr U(std::optional<DimExpr> e) {
  EXPECT_TRUE(e.has_value());
  return e.value_or(DimExpr(-999999));
}

const DimExpr kB = DimExpr::Symbol(0, "batch");
const DimExpr kS = DimExpr::Symbol(1, "seq");
const DimExpr kH = DimExpr::Symbol(2, "H");

// Checks that every buffer lies inside the arena, is aligned, and overlaps no buffer that is live
// at the same time, for one binding of the symbols.
void ExpectSound(const std::vector<SymbolicBuffer>& bufs, const SymbolicArena& plan,
                 const std::vector<int64_t>& values) {
  auto bound = plan.Bind(values, int64_t{1} << 40);
  ASSERT_TRUE(bound.ok()) << bound.status();
  ASSERT_EQ(bound->offsets.size(), bufs.size());
  auto total = plan.TotalBytesExpr().Eval(values);
  ASSERT_TRUE(total.has_value());
  EXPECT_EQ(*total, bound->total_bytes);
  std::vector<int64_t> size(bufs.size());
  for (size_t i = 0; i < bufs.size(); ++i) {
    size[i] = *bufs[i].bytes.Eval(values);
    int64_t off = bound->offsets[i];
    EXPECT_EQ(plan.OffsetExpr(i).Eval(values), off) << i;
    EXPECT_EQ(off % kSymbolicArenaAlign, 0) << i;
    EXPECT_GE(off, 0);
    EXPECT_LE(off + size[i], bound->total_bytes) << i;
  }
  for (size_t i = 0; i < bufs.size(); ++i) {
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      bool live_together = !(bufs[i].last < bufs[j].first || bufs[j].last < bufs[i].first);
      if (!live_together || size[i] == 0 || size[j] == 0) continue;
      bool disjoint = bound->offsets[i] + size[i] <= bound->offsets[j] ||
                      bound->offsets[j] + size[j] <= bound->offsets[i];
      EXPECT_TRUE(disjoint) << "buffers " << i << " and " << j << " overlap";
    }
  }
}

TEST(SymbolicArenaTest, StaticBuffersKeepConstantOffsets) {
  std::vector<SymbolicBuffer> bufs = {
      {DimExpr(100), 0, 1}, {DimExpr(50), 1, 2}, {DimExpr(30), 2, 3}};
  auto plan = PlanSymbolicArena(bufs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->regions.size(), 1u);
  for (size_t i = 0; i < bufs.size(); ++i) EXPECT_TRUE(plan->OffsetExpr(i).IsStatic());
  // Buffer 2 reuses buffer 0's bytes (their lifetimes do not overlap).
  EXPECT_EQ(plan->OffsetExpr(2), plan->OffsetExpr(0));
  EXPECT_EQ(plan->TotalBytesExpr(), DimExpr(192));
  ExpectSound(bufs, *plan, {});
}

TEST(SymbolicArenaTest, ProportionalSizesShareARegion) {
  // [batch, seq, 64] and [batch, seq, 128] floats share base batch*seq; [batch, 3] another.
  DimExpr bs = U(DimMul(kB, kS));
  std::vector<SymbolicBuffer> bufs = {{U(DimMul(bs, 256)), 0, 1},
                                      {U(DimMul(bs, 512)), 1, 2},
                                      {U(DimMul(bs, 256)), 2, 3},
                                      {U(DimMul(kB, 12)), 0, 3},
                                      {DimExpr(64), 0, 3}};
  auto plan = PlanSymbolicArena(bufs);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->regions.size(), 3u);
  EXPECT_EQ(plan->regions[1].base, bs);
  EXPECT_EQ(plan->regions[2].base, kB);
  // Static first, at a constant offset; buffer 2 reuses buffer 0.
  EXPECT_EQ(plan->OffsetExpr(4), DimExpr(0));
  EXPECT_EQ(plan->OffsetExpr(2), plan->OffsetExpr(0));
  EXPECT_EQ(plan->TotalBytesExpr(),
            U(DimAdd(U(DimAdd(64, U(DimMul(bs, 768)))), U(DimMul(kB, 64)))));
  for (int64_t b : {1, 2, 7}) {
    for (int64_t s : {1, 5, 33}) ExpectSound(bufs, *plan, {b, s});
  }
}

TEST(SymbolicArenaTest, RandomLayoutsAreSoundForEveryBinding) {
  std::vector<DimExpr> shapes = {
      DimExpr(1),
      DimExpr(7),
      kB,
      U(DimMul(kB, kS)),
      U(DimMul(U(DimMul(kB, kS)), kS)),
      U(DimAdd(kS, 1)),
      U(DimFloorDiv(U(DimAdd(kH, 1)), 2)),
      U(DimMul(kB, U(DimFloorDiv(U(DimAdd(kH, 1)), 2)))),
      U(DimMin(kS, 16)),
      U(DimMul(kH, kH)),
  };
  std::mt19937 rng(2024);
  for (int iter = 0; iter < 200; ++iter) {
    std::vector<SymbolicBuffer> bufs;
    int n = 1 + iter % 17;
    for (int i = 0; i < n; ++i) {
      const DimExpr& shape = shapes[rng() % shapes.size()];
      int64_t scale = int64_t{1} << (rng() % 4);  // dtype size
      int64_t channels = 1 + rng() % 5;
      int first = static_cast<int>(rng() % 10);
      bufs.push_back(
          {U(DimMul(shape, scale * channels)), first, first + static_cast<int>(rng() % 4)});
    }
    auto plan = PlanSymbolicArena(bufs);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (int64_t b : {0, 1, 3}) {
      for (int64_t s : {0, 2, 9}) {
        for (int64_t h : {1, 6, 15}) ExpectSound(bufs, *plan, {b, s, h});
      }
    }
  }
}

TEST(SymbolicArenaTest, BadSizesAndBindingsAreRefused) {
  std::vector<SymbolicBuffer> neg = {{DimExpr(-4), 0, 0}};
  EXPECT_FALSE(PlanSymbolicArena(neg).ok());
  std::vector<SymbolicBuffer> never = {{U(DimSub(-4, kB)), 0, 0}};
  EXPECT_FALSE(PlanSymbolicArena(never).ok());
  // seq - 8 is negative for short sequences: planning succeeds, binding refuses.
  std::vector<SymbolicBuffer> maybe = {{U(DimMul(U(DimSub(kS, 8)), 4)), 0, 0}};
  auto plan = PlanSymbolicArena(maybe);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_TRUE(plan->Bind({0, 10}, 1 << 20).ok());
  auto bad = plan->Bind({0, 3}, 1 << 20);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("negative"), std::string::npos) << bad.status();
  // Too large for the limit, and a missing symbol value.
  EXPECT_FALSE(plan->Bind({0, 1 << 20}, 1 << 20).ok());
  EXPECT_FALSE(plan->Bind({0}, 1 << 20).ok());
}

}  // namespace
}  // namespace cuvil
