#include "memory_plan.h"

#include <sys/mman.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

// x -> Relu -> a -> Relu -> b -> Relu -> c -> Relu -> y : a and c may share space, b may not.
std::unique_ptr<ir::Graph> Chain(int length) {
  auto g = std::make_unique<ir::Graph>();
  g->symbol = "batch";
  ir::Value* x = g->NewValue("x");
  x->type = {DType::kFloat32, {SymDim::Batch(), SymDim::Const(100)}, true};
  x->is_graph_input = true;
  g->inputs.push_back(x);
  ir::Value* prev = x;
  for (int i = 0; i < length; ++i) {
    ir::Node* n = g->NewNode("Relu", "r" + std::to_string(i));
    ir::Value* v = g->NewValue("v" + std::to_string(i));
    v->type = x->type;
    v->producer = n;
    n->inputs = {prev};
    n->outputs = {v};
    prev = v;
  }
  prev->is_graph_output = true;
  g->outputs.push_back(prev);
  g->output_names.push_back(prev->name);
  return g;
}

TEST(MemoryPlanTest, ReusesBuffersWhoseLifetimesDoNotOverlap) {
  auto g = Chain(5);
  auto plan = PlanMemory(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  // Four intermediates of 400 bytes per batch item; at most two are live at once.
  EXPECT_EQ(plan->arena.unplanned_bytes, 4 * 448);
  EXPECT_EQ(plan->arena.per_batch_bytes, 2 * 448);
  EXPECT_EQ(plan->arena.fixed_bytes, 0);
  const auto& nodes = g->nodes();
  for (size_t i = 0; i + 1 < nodes.size(); ++i) {
    const ir::Value* a = nodes[i]->outputs[0];
    if (i + 1 < nodes.size() - 1) {
      const ir::Value* b = nodes[i + 1]->outputs[0];
      EXPECT_NE(plan->locations.at(a).per_batch, plan->locations.at(b).per_batch)
          << "live-at-once values " << a->name << " and " << b->name << " overlap";
    }
  }
  EXPECT_EQ(plan->locations.at(g->outputs[0]).kind, BufferLocation::Kind::kOutput);
  EXPECT_EQ(plan->locations.at(g->inputs[0]).kind, BufferLocation::Kind::kInput);
}

TEST(MemoryPlanTest, RecordsTheLivenessLowerBoundOfEachRegion) {
  auto g = Chain(5);
  // A second consumer of v0 at the end keeps it live across every node: three values are then
  // live at once from the third node on.
  ir::Node* tail = g->NewNode("Add", "tail");
  ir::Value* y2 = g->NewValue("y2");
  y2->type = g->outputs[0]->type;
  y2->producer = tail;
  tail->inputs = {g->outputs[0], g->nodes()[0]->outputs[0]};
  tail->outputs = {y2};
  y2->is_graph_output = true;
  g->outputs.push_back(y2);
  g->output_names.push_back(y2->name);
  auto plan = PlanMemory(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->arena.live_per_batch_bytes, 3 * 448);
  EXPECT_GE(plan->arena.per_batch_bytes, plan->arena.live_per_batch_bytes);
  EXPECT_EQ(plan->arena.live_fixed_bytes, 0);

  // The same chain with a static shape: its bound moves to the static region.
  auto s = Chain(5);
  for (const auto& n : s->nodes()) n->outputs[0]->type.shape = {SymDim::Const(100)};
  auto fixed = PlanMemory(*s);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->arena.live_fixed_bytes, 2 * 448);
  EXPECT_EQ(fixed->arena.fixed_bytes, 2 * 448);
  EXPECT_EQ(fixed->arena.live_per_batch_bytes, 0);
}

// Sizes that are not linear in the batch (batch^2, or another symbol) get a symbolic plan whose
// offsets are expressions; buffers live at once never overlap at any binding.
TEST(MemoryPlanTest, SizesBeyondLinearInTheBatchGetASymbolicPlan) {
  auto g = Chain(4);
  g->symbols = {"batch", "seq"};
  const SymDim seq = SymDim::Symbol(1, "seq");
  g->nodes()[0]->outputs[0]->type.shape = {SymDim::Batch(), SymDim::Batch()};
  g->nodes()[1]->outputs[0]->type.shape = {SymDim::Batch(), seq, SymDim::Const(3)};
  g->nodes()[2]->outputs[0]->type.shape = {seq, SymDim::Const(100)};
  auto plan = PlanMemory(*g);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(plan->arena.symbolic());
  for (int64_t batch : {0, 1, 3, 17}) {
    for (int64_t s : {0, 1, 5, 1000}) {
      const int64_t syms[] = {batch, s};
      const std::optional<int64_t> total = plan->arena.CheckedBytesForSymbols(syms);
      ASSERT_TRUE(total.has_value());
      struct Span {
        int64_t begin, end;
      };
      std::vector<Span> spans;
      for (int i = 0; i < 3; ++i) {
        const ir::Value* v = g->nodes()[i]->outputs[0];
        const BufferLocation& loc = plan->locations.at(v);
        ASSERT_TRUE(loc.offset_expr.has_value());
        const int64_t begin = *loc.offset_expr->Eval(syms);
        const int64_t end = begin + 4 * *SymNumElements(v->type.shape).Eval(syms);
        EXPECT_EQ(begin % 64, 0);
        EXPECT_LE(end, *total) << v->name << " at " << batch << "," << s;
        spans.push_back({begin, end});
      }
      // Consecutive values are live together (one is the other's input).
      for (int i = 0; i + 1 < 3; ++i) {
        const bool disjoint =
            spans[i].end <= spans[i + 1].begin || spans[i + 1].end <= spans[i].begin;
        const bool empty = spans[i].end == spans[i].begin || spans[i + 1].end == spans[i + 1].begin;
        EXPECT_TRUE(disjoint || empty) << i << " at " << batch << "," << s;
      }
    }
  }
}

// The protection of the mapping holding `p`, as /proc/self/maps spells it ("r--p").
std::string ProtectionOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t lo = 0, hi = 0;
    char perms[5] = {};
    if (std::sscanf(line.c_str(), "%lx-%lx %4s", &lo, &hi, perms) == 3 && lo <= at && at < hi) {
      return perms;
    }
  }
  return "";
}

// x -> Add(x, a) -> Add(., b) -> y with float32[16] constants a (copied) and b (given an image
// of another size in the deferred plan).
std::unique_ptr<ir::Graph> TwoConstants(ir::Value** a, ir::Value** b) {
  auto g = Chain(0);
  ir::Value* x = g->inputs[0];
  ir::Value* prev = x;
  for (int i = 0; i < 2; ++i) {
    ir::Value* c = g->NewValue(i == 0 ? "a" : "b");
    HostTensor t(DType::kFloat32, {16});
    for (int j = 0; j < 16; ++j) t.data_as<float>()[j] = static_cast<float>(i * 100 + j);
    g->MakeConstant(c, std::move(t));
    ir::Node* n = g->NewNode("Add", "add" + std::to_string(i));
    ir::Value* v = g->NewValue("s" + std::to_string(i));
    v->type = x->type;
    v->producer = n;
    n->inputs = {prev, c};
    n->outputs = {v};
    prev = v;
    (i == 0 ? *a : *b) = c;
  }
  x->is_graph_output = false;
  prev->is_graph_output = true;
  g->outputs = {prev};
  g->output_names = {prev->name};
  return g;
}

TEST(MemoryPlanTest, DeferredFillWritesTensorsAndImagesThenSealsTheBlob) {
  ir::Value* a = nullptr;
  ir::Value* b = nullptr;
  auto g = TwoConstants(&a, &b);
  ConstantImages images;
  images[b] = {200, [](const uint8_t*, uint8_t* dst) {
                 for (int i = 0; i < 200; ++i) dst[i] = static_cast<uint8_t>(i);
               }};
  std::unique_ptr<WeightsFill> fill;
  auto plan = PlanMemoryDeferringWeights(*g, &images, &fill);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_NE(fill, nullptr);
  const int64_t at_a = plan->locations.at(a).offset, at_b = plan->locations.at(b).offset;
  EXPECT_EQ(at_a % 64, 0);
  EXPECT_EQ(at_b % 64, 0);
  // b takes its image's 200 bytes, not its tensor's 64.
  EXPECT_GE(plan->weights.size(), static_cast<size_t>(std::max(at_a + 64, at_b + 200)));
  EXPECT_EQ(ProtectionOf(plan->weights.data()), "rw-p");  // Not filled yet.
  ASSERT_TRUE(fill->Run().ok());
  EXPECT_EQ(ProtectionOf(plan->weights.data()), "r--p");
  const uint8_t* blob = plan->weights.data();
  EXPECT_EQ(std::memcmp(blob + at_a, a->constant->data(), 64), 0);
  for (int i = 0; i < 200; ++i) ASSERT_EQ(blob[at_b + i], i) << i;

  // Without images the same graph's plan holds both tensors, filled before PlanMemory returns.
  auto eager = PlanMemory(*g);
  ASSERT_TRUE(eager.ok()) << eager.status();
  EXPECT_EQ(ProtectionOf(eager->weights.data()), "r--p");
  EXPECT_EQ(
      std::memcmp(eager->weights.data() + eager->locations.at(b).offset, b->constant->data(), 64),
      0);
}

// Threads that share one fill write every item exactly once, and each returns from Run only once
// the blob is complete and sealed, whichever of them wrote the last item.
TEST(MemoryPlanTest, ThreadsSharingAFillWriteEveryItemOnceThenSeal) {
  constexpr int kItems = 64;
  constexpr int64_t kBytes = 3 * 4096 + 100;  // Spans pages, ends inside one.
  std::vector<uint8_t> src(kBytes);
  for (int64_t i = 0; i < kBytes; ++i) src[i] = static_cast<uint8_t>(i * 7);
  HostTensor tensor(DType::kUInt8, {kBytes});
  std::memcpy(tensor.data(), src.data(), kBytes);
  const size_t stride = (kBytes + 63) / 64 * 64;
  const size_t blob_bytes = stride * kItems;
  void* mem = mmap(nullptr, blob_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  std::shared_ptr<const void> owner(
      mem, [blob_bytes](const void* p) { munmap(const_cast<void*>(p), blob_bytes); });
  auto* blob = static_cast<uint8_t*>(mem);
  std::atomic<int> writes[kItems] = {};
  std::vector<WeightsFill::Item> items;
  for (int i = 0; i < kItems; ++i) {
    WeightsFill::Item item{&tensor, static_cast<int64_t>(stride * i), kBytes, {}, "t"};
    if (i % 2 == 1) {  // Odd items are images: the item's index in every byte.
      item.write = [i, &writes](const uint8_t*, uint8_t* dst) {
        writes[i].fetch_add(1);
        std::memset(dst, i, kBytes);
      };
    }
    items.push_back(std::move(item));
  }
  WeightsFill fill(owner, blob, blob_bytes, std::move(items));
  std::vector<std::thread> threads;
  std::atomic<int> complete_when_returned{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      if (!fill.Run().ok()) return;
      bool complete = ProtectionOf(blob) == "r--p";
      for (int i = 0; i < kItems && complete; ++i) {
        const uint8_t* at = blob + stride * i;
        complete = i % 2 == 1 ? at[0] == i && at[kBytes - 1] == i
                              : std::memcmp(at, src.data(), kBytes) == 0;
      }
      if (complete) complete_when_returned.fetch_add(1);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(complete_when_returned.load(), 4);
  for (int i = 1; i < kItems; i += 2) EXPECT_EQ(writes[i].load(), 1) << i;
  // A late helper finds nothing to do and the same verdict.
  fill.Help();
  EXPECT_TRUE(fill.Run().ok());
}

}  // namespace
}  // namespace cuvil
