// RewriteWeightsInt4: which nodes become MatMulNBits, and that the packed weights dequantise to
// within one step of the float ones (checked by running both models with Cuvil).
#include "int4_rewrite.h"

#include <cmath>
#include <random>
#include <set>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "onnx_access.h"
#include "quantizer.h"

namespace cuvil::quantize {
namespace {

// x [batch, 40] -> MatMul(W1 [40, 24]) -> Relu -> Gemm(W2 [10, 24], transB, C [10]) -> + z -> y.
onnx::ModelProto TwoLayers() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("two");
  auto io = [](onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  };
  io(g->add_input(), "x", {40});
  io(g->add_input(), "z", {10});
  io(g->add_output(), "y", {10});
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(rng);
    return v;
  };
  *g->add_initializer() = MakeTensor("W1", onnx::TensorProto::FLOAT, {40, 24}, random(960));
  *g->add_initializer() = MakeTensor("W2", onnx::TensorProto::FLOAT, {10, 24}, random(240));
  *g->add_initializer() = MakeTensor("C", onnx::TensorProto::FLOAT, {10}, random(10));
  auto node = [&](const char* op, const char* name, std::vector<std::string> in,
                  const std::string& out) {
    onnx::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return n;
  };
  node("MatMul", "fc1", {"x", "W1"}, "h");
  node("Relu", "relu", {"h"}, "r");
  onnx::NodeProto* fc2 = node("Gemm", "fc2", {"r", "W2", "C"}, "g");
  auto* t = fc2->add_attribute();
  t->set_name("transB");
  t->set_type(onnx::AttributeProto::INT);
  t->set_i(1);
  node("Add", "add", {"g", "z"}, "y");
  return m;
}

std::vector<float> RunModel(const onnx::ModelProto& m, const HostTensor& x, const HostTensor& z) {
  auto compiled = CompileOnnxBytes(m.SerializeAsString());
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {};
  auto engine = JitEngine::Create();
  auto loaded = (*engine)->Load("m/1", std::move(*compiled));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  auto y = (*loaded)->Run({x, z});
  EXPECT_TRUE(y.ok()) << y.status();
  if (!y.ok()) return {};
  return std::vector<float>((*y)[0].data_as<float>(),
                            (*y)[0].data_as<float>() + (*y)[0].num_elements());
}

TEST(Int4RewriteTest, MatMulAndGemmBecomeMatMulNBitsThatCloselyMatchFloat) {
  onnx::ModelProto float_model = TwoLayers();
  onnx::ModelProto m = float_model;
  auto layers = RewriteWeightsInt4(m, {16, {}});
  ASSERT_TRUE(layers.ok()) << layers.status();
  ASSERT_EQ(layers->size(), 2u);
  EXPECT_EQ((*layers)[0].node, "fc1");
  EXPECT_EQ((*layers)[0].k, 40);
  EXPECT_EQ((*layers)[0].n, 24);
  EXPECT_EQ((*layers)[1].op_type, "Gemm");
  EXPECT_EQ((*layers)[1].k, 24);
  EXPECT_EQ((*layers)[1].n, 10);
  for (const Int4Layer& l : *layers) EXPECT_GT(l.weight_sqnr_db, 15.0) << l.node;
  int nbits = 0;
  for (const auto& n : m.graph().node()) {
    if (n.op_type() == "MatMulNBits") {
      ++nbits;
      EXPECT_EQ(n.domain(), "com.microsoft");
    }
  }
  EXPECT_EQ(nbits, 2);
  for (const auto& t : m.graph().initializer()) {
    EXPECT_NE(t.name(), "W1");  // The float weights are gone.
    EXPECT_NE(t.name(), "W2");
  }
  EXPECT_TRUE(CheckModel(m).ok()) << CheckModel(m);

  HostTensor x(DType::kFloat32, {3, 40}), z(DType::kFloat32, {3, 10});
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (int i = 0; i < 120; ++i) x.data_as<float>()[i] = uniform(rng);
  for (int i = 0; i < 30; ++i) z.data_as<float>()[i] = uniform(rng);
  const std::vector<float> want = RunModel(float_model, x, z), got = RunModel(m, x, z);
  ASSERT_EQ(got.size(), want.size());
  double err = 0, ref = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  // 4 bits with one scale per 16 weights: well under 10% relative error, but not exact.
  EXPECT_LT(std::sqrt(err / ref), 0.1);
  EXPECT_GT(err, 0.0);
}

// Two MatMuls reading one weight share one packed copy (no duplicate initializer names), and the
// model still matches float.
TEST(Int4RewriteTest, SharedWeightsArePackedOnce) {
  onnx::ModelProto float_model = TwoLayers();
  onnx::GraphProto* g = float_model.mutable_graph();
  // h = x W1 + x W1 (W1 read twice) instead of x W1.
  g->mutable_node(0)->set_output(0, "h1");
  onnx::NodeProto* again = g->add_node();
  *again = g->node(0);
  again->set_name("fc1b");
  again->set_output(0, "h2");
  onnx::NodeProto* sum = g->add_node();
  sum->set_op_type("Add");
  sum->set_name("sum");
  sum->add_input("h1");
  sum->add_input("h2");
  sum->add_output("h");
  // Topological order: fc1, fc1b, sum, then relu, fc2 and add as before.
  const std::vector<onnx::NodeProto> nodes(g->node().begin(), g->node().end());
  g->clear_node();
  for (int i : {0, 4, 5, 1, 2, 3}) *g->add_node() = nodes[i];
  onnx::ModelProto m = float_model;
  auto layers = RewriteWeightsInt4(m, {16, {}});
  ASSERT_TRUE(layers.ok()) << layers.status();
  ASSERT_EQ(layers->size(), 3u);
  EXPECT_EQ((*layers)[0].weight_sqnr_db, (*layers)[1].weight_sqnr_db);
  std::set<std::string> names;
  for (const auto& t : m.graph().initializer()) {
    EXPECT_TRUE(names.insert(t.name()).second) << "duplicate initializer " << t.name();
  }
  EXPECT_EQ(names.count("W1.int4"), 1u);
  EXPECT_TRUE(CheckModel(m).ok()) << CheckModel(m);
  HostTensor x(DType::kFloat32, {2, 40}), z(DType::kFloat32, {2, 10});
  for (int i = 0; i < 80; ++i) x.data_as<float>()[i] = 0.01f * static_cast<float>(i % 17);
  for (int i = 0; i < 20; ++i) z.data_as<float>()[i] = 0.5f;
  const std::vector<float> want = RunModel(float_model, x, z), got = RunModel(m, x, z);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 0.1) << i;
}

TEST(Int4RewriteTest, ExcludedAndOtherFormsStayAndBadOptionsAreRefused) {
  onnx::ModelProto m = TwoLayers();
  auto layers = RewriteWeightsInt4(m, {32, {"fc1"}});
  ASSERT_TRUE(layers.ok()) << layers.status();
  ASSERT_EQ(layers->size(), 1u);
  EXPECT_EQ((*layers)[0].node, "fc2");
  EXPECT_EQ(m.graph().node(0).op_type(), "MatMul");

  onnx::ModelProto untouched = TwoLayers();
  EXPECT_FALSE(RewriteWeightsInt4(untouched, {24, {}}).ok());  // Not a multiple of 16.
  auto missing = RewriteWeightsInt4(untouched, {32, {"nope"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("no node named 'nope'"), std::string::npos);
  EXPECT_EQ(untouched.SerializeAsString(), TwoLayers().SerializeAsString());
}

}  // namespace
}  // namespace cuvil::quantize
