// The training ops end to end (import → compile → JIT → run) on small hand-built models: Adam
// over two tensors of different shapes against the update formula evaluated here in double, and
// the clear refusals (InvalidArgument naming the node) of a variadic input list whose runs
// disagree, and of training-mode Dropout with a non-zero ratio (a random mask).
#include <cmath>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

constexpr char kTraining[] = "ai.onnx.preview.training";

void AddTensor(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
               const std::vector<int64_t>& shape) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  auto* s = t->mutable_shape();
  for (int64_t d : shape) s->add_dim()->set_dim_value(d);
}

void AddFloatAttr(onnx::NodeProto* n, const std::string& name, float v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

// Adam over X1 [2] and X2 [shape2]; G2, V2 and H2 take g2_shape (X2's shape unless a test
// makes them disagree).
onnx::ModelProto AdamModel(const std::vector<int64_t>& shape2,
                           const std::vector<int64_t>& g2_shape) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain(kTraining);
  op->set_version(1);
  auto* g = m.mutable_graph();
  g->set_name("adam");
  AddTensor(g->add_input(), "R", onnx::TensorProto::FLOAT, {});
  AddTensor(g->add_input(), "T", onnx::TensorProto::INT64, {});
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Adam");
  n->set_domain(kTraining);
  n->set_name("adam_step");
  n->add_input("R");
  n->add_input("T");
  for (const char* group : {"X", "G", "V", "H"}) {
    for (int i = 1; i <= 2; ++i) {
      std::string name = std::string(group) + std::to_string(i);
      std::vector<int64_t> shape = i == 1                      ? std::vector<int64_t>{2}
                                   : std::string(group) == "X" ? shape2
                                                               : g2_shape;
      AddTensor(g->add_input(), name, onnx::TensorProto::FLOAT, shape);
      n->add_input(name);
    }
  }
  for (const char* group : {"X", "V", "H"}) {
    for (int i = 1; i <= 2; ++i) {
      std::string name = std::string(group) + std::to_string(i) + "_new";
      AddTensor(g->add_output(), name, onnx::TensorProto::FLOAT,
                i == 1 ? std::vector<int64_t>{2} : shape2);
      n->add_output(name);
    }
  }
  AddFloatAttr(n, "alpha", 0.8f);
  AddFloatAttr(n, "beta", 0.95f);
  AddFloatAttr(n, "epsilon", 0.05f);
  AddFloatAttr(n, "norm_coefficient", 0.1f);
  AddFloatAttr(n, "norm_coefficient_post", 0.02f);
  return m;
}

HostTensor Floats(std::vector<int64_t> shape, const std::vector<float>& v) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

TEST(TrainingOpsTest, AdamUpdatesTwoTensorsAsTheFormulaSays) {
  auto compiled = CompileOnnxBytes(AdamModel({3}, {3}).SerializeAsString(), CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto model = (*engine)->Load("adam/1", std::move(*compiled));
  ASSERT_TRUE(model.ok()) << model.status();

  const float r = 0.3f;
  const int64_t t = 3;
  const std::vector<std::vector<float>> x = {{1.5f, -2}, {0.25f, 4, -1}};
  const std::vector<std::vector<float>> gr = {{-0.5f, 2}, {1, -3, 0.125f}};
  const std::vector<std::vector<float>> v = {{0.1f, 0.2f}, {-0.3f, 0, 0.7f}};
  const std::vector<std::vector<float>> h = {{0.4f, 0.01f}, {2, 0.5f, 0}};
  HostTensor rt(DType::kFloat32, {});
  rt.data_as<float>()[0] = r;
  HostTensor tt(DType::kInt64, {});
  tt.data_as<int64_t>()[0] = t;
  std::vector<HostTensor> inputs = {rt, tt};
  for (const auto* group : {&x, &gr, &v, &h}) {
    for (const auto& values : *group) {
      inputs.push_back(Floats({static_cast<int64_t>(values.size())}, values));
    }
  }
  auto out = (*model)->Run(inputs);
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ(out->size(), 6u);

  // The update, in double with the float32 attribute values.
  const double alpha = 0.8f, beta = 0.95f, eps = 0.05f, norm = 0.1f, post = 0.02f;
  const double rate =
      r * std::sqrt(1 - std::pow(beta, double(t))) / (1 - std::pow(alpha, double(t)));
  for (size_t i = 0; i < 2; ++i) {
    for (size_t j = 0; j < x[i].size(); ++j) {
      SCOPED_TRACE(testing::Message() << "tensor " << i << " element " << j);
      double g = norm * x[i][j] + gr[i][j];
      double v_new = alpha * v[i][j] + (1 - alpha) * g;
      double h_new = beta * h[i][j] + (1 - beta) * g * g;
      double x_new = (1 - post) * (x[i][j] - rate * v_new / (std::sqrt(h_new) + eps));
      EXPECT_NEAR((*out)[i].data_as<float>()[j], x_new, 1e-5 * (1 + std::abs(x_new)));
      EXPECT_NEAR((*out)[2 + i].data_as<float>()[j], v_new, 1e-5 * (1 + std::abs(v_new)));
      EXPECT_NEAR((*out)[4 + i].data_as<float>()[j], h_new, 1e-5 * (1 + std::abs(h_new)));
    }
  }
}

TEST(TrainingOpsTest, RefusesVariadicRunsThatDisagree) {
  // G2, V2 and H2 are [2] while X2 is [3].
  auto compiled = CompileOnnxBytes(AdamModel({3}, {2}).SerializeAsString(), CompileOptions{});
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  EXPECT_NE(compiled.status().message().find("Adam 'adam_step'"), std::string::npos)
      << compiled.status();
  EXPECT_NE(compiled.status().message().find("'G2' must have the type and shape of X 'X2'"),
            std::string::npos)
      << compiled.status();

  // One input short: the runs of X, G, V and H cannot be equally long.
  onnx::ModelProto m = AdamModel({3}, {3});
  m.mutable_graph()->mutable_node(0)->mutable_input()->RemoveLast();
  CompileOptions options;
  options.import.run_checker = false;  // the checker accepts any variadic count; shown anyway
  compiled = CompileOnnxBytes(m.SerializeAsString(), options);
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  EXPECT_NE(compiled.status().message().find("Adam 'adam_step'"), std::string::npos)
      << compiled.status();
  EXPECT_NE(compiled.status().message().find("got 9 inputs"), std::string::npos)
      << compiled.status();
}

TEST(TrainingOpsTest, RefusesTrainingDropoutWithARandomMask) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* g = m.mutable_graph();
  g->set_name("dropout");
  AddTensor(g->add_input(), "x", onnx::TensorProto::FLOAT, {2, 3});
  auto* ratio = g->add_initializer();
  ratio->set_name("ratio");
  ratio->set_data_type(onnx::TensorProto::FLOAT);
  ratio->add_float_data(0.25f);
  auto* training = g->add_initializer();
  training->set_name("training");
  training->set_data_type(onnx::TensorProto::BOOL);
  training->add_int32_data(1);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Dropout");
  n->set_name("drop");
  for (const char* in : {"x", "ratio", "training"}) n->add_input(in);
  n->add_output("y");
  AddTensor(g->add_output(), "y", onnx::TensorProto::FLOAT, {2, 3});
  auto compiled = CompileOnnxBytes(m.SerializeAsString(), CompileOptions{});
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnimplemented) << compiled.status();
  EXPECT_NE(compiled.status().message().find("Dropout 'drop'"), std::string::npos)
      << compiled.status();
  EXPECT_NE(compiled.status().message().find("random mask"), std::string::npos)
      << compiled.status();

  // Ratio 0 keeps every element: the same model compiles and copies x.
  ratio->set_float_data(0, 0.0f);
  compiled = CompileOnnxBytes(m.SerializeAsString(), CompileOptions{});
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto model = (*engine)->Load("dropout/1", std::move(*compiled));
  ASSERT_TRUE(model.ok()) << model.status();
  auto out = (*model)->Run({Floats({2, 3}, {1, -2, 3, -4, 5, -6})});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ((*out)[0].data_as<float>()[i], (i % 2 ? -1 : 1) * float(i + 1)) << i;
  }
}

}  // namespace
}  // namespace cuvil
