#include "cuvil/compiler/compiler.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

HostTensor Int64s(std::vector<int64_t> v) {
  HostTensor t(DType::kInt64, {static_cast<int64_t>(v.size())});
  std::copy(v.begin(), v.end(), t.data_as<int64_t>());
  return t;
}

// The Shape -> Gather -> Unsqueeze -> Concat -> Reshape chain PyTorch emits for x.view(b, -1).
TEST(OptimizeTest, FoldsShapeChainKeepingBatchSymbolic) {
  ir::Graph g;
  g.opset = 13;
  g.symbol = "batch";
  ir::Value* x = g.NewValue("x");
  x->type = {DType::kFloat32, {SymDim::Batch(), SymDim::Const(4), SymDim::Const(5)}, true};
  x->is_graph_input = true;
  g.inputs.push_back(x);
  auto node = [&](const char* op, std::vector<ir::Value*> ins, const char* out) {
    ir::Node* n = g.NewNode(op, out);
    ir::Value* v = g.NewValue(out);
    v->producer = n;
    n->inputs = std::move(ins);
    n->outputs = {v};
    return n;
  };
  ir::Value* zero = g.NewValue("zero");
  g.MakeConstant(zero, [] {
    HostTensor t(DType::kInt64, {});
    return t;
  }());
  ir::Value* axes = g.NewValue("axes");
  g.MakeConstant(axes, Int64s({0}));
  ir::Value* minus1 = g.NewValue("minus1");
  g.MakeConstant(minus1, Int64s({-1}));
  ir::Node* shape = node("Shape", {x}, "shape");
  ir::Node* gather = node("Gather", {shape->outputs[0], zero}, "gather");
  ir::Node* unsq = node("Unsqueeze", {gather->outputs[0], axes}, "unsq");
  ir::Node* concat = node("Concat", {unsq->outputs[0], minus1}, "concat");
  concat->attrs["axis"] = int64_t{0};
  ir::Node* reshape = node("Reshape", {x, concat->outputs[0]}, "y");
  reshape->outputs[0]->is_graph_output = true;
  g.outputs.push_back(reshape->outputs[0]);
  g.output_names.push_back("y");

  absl::Status s = OptimizeGraph(g);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(g.nodes().size(), 1u);
  EXPECT_EQ(g.nodes()[0]->op_type, "Reshape");
  // The folded shape became the output type; the node no longer reads a shape operand.
  EXPECT_EQ(g.nodes()[0]->inputs.size(), 1u);
  EXPECT_EQ(SymShapeToString(g.outputs[0]->type.shape), "[batch,20]");
}

}  // namespace
}  // namespace cuvil
