#include "batch_split.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "cuvil/runtime/parallel.h"
#include "gtest/gtest.h"

namespace cuvil::jitcache_internal {
namespace {

constexpr int64_t kWidth = 4;  // Floats per item of input 0 and of the output.

// Every call the fake entry point saw.
struct Call {
  int64_t batch;
  const uint8_t* arena;
  int64_t first_item;  // Read from the input's first element.
};
std::mutex calls_mu;
std::vector<Call> calls;
float failing_item = -1;  // The fake fails (code 3) on the call that holds this item.

// y[i][j] = x[i][j] * scale[0] + 1 for `batch` items; touches its whole arena region.
int32_t FakeEntry(const void* const* inputs, void* const* outputs, int64_t batch, void* arena,
                  void* const* table, int64_t* syms) {
  const float* x = static_cast<const float*>(inputs[0]);
  const float* scale = static_cast<const float*>(inputs[1]);
  float* y = static_cast<float*>(outputs[0]);
  {
    std::lock_guard<std::mutex> lock(calls_mu);
    calls.push_back({batch, static_cast<const uint8_t*>(arena), static_cast<int64_t>(x[0])});
  }
  // Per-batch part then the fixed part: 64 bytes per item + 128 fixed bytes.
  std::memset(arena, 0xab, static_cast<size_t>(64 * batch + 128));
  for (int64_t i = 0; i < batch * kWidth; ++i) {
    if (x[i] == failing_item) return 3;
    y[i] = x[i] * scale[0] + 1;
  }
  return 0;
}

BatchSplitPlan TestPlan(int64_t items_per_call) {
  BatchSplitPlan plan;
  plan.max_shards = kMaxBatchShards;
  plan.per_batch_bytes = 64;
  plan.fixed_bytes = 128;
  plan.input_item_bytes = {kWidth * 4, 0};  // x per item; scale shared.
  plan.output_item_bytes = {kWidth * 4};
  plan.items_per_call = items_per_call;
  return plan;
}

ArenaPlan ArenaOf(const BatchSplitPlan& plan) {
  ArenaPlan a;
  a.per_batch_bytes = plan.per_batch_bytes;
  a.fixed_bytes = plan.fixed_bytes;
  a.max_shards = plan.max_shards;
  return a;
}

struct Result {
  int32_t rc;
  std::vector<float> y;
  std::vector<Call> calls;
  std::vector<uint8_t> arena;  // Guard bytes after BytesFor must stay untouched.
  int64_t arena_bytes;
};

Result RunSplit(const BatchSplitPlan& plan, int64_t batch, int threads) {
  std::vector<float> x(batch * kWidth);
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t j = 0; j < kWidth; ++j) x[i * kWidth + j] = static_cast<float>(i);
  }
  const float scale = 2;
  Result r;
  r.y.assign(batch * kWidth, -7);
  r.arena_bytes = ArenaOf(plan).BytesFor(batch);
  r.arena.assign(r.arena_bytes + 256, 0);
  const void* inputs[] = {x.data(), &scale};
  void* outputs[] = {r.y.data()};
  calls.clear();
  const int saved = IntraOpThreads();
  SetIntraOpThreads(threads);
  r.rc = ExecuteSplit(plan, &FakeEntry, inputs, outputs, batch, r.arena.data(), nullptr, nullptr);
  SetIntraOpThreads(saved);
  r.calls = calls;
  return r;
}

void ExpectEveryItemOnce(const Result& r, int64_t batch) {
  ASSERT_EQ(r.rc, 0);
  for (int64_t i = 0; i < batch * kWidth; ++i) {
    EXPECT_EQ(r.y[i], static_cast<float>(i / kWidth) * 2 + 1) << "element " << i;
  }
  int64_t items = 0;
  for (const Call& c : r.calls) items += c.batch;
  EXPECT_EQ(items, batch);
  for (size_t i = r.arena_bytes; i < r.arena.size(); ++i) {
    ASSERT_EQ(r.arena[i], 0) << "wrote past the arena at byte " << i;
  }
}

TEST(BatchSplitTest, OneThreadLargeSliceIsOneCall) {
  Result r = RunSplit(TestPlan(100), 8, 1);
  ExpectEveryItemOnce(r, 8);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].batch, 8);
}

TEST(BatchSplitTest, OneThreadSlicesTheBatch) {
  Result r = RunSplit(TestPlan(3), 8, 1);
  ExpectEveryItemOnce(r, 8);
  ASSERT_EQ(r.calls.size(), 3u);  // 3 + 3 + 2 items, one after another on one region.
  for (const Call& c : r.calls) {
    EXPECT_LE(c.batch, 3);
    EXPECT_EQ(c.arena, r.arena.data());
  }
}

TEST(BatchSplitTest, ThreadsGetDisjointRegions) {
  Result r = RunSplit(TestPlan(100), 7, 3);
  ExpectEveryItemOnce(r, 7);
  ASSERT_EQ(r.calls.size(), 3u);  // Parts of 2, 2 and 3 items.
  std::vector<std::pair<const uint8_t*, const uint8_t*>> regions;
  for (const Call& c : r.calls) regions.push_back({c.arena, c.arena + 64 * c.batch + 128});
  for (size_t i = 0; i < regions.size(); ++i) {
    EXPECT_GE(regions[i].first, r.arena.data());
    EXPECT_LE(regions[i].second, r.arena.data() + r.arena_bytes);
    EXPECT_EQ((regions[i].first - r.arena.data()) % kArenaAlign, 0);
    for (size_t j = i + 1; j < regions.size(); ++j) {
      const bool apart =
          regions[i].second <= regions[j].first || regions[j].second <= regions[i].first;
      EXPECT_TRUE(apart) << "parts " << i << " and " << j << " share arena bytes";
    }
  }
}

TEST(BatchSplitTest, MoreThreadsThanItemsUsesOnePartPerItem) {
  Result r = RunSplit(TestPlan(100), 2, 4);
  ExpectEveryItemOnce(r, 2);
  EXPECT_EQ(r.calls.size(), 2u);
}

TEST(BatchSplitTest, UnsplittableModelIsOneCall) {
  BatchSplitPlan plan = TestPlan(1);
  plan.max_shards = 1;
  Result r = RunSplit(plan, 6, 2);
  ExpectEveryItemOnce(r, 6);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].batch, 6);
}

TEST(BatchSplitTest, AFailingPartReportsItsCode) {
  failing_item = 5;
  Result r = RunSplit(TestPlan(2), 8, 2);
  failing_item = -1;
  EXPECT_EQ(r.rc, 3);
}

TEST(BatchSplitTest, PlanAddressesItemsOfLeadingBatchTensors) {
  CompiledModel m;
  m.arena.per_batch_bytes = 128;
  m.arena.fixed_bytes = 64;
  m.arena.max_shards = 4;
  m.inputs = {{"x", DType::kFloat32, {SymDim::Batch(2), SymDim::Const(3)}},
              {"bias", DType::kFloat32, {SymDim::Const(3)}}};
  m.outputs = {{"y", DType::kInt64, {SymDim::Batch(), SymDim::Const(5)}}};
  BatchSplitPlan plan = MakeBatchSplitPlan(m);
  EXPECT_EQ(plan.max_shards, 4);
  EXPECT_EQ(plan.input_item_bytes, (std::vector<int64_t>{24, 0}));
  EXPECT_EQ(plan.output_item_bytes, (std::vector<int64_t>{40}));
  EXPECT_GE(plan.items_per_call, 1);

  m.outputs[0].shape = {SymDim::Const(5), SymDim::Batch()};  // Items are not contiguous.
  EXPECT_EQ(MakeBatchSplitPlan(m).max_shards, 1);
}

TEST(BatchSplitTest, ArenaSizeCountsPartsAndRefusesOverflow) {
  ArenaPlan a;
  a.per_batch_bytes = 64;
  a.fixed_bytes = 128;
  EXPECT_EQ(a.CheckedBytesFor(5), 64 * 5 + 128);
  a.max_shards = 4;
  EXPECT_EQ(a.CheckedBytesFor(2), 64 * 2 + 2 * (128 + kArenaAlign));    // One region per item.
  EXPECT_EQ(a.CheckedBytesFor(10), 64 * 10 + 4 * (128 + kArenaAlign));  // At most max_shards.
  EXPECT_EQ(a.CheckedBytesFor(int64_t{1} << 60), std::nullopt);
  EXPECT_EQ(a.BytesFor(int64_t{1} << 60), INT64_MAX);
}

}  // namespace
}  // namespace cuvil::jitcache_internal
