#include "memory_plan.h"

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

TEST(MemoryPlanTest, RejectsQuadraticSizes) {
  auto g = Chain(2);
  g->nodes()[0]->outputs[0]->type.shape = {SymDim::Batch(), SymDim::Batch()};
  EXPECT_FALSE(PlanMemory(*g).ok());
}

}  // namespace
}  // namespace cuvil
