// The importer's compile-time resolution of sequences and optionals (sequence_resolution.h),
// checked on the IR it produces.
#include <algorithm>
#include <string>
#include <vector>

#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/onnx_importer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Builds small models node by node.
class ModelBuilder {
 public:
  explicit ModelBuilder(int opset = 13) {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(opset);
    graph_ = model_.mutable_graph();
    graph_->set_name("sequences");
  }

  onnx::GraphProto* graph() { return graph_; }

  void FloatInput(const std::string& name, std::vector<int64_t> dims) {
    AddTensorInfo(graph_->add_input(), name, onnx::TensorProto::FLOAT, dims);
  }
  void Int64Input(const std::string& name) {
    AddTensorInfo(graph_->add_input(), name, onnx::TensorProto::INT64, {});
  }
  void FloatOutput(const std::string& name) {
    AddTensorInfo(graph_->add_output(), name, onnx::TensorProto::FLOAT, {});
  }
  void SequenceOutput(const std::string& name) {
    onnx::ValueInfoProto* v = graph_->add_output();
    v->set_name(name);
    v->mutable_type()
        ->mutable_sequence_type()
        ->mutable_elem_type()
        ->mutable_tensor_type()
        ->set_elem_type(onnx::TensorProto::FLOAT);
  }
  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> ins,
                        std::vector<std::string> outs, const std::string& name = "") {
    onnx::NodeProto* n = graph_->add_node();
    n->set_op_type(op);
    n->set_name(name.empty() ? op + "_" + std::to_string(graph_->node_size()) : name);
    for (auto& i : ins) n->add_input(i);
    for (auto& o : outs) n->add_output(o);
    return n;
  }
  void Int64Constant(const std::string& name, int64_t value) {
    onnx::NodeProto* n = Node("Constant", {}, {name});
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(onnx::TensorProto::INT64);
    a->mutable_t()->add_int64_data(value);
  }
  static void IntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    onnx::AttributeProto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }

  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  static void AddTensorInfo(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                            const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) shape->add_dim()->set_dim_value(d);
  }

  onnx::ModelProto model_;
  onnx::GraphProto* graph_;
};

std::vector<std::string> OpTypes(const ir::Graph& g) {
  std::vector<std::string> ops;
  for (const auto& n : g.nodes()) ops.push_back(n->op_type);
  return ops;
}

std::vector<std::string> InputNames(const ir::Node& n) {
  std::vector<std::string> names;
  for (const ir::Value* v : n.inputs) names.push_back(v == nullptr ? "" : v->name);
  return names;
}

// SequenceConstruct(a, b) → insert c at the front (constant position) → take the last element
// and concatenate all three: the sequence ops vanish, SequenceAt becomes an alias of b, and
// ConcatFromSequence one Concat over [c, a, b] in sequence order.
TEST(SequenceResolutionTest, SequenceOpsBecomeTensorNodes) {
  ModelBuilder m;
  m.FloatInput("a", {2});
  m.FloatInput("b", {3});
  m.FloatInput("c", {1});
  m.Node("SequenceConstruct", {"a", "b"}, {"s"});
  m.Int64Constant("front", 0);
  m.Node("SequenceInsert", {"s", "c", "front"}, {"s2"});
  m.Int64Constant("last", -1);
  m.Node("SequenceAt", {"s2", "last"}, {"y"});
  ModelBuilder::IntAttr(m.Node("ConcatFromSequence", {"s2"}, {"z"}, "concat"), "axis", 0);
  m.FloatOutput("y");
  m.FloatOutput("z");

  auto g = ImportOnnxBytes(m.Bytes());
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(OptimizeGraph(**g).ok());
  EXPECT_THAT(OpTypes(**g), ElementsAre("Concat"));
  const ir::Node& concat = *(*g)->nodes()[0];
  EXPECT_EQ(concat.name, "concat");
  EXPECT_THAT(InputNames(concat), ElementsAre("c", "a", "b"));
  ASSERT_EQ((*g)->outputs.size(), 2u);
  EXPECT_EQ((*g)->outputs[0], (*g)->inputs[1]);  // y is b itself.
  EXPECT_EQ((*g)->outputs[1]->type.shape, (SymShape{SymDim::Const(6)}));
}

// A position that is a graph input is only known at run time: FailedPrecondition naming the
// node and the input, with a request to bind that input.
TEST(SequenceResolutionTest, RunTimePositionIsAClearErrorWithABindingRequest) {
  ModelBuilder m;
  m.FloatInput("a", {2});
  m.FloatInput("b", {2});
  m.Int64Input("p");
  m.Node("SequenceConstruct", {"a", "b"}, {"s"});
  m.Node("SequenceAt", {"s", "p"}, {"y"}, "pick");
  m.FloatOutput("y");

  std::vector<std::string> needs_binding;
  ImportOptions options;
  options.needs_binding = &needs_binding;
  auto g = ImportOnnxBytes(m.Bytes(), options);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(g.status())) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("SequenceAt 'pick'"));
  EXPECT_THAT(g.status().message(), HasSubstr("position input 'p' must be known at compile time"));
  EXPECT_THAT(needs_binding, ElementsAre("p"));

  // Bound to a constant, the same model imports; SequenceAt is an alias of the element.
  HostTensor one(DType::kInt64, {});
  one.data_as<int64_t>()[0] = 1;
  options.bound_inputs["p"] = one;
  needs_binding.clear();
  g = ImportOnnxBytes(m.Bytes(), options);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(OptimizeGraph(**g).ok());
  EXPECT_TRUE((*g)->nodes().empty());
  EXPECT_EQ((*g)->outputs[0]->name, "b");
}

// A position computed from data (not a graph input) cannot be bound: the error says so by
// naming the value, and no binding is requested.
TEST(SequenceResolutionTest, DataDependentPositionIsFailedPreconditionWithoutBinding) {
  ModelBuilder m;
  m.FloatInput("a", {2});
  m.Node("ArgMax", {"a"}, {"p"});
  m.Node("SequenceConstruct", {"a", "a"}, {"s"});
  m.Node("SequenceErase", {"s", "p"}, {"t"}, "erase");
  ModelBuilder::IntAttr(m.Node("ConcatFromSequence", {"t"}, {"y"}), "axis", 0);
  m.FloatOutput("y");
  std::vector<std::string> needs_binding;
  ImportOptions options;
  options.needs_binding = &needs_binding;
  auto g = ImportOnnxBytes(m.Bytes(), options);
  ASSERT_FALSE(g.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(g.status())) << g.status();
  EXPECT_THAT(g.status().message(), HasSubstr("SequenceErase 'erase'"));
  EXPECT_THAT(g.status().message(), HasSubstr("'p'"));
  EXPECT_TRUE(needs_binding.empty());
}

// Without allow_structured_io (the server's setting) a sequence-typed graph output is refused
// with a message saying why; with it, the output is laid out as its element tensors.
TEST(SequenceResolutionTest, SequenceOutputsNeedStructuredIo) {
  ModelBuilder m;
  m.FloatInput("a", {2});
  m.FloatInput("b", {3});
  m.Node("SequenceConstruct", {"a", "b", "a"}, {"s"});
  m.SequenceOutput("s");
  auto refused = ImportOnnxBytes(m.Bytes());
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsUnimplemented(refused.status()));
  EXPECT_THAT(refused.status().message(),
              HasSubstr("graph output 's' is a sequence: sequence and optional graph inputs and "
                        "outputs are not supported (KServe"));

  ImportOptions options;
  options.allow_structured_io = true;
  std::vector<OutputLayout> layout;
  options.output_layout = &layout;
  auto g = ImportOnnxBytes(m.Bytes(), options);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_EQ(layout.size(), 1u);
  EXPECT_EQ(layout[0].kind, IoKind::kSequence);
  EXPECT_EQ(layout[0].first, 0u);
  EXPECT_EQ(layout[0].count, 3u);
  EXPECT_THAT((*g)->output_names, ElementsAre("s[0]", "s[1]", "s[2]"));
}

// A Loop carrying a sequence, with a constant trip count, is unrolled: no Loop remains, and each
// iteration's insert shows up as an element.
TEST(SequenceResolutionTest, LoopCarryingASequenceIsUnrolled) {
  ModelBuilder m;
  m.FloatInput("x", {4});
  m.Int64Constant("trips", 3);
  m.Node("SequenceEmpty", {}, {"empty"});
  onnx::NodeProto* loop = m.Node("Loop", {"trips", "", "empty"}, {"result"}, "loop");
  onnx::AttributeProto* a = loop->add_attribute();
  a->set_name("body");
  a->set_type(onnx::AttributeProto::GRAPH);
  onnx::GraphProto* body = a->mutable_g();
  body->set_name("body");
  for (const char* in : {"i", "cond_in", "seq_in"}) body->add_input()->set_name(in);
  auto* n = body->add_node();
  n->set_op_type("Identity");
  n->add_input("cond_in");
  n->add_output("cond_out");
  n = body->add_node();
  n->set_op_type("SequenceInsert");
  n->add_input("seq_in");
  n->add_input("x");
  n->add_output("seq_out");
  body->add_output()->set_name("cond_out");
  body->add_output()->set_name("seq_out");
  m.SequenceOutput("result");
  ImportOptions options;
  options.allow_structured_io = true;
  options.run_checker = false;  // Untyped body inputs, as in function expansions.
  std::vector<OutputLayout> layout;
  options.output_layout = &layout;
  auto g = ImportOnnxBytes(m.Bytes(), options);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(OptimizeGraph(**g).ok());
  EXPECT_TRUE((*g)->nodes().empty());
  ASSERT_EQ(layout.size(), 1u);
  EXPECT_EQ(layout[0].count, 3u);
  for (const ir::Value* out : (*g)->outputs) EXPECT_EQ(out, (*g)->inputs[0]);
}

}  // namespace
}  // namespace cuvil
