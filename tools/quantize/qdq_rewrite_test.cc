#include "qdq_rewrite.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "output_error.h"
#include "quantizer.h"

namespace cuvil::quantize {
namespace {

void AddFloat(onnx::GraphProto& g, const std::string& name, std::vector<int64_t> dims, float start,
              float step) {
  onnx::TensorProto* t = g.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t n = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    n *= d;
  }
  for (int64_t i = 0; i < n; ++i) {
    // A deterministic spread of signs and magnitudes.
    t->add_float_data(start + step * static_cast<float>((i * 7) % 11 - 5));
  }
}

onnx::NodeProto* AddNode(onnx::GraphProto& g, const std::string& op, const std::string& name,
                         std::vector<std::string> in, const std::string& out) {
  onnx::NodeProto* n = g.add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (auto& i : in) n->add_input(i);
  n->add_output(out);
  return n;
}

void SetIo(onnx::ValueInfoProto* v, const std::string& name, std::vector<int64_t> dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

// x[1,3,4,4] -> Conv(w1[2,3,1,1], b1[2]) -> Relu -> Flatten -> Gemm(w2[5,32], b2[5], transB)
// -> MatMul(w3[5,4]) -> y[1,4].
onnx::ModelProto TinyModel(int opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(opset);
  onnx::GraphProto& g = *m.mutable_graph();
  g.set_name("tiny");
  SetIo(g.add_input(), "x", {1, 3, 4, 4});
  SetIo(g.add_output(), "y", {1, 4});
  AddFloat(g, "w1", {2, 3, 1, 1}, 0.0f, 0.1f);
  AddFloat(g, "b1", {2}, 0.05f, 0.01f);
  AddFloat(g, "w2", {5, 32}, 0.01f, 0.02f);
  AddFloat(g, "b2", {5}, 0.0f, 0.03f);
  AddFloat(g, "w3", {5, 4}, 0.0f, 0.2f);
  AddNode(g, "Conv", "conv", {"x", "w1", "b1"}, "c");
  AddNode(g, "Relu", "relu", {"c"}, "r");
  AddNode(g, "Flatten", "flatten", {"r"}, "f");
  auto* gemm = AddNode(g, "Gemm", "gemm", {"f", "w2", "b2"}, "h");
  auto* t = gemm->add_attribute();
  t->set_name("transB");
  t->set_type(onnx::AttributeProto::INT);
  t->set_i(1);
  AddNode(g, "MatMul", "", {"h", "w3"}, "y");
  return m;
}

std::map<std::string, Range> TinyRanges() {
  return {{"x", {-1.0f, 1.0f}}, {"f", {0.0f, 2.0f}}, {"h", {-3.0f, 3.0f}}};
}

const onnx::NodeProto* FindNode(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& n : g.node()) {
    if (n.name() == name || (n.name().empty() && n.output(0) == name)) return &n;
  }
  return nullptr;
}

const onnx::NodeProto* Producer(const onnx::GraphProto& g, const std::string& tensor) {
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) {
      if (o == tensor) return &n;
    }
  }
  return nullptr;
}

const onnx::TensorProto* FindInit(const onnx::GraphProto& g, const std::string& name) {
  for (const auto& t : g.initializer()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

int64_t AxisOf(const onnx::NodeProto& n) {
  for (const auto& a : n.attribute()) {
    if (a.name() == "axis") return a.i();
  }
  return -1;
}

std::vector<float> Floats(const onnx::TensorProto& t) {
  std::vector<float> v(t.raw_data().size() / sizeof(float));
  std::memcpy(v.data(), t.raw_data().data(), v.size() * sizeof(float));
  return v;
}

TEST(QdqRewriteTest, PlansTheActivationsOfConvGemmAndMatMul) {
  auto plan = PlanQuantization(TinyModel(), {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->nodes, (std::vector<int>{0, 3, 4}));
  EXPECT_EQ(plan->activations, (std::vector<std::string>{"x", "f", "h"}));
}

TEST(QdqRewriteTest, PerChannelRewriteIsValidWithTheRightAxesAndScales) {
  onnx::ModelProto m = TinyModel();
  QdqOptions options;
  options.per_channel = true;
  auto r = RewriteToQdq(m, TinyRanges(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(CheckModel(m).ok()) << CheckModel(m);
  const onnx::GraphProto& g = m.graph();
  ASSERT_EQ(r->layers.size(), 3u);
  EXPECT_TRUE(r->skipped.empty());

  // Every quantized input reads a DequantizeLinear; activations go through QuantizeLinear first.
  const onnx::NodeProto* conv = FindNode(g, "conv");
  ASSERT_NE(conv, nullptr);
  const onnx::NodeProto* x_dq = Producer(g, conv->input(0));
  ASSERT_NE(x_dq, nullptr);
  EXPECT_EQ(x_dq->op_type(), "DequantizeLinear");
  const onnx::NodeProto* x_q = Producer(g, x_dq->input(0));
  ASSERT_NE(x_q, nullptr);
  EXPECT_EQ(x_q->op_type(), "QuantizeLinear");
  EXPECT_EQ(x_q->input(0), "x");
  const onnx::TensorProto* x_zp = FindInit(g, x_q->input(2));
  ASSERT_NE(x_zp, nullptr);
  EXPECT_EQ(x_zp->data_type(), onnx::TensorProto::UINT8);
  EXPECT_EQ(static_cast<uint8_t>(x_zp->raw_data()[0]), 128);
  float x_scale = Floats(*FindInit(g, x_q->input(1)))[0];
  EXPECT_FLOAT_EQ(x_scale, 2.0f / 255.0f);

  // Conv weight: int8, axis 0, one scale per output channel, symmetric.
  const onnx::NodeProto* w1_dq = Producer(g, conv->input(1));
  ASSERT_NE(w1_dq, nullptr);
  EXPECT_EQ(w1_dq->op_type(), "DequantizeLinear");
  EXPECT_EQ(AxisOf(*w1_dq), 0);
  const onnx::TensorProto* w1q = FindInit(g, w1_dq->input(0));
  ASSERT_NE(w1q, nullptr);
  EXPECT_EQ(w1q->data_type(), onnx::TensorProto::INT8);
  EXPECT_EQ(std::vector<int64_t>(w1q->dims().begin(), w1q->dims().end()),
            (std::vector<int64_t>{2, 3, 1, 1}));
  std::vector<float> w1_scales = Floats(*FindInit(g, w1_dq->input(1)));
  ASSERT_EQ(w1_scales.size(), 2u);
  // w1 values: 0.1 * ((i*7)%11 - 5) for i = 0..5 -> rows {-0.5, 0.2, -0.1}, {0.4, -0.3, 0.5}.
  EXPECT_FLOAT_EQ(w1_scales[0], 0.5f / 127.0f);
  EXPECT_FLOAT_EQ(w1_scales[1], 0.5f / 127.0f);
  EXPECT_EQ(FindInit(g, "w1"), nullptr);  // The float weight is gone.

  // Conv bias: int32 with scale x_scale * w_scale[c], zero point 0.
  const onnx::NodeProto* b1_dq = Producer(g, conv->input(2));
  ASSERT_NE(b1_dq, nullptr);
  EXPECT_EQ(FindInit(g, b1_dq->input(0))->data_type(), onnx::TensorProto::INT32);
  std::vector<float> b1_scales = Floats(*FindInit(g, b1_dq->input(1)));
  ASSERT_EQ(b1_scales.size(), 2u);
  EXPECT_FLOAT_EQ(b1_scales[0], x_scale * w1_scales[0]);
  EXPECT_EQ(AxisOf(*b1_dq), 0);

  // Gemm with transB: weight [5, 32], output channels along axis 0.
  const onnx::NodeProto* w2_dq = Producer(g, FindNode(g, "gemm")->input(1));
  EXPECT_EQ(AxisOf(*w2_dq), 0);
  EXPECT_EQ(Floats(*FindInit(g, w2_dq->input(1))).size(), 5u);
  // MatMul: weight [5, 4], output channels are its columns (axis 1).
  const onnx::NodeProto* w3_dq = Producer(g, FindNode(g, "y")->input(1));
  EXPECT_EQ(AxisOf(*w3_dq), 1);
  EXPECT_EQ(Floats(*FindInit(g, w3_dq->input(1))).size(), 4u);
  for (const QuantizedLayer& l : r->layers) EXPECT_GT(l.weight_sqnr_db, 30.0) << l.node;
}

TEST(QdqRewriteTest, PerTensorHasScalarParamsAndNoAxis) {
  onnx::ModelProto m = TinyModel(12);
  auto r = RewriteToQdq(m, TinyRanges(), {});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(CheckModel(m).ok()) << CheckModel(m);
  for (const auto& n : m.graph().node()) {
    if (n.op_type() != "DequantizeLinear" && n.op_type() != "QuantizeLinear") continue;
    EXPECT_EQ(AxisOf(n), -1) << n.name();
    EXPECT_EQ(FindInit(m.graph(), n.input(1))->dims_size(), 0) << n.name();
  }
}

TEST(QdqRewriteTest, ExcludedNodesStayFloat) {
  onnx::ModelProto m = TinyModel();
  QdqOptions options;
  options.per_channel = true;
  options.exclude = {"gemm"};
  auto r = RewriteToQdq(m, TinyRanges(), options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(CheckModel(m).ok()) << CheckModel(m);
  const onnx::NodeProto* gemm = FindNode(m.graph(), "gemm");
  ASSERT_NE(gemm, nullptr);
  EXPECT_EQ(gemm->input(0), "f");
  EXPECT_EQ(gemm->input(1), "w2");
  EXPECT_EQ(gemm->input(2), "b2");
  ASSERT_NE(FindInit(m.graph(), "w2"), nullptr);
  EXPECT_EQ(FindInit(m.graph(), "w2")->data_type(), onnx::TensorProto::FLOAT);
  EXPECT_EQ(r->dequantized.count("f"), 0u);  // Its only consumer is excluded.
  EXPECT_EQ(r->layers.size(), 2u);
  int quantize_nodes = 0;
  for (const auto& n : m.graph().node()) quantize_nodes += n.op_type() == "QuantizeLinear";
  EXPECT_EQ(quantize_nodes, 2);  // x and h.
}

TEST(QdqRewriteTest, RefusesUnknownExcludesAndPerChannelBeforeOpset13) {
  QdqOptions options;
  options.exclude = {"nope"};
  EXPECT_TRUE(absl::IsInvalidArgument(PlanQuantization(TinyModel(), options).status()));
  QdqOptions per_channel;
  per_channel.per_channel = true;
  EXPECT_TRUE(absl::IsFailedPrecondition(PlanQuantization(TinyModel(12), per_channel).status()));
  // A node without a range is left float, not half-quantized.
  onnx::ModelProto m = TinyModel();
  auto ranges = TinyRanges();
  ranges.erase("h");
  auto r = RewriteToQdq(m, ranges, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->skipped, (std::vector<std::string>{"y"}));
  EXPECT_EQ(FindNode(m.graph(), "y")->input(0), "h");
  EXPECT_EQ(FindNode(m.graph(), "y")->input(1), "w3");
}

TEST(QdqRewriteTest, CuvilRunsTheQdqModelCloseToTheFloatOne) {
  onnx::ModelProto float_model = TinyModel();
  onnx::ModelProto qdq = float_model;
  // Ranges that cover what the model computes on inputs in [-1, 1].
  QdqOptions options;
  options.per_channel = true;
  std::map<std::string, Range> ranges = {{"x", {-1, 1}}, {"f", {0, 1}}, {"h", {-1, 1}}};
  ASSERT_TRUE(RewriteToQdq(qdq, ranges, options).ok());
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  std::string a, b;
  float_model.SerializeToString(&a);
  qdq.SerializeToString(&b);
  auto fc = CompileOnnxBytes(a);
  ASSERT_TRUE(fc.ok()) << fc.status();
  auto qc = CompileOnnxBytes(b);
  ASSERT_TRUE(qc.ok()) << qc.status();
  auto fl = (*engine)->Load("t/float", std::move(*fc));
  auto ql = (*engine)->Load("t/qdq", std::move(*qc));
  ASSERT_TRUE(fl.ok() && ql.ok());
  HostTensor x(DType::kFloat32, {1, 3, 4, 4});
  for (int64_t i = 0; i < x.num_elements(); ++i) {
    x.data_as<float>()[i] = std::sin(static_cast<float>(i));
  }
  auto want = (*fl)->Run({x});
  auto got = (*ql)->Run({x});
  ASSERT_TRUE(want.ok() && got.ok());
  OutputError e;
  e.Add({(*want)[0].data_as<float>(), 4}, {(*got)[0].data_as<float>(), 4}, 4);
  EXPECT_GT(e.cosine(), 0.99);
  // The quantized output differs from the float one (the Q/DQ ops really run).
  EXPECT_GT(e.max_abs_error(), 0.0);
}

}  // namespace
}  // namespace cuvil::quantize
