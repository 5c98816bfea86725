// Host folding of tiny float arithmetic (constant_fold.h) and the binding requests it enables.
#include "constant_fold.h"

#include <string>
#include <vector>

#include "cuvil/compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

HostTensor Scalar(DType dtype, double v) {
  HostTensor t(dtype, {});
  if (dtype == DType::kFloat32) {
    t.data_as<float>()[0] = static_cast<float>(v);
  } else {
    t.SetFromInt64(0, static_cast<int64_t>(v));
  }
  return t;
}

// y = Range(0, float(n) - 1.5, 1), the shape of a window's expansion: the limit is a float
// computed from the int64 `n`, so only host folding makes it a constant.
struct RangeGraph {
  ir::Graph g;
  ir::Value* n = nullptr;

  explicit RangeGraph(bool n_constant) {
    g.opset = 13;
    n = g.NewValue("n");
    if (n_constant) {
      g.MakeConstant(n, Scalar(DType::kInt64, 5));
    } else {
      n->type = {DType::kInt64, {}, true};
      n->is_graph_input = true;
      g.inputs.push_back(n);
    }
    auto constant = [&](const char* name, double v) {
      ir::Value* c = g.NewValue(name);
      g.MakeConstant(c, Scalar(DType::kFloat32, v));
      return c;
    };
    auto node = [&](const char* op, std::vector<ir::Value*> ins, const char* out) {
      ir::Node* node = g.NewNode(op, out);
      ir::Value* v = g.NewValue(out);
      v->producer = node;
      node->inputs = std::move(ins);
      node->outputs = {v};
      node->opset = 13;
      return node;
    };
    ir::Node* cast = node("Cast", {n}, "n_fp");
    cast->attrs["to"] = int64_t{1};
    ir::Node* sub = node("Sub", {cast->outputs[0], constant("one_and_a_half", 1.5)}, "limit");
    ir::Node* range =
        node("Range", {constant("zero", 0), sub->outputs[0], constant("one", 1)}, "y");
    range->outputs[0]->is_graph_output = true;
    g.outputs.push_back(range->outputs[0]);
    g.output_names.push_back("y");
  }
};

TEST(ConstantFoldTest, FloatArithmeticFoldsIntoARangeLimit) {
  RangeGraph r(/*n_constant=*/true);
  absl::Status s = OptimizeGraph(r.g);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.g.nodes().size(), 1u);  // Cast and Sub became constants.
  EXPECT_EQ(r.g.nodes()[0]->op_type, "Range");
  EXPECT_EQ(SymShapeToString(r.g.outputs[0]->type.shape), "[4]");  // 0, 1, 2, 3 < 3.5
}

TEST(ConstantFoldTest, GraphInputBehindFoldableOpsIsRequestedForBinding) {
  RangeGraph r(/*n_constant=*/false);
  std::vector<std::string> needs_binding;
  absl::Status s = OptimizeGraph(r.g, &needs_binding);
  ASSERT_FALSE(s.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(needs_binding, ::testing::ElementsAre("n"));
}

TEST(ConstantFoldTest, LargeOrNonConstantInputsDoNotFold) {
  ir::Graph g;
  ir::Value* big = g.NewValue("big");
  g.MakeConstant(big, HostTensor(DType::kFloat32, {kMaxHostFoldElements + 1}));
  ir::Node* neg = g.NewNode("Neg", "neg");
  ir::Value* out = g.NewValue("out");
  out->producer = neg;
  out->type = {DType::kFloat32, {SymDim::Const(kMaxHostFoldElements + 1)}, true};
  neg->inputs = {big};
  neg->outputs = {out};
  EXPECT_FALSE(TryFoldOnHost(g, *neg));
  EXPECT_FALSE(out->is_constant());
  EXPECT_TRUE(GraphInputsBehind(out).empty());  // Already a constant input: nothing to bind.
}

}  // namespace
}  // namespace cuvil
