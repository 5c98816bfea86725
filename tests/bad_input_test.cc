// Bad input gets a clear error and never a crash: garbage models, invalid graphs, unsupported ops,
// inputs of the wrong shape or dtype.
#include <fstream>
#include <functional>
#include <limits>

#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/tensor_file.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_models.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

// Builds small ONNX graphs for the hardening tests. Dims of -1 are the symbolic "batch".
class GraphBuilder {
 public:
  explicit GraphBuilder(int opset = 13) {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(opset);
    g_ = model_.mutable_graph();
    g_->set_name("hardening");
  }

  void Input(const std::string& name, int elem_type, const std::vector<int64_t>& dims) {
    Describe(g_->add_input(), name, elem_type, &dims);
  }
  void Output(const std::string& name, int elem_type) {
    Describe(g_->add_output(), name, elem_type, nullptr);
  }
  // An int64 initializer of shape `dims` (a scalar when dims is empty).
  void Int64s(const std::string& name, const std::vector<int64_t>& dims,
              const std::vector<int64_t>& values) {
    onnx::TensorProto* t = Init(name, onnx::TensorProto::INT64, dims);
    for (int64_t v : values) t->add_int64_data(v);
  }
  void Int32s(const std::string& name, const std::vector<int64_t>& dims,
              const std::vector<int32_t>& values) {
    onnx::TensorProto* t = Init(name, onnx::TensorProto::INT32, dims);
    for (int32_t v : values) t->add_int32_data(v);
  }
  void Floats(const std::string& name, const std::vector<int64_t>& dims,
              const std::vector<float>& values) {
    onnx::TensorProto* t = Init(name, onnx::TensorProto::FLOAT, dims);
    for (float v : values) t->add_float_data(v);
  }
  onnx::NodeProto* Node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs) {
    onnx::NodeProto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(op + "_node");
    for (const auto& i : inputs) n->add_input(i);
    for (const auto& o : outputs) n->add_output(o);
    return n;
  }
  static void Attr(onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void Attr(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  std::string Bytes() const { return model_.SerializeAsString(); }

 private:
  void Describe(onnx::ValueInfoProto* info, const std::string& name, int elem_type,
                const std::vector<int64_t>* dims) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem_type);
    auto* shape = tt->mutable_shape();  // The checker wants one; Cuvil infers output shapes.
    if (dims == nullptr) return;
    for (int64_t d : *dims) {
      if (d == -1) {
        shape->add_dim()->set_dim_param("batch");
      } else {
        shape->add_dim()->set_dim_value(d);
      }
    }
  }
  onnx::TensorProto* Init(const std::string& name, int dtype, const std::vector<int64_t>& dims) {
    onnx::TensorProto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(dtype);
    for (int64_t d : dims) t->add_dims(d);
    return t;
  }

  onnx::ModelProto model_;
  onnx::GraphProto* g_;
};

// Compiles `bytes` and loads it into `engine` as namespace `name`.
absl::StatusOr<std::unique_ptr<LoadedModel>> CompileAndLoad(JitEngine& engine,
                                                            const std::string& name,
                                                            const std::string& bytes) {
  auto compiled = CompileOnnxBytes(bytes);
  if (!compiled.ok()) return compiled.status();
  return engine.Load(name, std::move(*compiled));
}

template <typename T>
HostTensor Tensor(DType dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  HostTensor t(dtype, std::move(shape));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    t.data_as<T>()[i] = static_cast<size_t>(i) < values.size() ? values[i] : T{};
  }
  return t;
}

template <typename T>
std::vector<T> Values(const HostTensor& t) {
  return std::vector<T>(t.data_as<T>(), t.data_as<T>() + t.num_elements());
}

TEST(BadInputTest, GarbageBytesAreInvalidArgument) {
  auto m = CompileOnnxBytes("this is not a protobuf \xff\xff\xff");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("not a valid ONNX model"));
}

TEST(BadInputTest, TruncatedModelIsRejected) {
  std::string bytes = testing::BinaryWithConstant("Add", 64, 1.0f);
  for (size_t cut : {bytes.size() / 2, bytes.size() - 3, size_t{5}}) {
    auto m = CompileOnnxBytes(bytes.substr(0, cut));
    EXPECT_FALSE(m.ok()) << "cut at " << cut;
  }
}

// Found by fuzz_onnx_compile: a graph whose output list was mutated away.
TEST(BadInputTest, GraphWithoutOutputsIsRejected) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 1.0f));
  model.mutable_graph()->clear_output();
  auto m = CompileOnnxBytes(model.SerializeAsString());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("no outputs"));
}

TEST(BadInputTest, MissingFileIsNotFound) {
  auto m = CompileOnnxFile("/nonexistent/model.onnx");
  EXPECT_EQ(m.status().code(), absl::StatusCode::kNotFound);
}

TEST(BadInputTest, UnsupportedOpNamesTypeNodeAndOpset) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 1.0f));
  model.mutable_graph()->mutable_node(0)->set_op_type("Frobnicate");
  model.mutable_graph()->mutable_node(0)->set_domain("com.example");
  model.add_opset_import()->set_domain("com.example");
  model.mutable_opset_import(1)->set_version(1);
  auto m = CompileOnnxBytes(model.SerializeAsString());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(m.status().message(), HasSubstr("Frobnicate"));
  EXPECT_THAT(m.status().message(), HasSubstr("Add_node"));
}

TEST(BadInputTest, InvalidGraphFailsTheChecker) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 1.0f));
  model.mutable_graph()->mutable_node(0)->set_input(1, "undefined_tensor");
  auto m = CompileOnnxBytes(model.SerializeAsString());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("undefined_tensor"));
}

TEST(BadInputTest, ShapeMismatchInGraphIsReported) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 1.0f));
  model.mutable_graph()->mutable_initializer(0)->set_dims(0, 3);
  model.mutable_graph()->mutable_initializer(0)->clear_float_data();
  for (int i = 0; i < 3; ++i) model.mutable_graph()->mutable_initializer(0)->add_float_data(1);
  auto m = CompileOnnxBytes(model.SerializeAsString());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(m.status().message(), HasSubstr("do not broadcast"));
}

TEST(BadInputTest, TensorClaimingMoreDataThanItHoldsIsRejectedBeforeAllocation) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 1.0f));
  // 2^32 floats (16 GiB) claimed, 4 given: must fail fast, not allocate.
  model.mutable_graph()->mutable_initializer(0)->set_dims(0, int64_t{1} << 32);
  auto m = CompileOnnxBytes(model.SerializeAsString());
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("shape needs"));
}

TEST(BadInputTest, WrongInputShapeOrDtypeAtRunTime) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto compiled = CompileOnnxBytes(testing::BinaryWithConstant("Add", 4, 1.0f));
  ASSERT_TRUE(compiled.ok());
  auto loaded = (*engine)->Load("m/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok());
  auto wrong_width = (*loaded)->Run({HostTensor(DType::kFloat32, {2, 5})});
  EXPECT_EQ(wrong_width.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_width.status().message(), HasSubstr("input 'x'"));
  EXPECT_THAT(wrong_width.status().message(), HasSubstr("[batch,4]"));
  auto wrong_rank = (*loaded)->Run({HostTensor(DType::kFloat32, {8})});
  EXPECT_EQ(wrong_rank.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_dtype = (*loaded)->Run({HostTensor(DType::kInt32, {2, 4})});
  EXPECT_EQ(wrong_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong_dtype.status().message(), HasSubstr("int32"));
  auto missing = (*loaded)->Run({});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  // The model still serves after the bad requests.
  auto ok = (*loaded)->Run({HostTensor(DType::kFloat32, {2, 4})});
  ASSERT_TRUE(ok.ok());
  EXPECT_FLOAT_EQ((*ok)[0].data_as<float>()[7], 1.0f);
}

TEST(BadInputTest, GarbageTensorFile) {
  std::string path = ::testing::TempDir() + "/garbage.pb";
  std::ofstream(path) << "\x08\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01 definitely not a tensor";
  auto t = ReadTensorFile(path);
  EXPECT_FALSE(t.ok());
}

// ---- Sizes taken from the model never wrap ----

constexpr int kFloat = onnx::TensorProto::FLOAT;
constexpr int kInt32 = onnx::TensorProto::INT32;
constexpr int kInt64 = onnx::TensorProto::INT64;

TEST(BadInputTest, HugeStaticInputDimsAreTooLarge) {
  for (const std::vector<int64_t>& dims :
       {std::vector<int64_t>{1, int64_t{1} << 40}, std::vector<int64_t>{int64_t{1} << 62, 4},
        std::vector<int64_t>{-1, int64_t{1} << 39}}) {
    GraphBuilder b;
    b.Input("x", kFloat, dims);
    b.Output("y", kFloat);
    b.Node("Relu", {"x"}, {"y"});
    auto m = CompileOnnxBytes(b.Bytes());
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr("too large"));
    EXPECT_THAT(m.status().message(), HasSubstr("input 'x'"));
  }
}

TEST(BadInputTest, NegativeInputDimIsRejected) {
  GraphBuilder b;
  b.Input("x", kFloat, {2, -5});
  b.Output("y", kFloat);
  b.Node("Relu", {"x"}, {"y"});
  auto m = CompileOnnxBytes(b.Bytes());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("negative"));
}

// A reshape target whose element count wraps to the input's (2^64 + 4 = 4 mod 2^64).
TEST(BadInputTest, ReshapeToAWrappingShapeIsTooLarge) {
  GraphBuilder b;
  b.Input("x", kFloat, {4});
  b.Output("y", kFloat);
  b.Int64s("shape", {2}, {(int64_t{1} << 62) + 1, 4});
  b.Node("Reshape", {"x", "shape"}, {"y"});
  auto m = CompileOnnxBytes(b.Bytes());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("Reshape"));
}

// Data-sized outputs of shape-computing ops: every one fails compile cleanly.
TEST(BadInputTest, OversizedDataSizedOutputsFailCompile) {
  struct Case {
    std::string what;  // Also the substring the error must contain.
    std::function<void(GraphBuilder&)> build;
  };
  constexpr int64_t kBig = int64_t{1} << 40;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  std::vector<Case> cases = {
      {"negative dimension",
       [](GraphBuilder& b) {
         b.Int64s("s", {2}, {-1, 5});
         b.Node("ConstantOfShape", {"s"}, {"y"});
       }},
      {"shape is too large",
       [](GraphBuilder& b) {
         b.Int64s("s", {2}, {int64_t{1} << 32, int64_t{1} << 32});
         b.Node("ConstantOfShape", {"s"}, {"y"});
       }},
      {"Range 'Range_node' (opset 13): output is too large",
       [](GraphBuilder& b) {
         b.Int64s("s", {}, {kMin});
         b.Int64s("l", {}, {kMax});
         b.Int64s("d", {}, {1});
         b.Node("Range", {"s", "l", "d"}, {"y"});
       }},
      {"output is too large",
       [](GraphBuilder& b) {
         b.Floats("s", {}, {0});
         b.Floats("l", {}, {1});
         b.Floats("d", {}, {1e-30f});
         b.Node("Range", {"s", "l", "d"}, {"y"});
       }},
      {"not a number",
       [](GraphBuilder& b) {
         b.Floats("s", {}, {0});
         b.Floats("l", {}, {std::numeric_limits<float>::quiet_NaN()});
         b.Floats("d", {}, {1});
         b.Node("Range", {"s", "l", "d"}, {"y"});
       }},
      {"Tile 'Tile_node' (opset 13): output 'y' is too large",
       [](GraphBuilder& b) {
         b.Int64s("v", {1}, {7});
         b.Int64s("r", {1}, {kBig});
         b.Node("Tile", {"v", "r"}, {"y"});
       }},
      {"output 'y' is too large",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {4});
         b.Int64s("r", {1}, {(int64_t{1} << 62) + 1});
         b.Node("Tile", {"x", "r"}, {"y"});
       }},
      {"Expand 'Expand_node' (opset 13): output 'y' is too large",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {1});
         b.Int64s("s", {2}, {kBig, kBig});
         b.Node("Expand", {"x", "s"}, {"y"});
       }},
      {"pads are too large",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {4});
         b.Int64s("p", {2}, {kMax, kMax});
         b.Node("Pad", {"x", "p"}, {"y"});
       }},
      {"Resize 'Resize_node' (opset 13): output is too large",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {1, 1, 2, 2});
         b.Floats("roi", {0}, {});
         b.Floats("sc", {4}, {1, 1, 1e30f, 1});
         b.Node("Resize", {"x", "roi", "sc"}, {"y"});
       }},
      {"is not a finite non-negative number",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {1, 1, 2, 2});
         b.Floats("roi", {0}, {});
         b.Floats("sc", {4}, {1, 1, std::numeric_limits<float>::quiet_NaN(), 1});
         b.Node("Resize", {"x", "roi", "sc"}, {"y"});
       }},
      {"cannot resize the empty axis",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {1, 1, 0, 2});
         b.Floats("roi", {0}, {});
         b.Floats("sc", {0}, {});
         b.Int64s("sz", {4}, {1, 1, 4, 2});
         b.Node("Resize", {"x", "roi", "sc", "sz"}, {"y"});
       }},
      {"dilations value",
       [](GraphBuilder& b) {
         b.Input("x", kFloat, {1, 1, 8});
         auto* n = b.Node("MaxPool", {"x"}, {"y"});
         GraphBuilder::Attr(n, "kernel_shape", std::vector<int64_t>{3});
         GraphBuilder::Attr(n, "dilations", std::vector<int64_t>{int64_t{1} << 62});
       }},
  };
  for (const Case& c : cases) {
    GraphBuilder b;
    b.Output("y", kFloat);
    c.build(b);
    auto m = CompileOnnxBytes(b.Bytes());
    ASSERT_FALSE(m.ok()) << c.what;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument)
        << c.what << ": " << m.status();
    EXPECT_THAT(m.status().message(), HasSubstr(c.what));
  }
}

TEST(BadInputTest, SliceWithExtremeStepsIsSafe) {
  for (int64_t step : {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()}) {
    GraphBuilder b;
    b.Input("x", kFloat, {5});
    b.Output("y", kFloat);
    b.Int64s("st", {1}, {step > 0 ? 0 : -1});
    b.Int64s(
        "en", {1},
        {step > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min()});
    b.Int64s("ax", {1}, {0});
    b.Int64s("sp", {1}, {step});
    b.Node("Slice", {"x", "st", "en", "ax", "sp"}, {"y"});
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok());
    auto loaded = CompileAndLoad(**engine, "slice/1", b.Bytes());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto y = (*loaded)->Run({Tensor<float>(DType::kFloat32, {5}, {1, 2, 3, 4, 5})});
    ASSERT_TRUE(y.ok()) << y.status();
    // One element either way: the first (step > 0) or the last (step < 0).
    EXPECT_THAT(Values<float>((*y)[0]), ::testing::ElementsAre(step > 0 ? 1.0f : 5.0f));
  }
}

// ---- Axes of rank-0 tensors ----

TEST(BadInputTest, AxisOnAScalarIsInvalidArgument) {
  struct Case {
    std::string op;
    std::function<onnx::NodeProto*(GraphBuilder&)> build;
  };
  std::vector<Case> cases = {
      {"Concat", [](GraphBuilder& b) { return b.Node("Concat", {"x", "x"}, {"y"}); }},
      {"Softmax", [](GraphBuilder& b) { return b.Node("Softmax", {"x"}, {"y"}); }},
      {"LogSoftmax", [](GraphBuilder& b) { return b.Node("LogSoftmax", {"x"}, {"y"}); }},
      {"Hardmax", [](GraphBuilder& b) { return b.Node("Hardmax", {"x"}, {"y"}); }},
      {"Flatten", [](GraphBuilder& b) { return b.Node("Flatten", {"x"}, {"y"}); }},
      {"ArgMax", [](GraphBuilder& b) { return b.Node("ArgMax", {"x"}, {"y"}); }},
      {"ArgMin", [](GraphBuilder& b) { return b.Node("ArgMin", {"x"}, {"y"}); }},
      {"Split", [](GraphBuilder& b) { return b.Node("Split", {"x"}, {"y", "z"}); }},
      {"LayerNormalization",
       [](GraphBuilder& b) {
         b.Floats("scale", {}, {1});
         return b.Node("LayerNormalization", {"x", "scale"}, {"y"});
       }},
      {"Gather",
       [](GraphBuilder& b) {
         b.Int64s("i", {1}, {0});
         return b.Node("Gather", {"x", "i"}, {"y"});
       }},
      {"ReduceSum",
       [](GraphBuilder& b) {
         b.Int64s("axes", {1}, {0});
         return b.Node("ReduceSum", {"x", "axes"}, {"y"});
       }},
      {"Squeeze",
       [](GraphBuilder& b) {
         b.Int64s("axes", {1}, {0});
         return b.Node("Squeeze", {"x", "axes"}, {"y"});
       }},
      {"TopK",
       [](GraphBuilder& b) {
         b.Int64s("k", {1}, {1});
         return b.Node("TopK", {"x", "k"}, {"y", "z"});
       }},
      {"QuantizeLinear",
       [](GraphBuilder& b) {
         b.Floats("scale", {2}, {1, 1});
         return b.Node("QuantizeLinear", {"x", "scale"}, {"y"});
       }},
  };
  for (const Case& c : cases) {
    for (int64_t axis : {0, -1, 1}) {
      if (c.op == "Flatten" && axis == 0) continue;  // [] -> [1, 1] is valid Flatten.
      GraphBuilder b(/*opset=*/17);
      b.Input("x", kFloat, {});
      b.Output("y", kFloat);
      onnx::NodeProto* n = c.build(b);
      if (c.op != "ReduceSum" && c.op != "Squeeze") GraphBuilder::Attr(n, "axis", axis);
      auto m = CompileOnnxBytes(b.Bytes());
      ASSERT_FALSE(m.ok()) << c.op << " axis " << axis;
      EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument)
          << c.op << ": " << m.status();
      EXPECT_THAT(m.status().message(), HasSubstr(c.op + "_node"));
      EXPECT_THAT(m.status().message(), HasSubstr("out of range for rank 0"));
    }
  }
}

// ---- Integer division never traps ----

template <typename T>
void ExpectDivMod(DType dtype, int onnx_type) {
  constexpr T kMin = std::numeric_limits<T>::min();
  const std::vector<T> a = {kMin, 7, -7, 5, kMin, 9};
  const std::vector<T> d = {-1, 0, -1, -2, 1, 4};
  for (const std::string op : {"Div", "Mod"}) {
    GraphBuilder b;
    b.Input("a", onnx_type, {6});
    b.Input("b", onnx_type, {6});
    b.Output("y", onnx_type);
    b.Node(op, {"a", "b"}, {"y"});
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok());
    auto loaded = CompileAndLoad(**engine, "div/1", b.Bytes());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto y = (*loaded)->Run({Tensor<T>(dtype, {6}, a), Tensor<T>(dtype, {6}, d)});
    ASSERT_TRUE(y.ok()) << y.status();
    // x / 0 = 0 and x % 0 = 0 by definition; INT_MIN / -1 wraps; x % -1 = 0; Mod takes the
    // divisor's sign (5 mod -2 = -1).
    if (op == "Div") {
      EXPECT_THAT(Values<T>((*y)[0]), ::testing::ElementsAre(kMin, 0, 7, -2, kMin, 2)) << op;
    } else {
      EXPECT_THAT(Values<T>((*y)[0]), ::testing::ElementsAre(0, 0, 0, -1, 0, 1)) << op;
    }
  }
}

TEST(BadInputTest, IntegerDivisionEdgeCasesInt32) { ExpectDivMod<int32_t>(DType::kInt32, kInt32); }
TEST(BadInputTest, IntegerDivisionEdgeCasesInt64) { ExpectDivMod<int64_t>(DType::kInt64, kInt64); }

// The shape folder divides known int64 values at compile time: INT64_MIN / -1 must not trap.
TEST(BadInputTest, FoldedIntegerDivisionDoesNotTrap) {
  for (int onnx_type : {kInt64, kInt32}) {
    GraphBuilder b;
    b.Output("y", onnx_type);
    if (onnx_type == kInt64) {
      b.Int64s("a", {3}, {std::numeric_limits<int64_t>::min(), 7, 9});
      b.Int64s("d", {3}, {-1, 0, -1});
    } else {
      b.Int32s("a", {3}, {std::numeric_limits<int32_t>::min(), 7, 9});
      b.Int32s("d", {3}, {-1, 0, -1});
    }
    b.Node("Div", {"a", "d"}, {"y"});
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok());
    auto loaded = CompileAndLoad(**engine, "fold/1", b.Bytes());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto y = (*loaded)->Run({});
    ASSERT_TRUE(y.ok()) << y.status();
    if (onnx_type == kInt64) {
      EXPECT_THAT(Values<int64_t>((*y)[0]),
                  ::testing::ElementsAre(std::numeric_limits<int64_t>::min(), 0, -9));
    } else {
      EXPECT_THAT(Values<int32_t>((*y)[0]),
                  ::testing::ElementsAre(std::numeric_limits<int32_t>::min(), 0, -9));
    }
  }
}

// ---- Data-driven indices stay inside their buffers ----

TEST(BadInputTest, EntryErrorsMapToInvalidArgument) {
  EXPECT_TRUE(EntryStatus(kEntryOk).ok());
  EXPECT_EQ(EntryStatus(kEntryIndexOutOfBounds).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(EntryStatus(kEntryIndexOutOfBounds).message(), HasSubstr("out of data bounds"));
  EXPECT_EQ(EntryStatus(kEntrySliceOutOfBounds).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EntryStatus(kEntryTopKTooLarge).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(EntryStatus(77).ok());
}

TEST(BadInputTest, GatherWithOutOfRangeIndicesFails) {
  for (int64_t rows : {3, 0}) {
    GraphBuilder b;
    b.Input("data", kFloat, {rows, 2});
    b.Input("idx", kInt64, {2});
    b.Output("y", kFloat);
    b.Node("Gather", {"data", "idx"}, {"y"});
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok());
    auto loaded = CompileAndLoad(**engine, "gather/1", b.Bytes());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    HostTensor data = Tensor<float>(DType::kFloat32, {rows, 2}, {1, 2, 3, 4, 5, 6});
    if (rows > 0) {
      auto ok = (*loaded)->Run({data, Tensor<int64_t>(DType::kInt64, {2}, {-1, 0})});
      ASSERT_TRUE(ok.ok()) << ok.status();
      EXPECT_THAT(Values<float>((*ok)[0]), ::testing::ElementsAre(5, 6, 1, 2));
    }
    for (int64_t bad : {int64_t{3}, int64_t{-4}, std::numeric_limits<int64_t>::min(),
                        std::numeric_limits<int64_t>::max()}) {
      auto y = (*loaded)->Run({data, Tensor<int64_t>(DType::kInt64, {2}, {0, bad})});
      EXPECT_FALSE(y.ok()) << "rows " << rows << " index " << bad;
    }
  }
}

TEST(BadInputTest, ScatterNDWithOutOfRangeIndicesFails) {
  GraphBuilder b;
  b.Input("data", kFloat, {4});
  b.Input("idx", kInt64, {1, 1});
  b.Input("upd", kFloat, {1});
  b.Output("y", kFloat);
  b.Node("ScatterND", {"data", "idx", "upd"}, {"y"});
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = CompileAndLoad(**engine, "scatter/1", b.Bytes());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor data = Tensor<float>(DType::kFloat32, {4}, {1, 2, 3, 4});
  HostTensor upd = Tensor<float>(DType::kFloat32, {1}, {9});
  auto ok = (*loaded)->Run({data, Tensor<int64_t>(DType::kInt64, {1, 1}, {-1}), upd});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(Values<float>((*ok)[0]), ::testing::ElementsAre(1, 2, 3, 9));
  for (int64_t bad : {int64_t{4}, int64_t{-5}, std::numeric_limits<int64_t>::max()}) {
    auto y = (*loaded)->Run({data, Tensor<int64_t>(DType::kInt64, {1, 1}, {bad}), upd});
    EXPECT_FALSE(y.ok()) << "index " << bad;
  }
}

// GatherElements, ScatterElements, GatherND and the loss ops' targets: an index outside its axis
// fails the request (and neither reads nor writes out of bounds); in-range ones, negative
// included, work.
TEST(BadInputTest, ElementIndexOpsWithOutOfRangeIndicesFail) {
  struct Case {
    std::string op;
    std::vector<int64_t> idx_shape;
    int64_t good;  // an in-range index (negative counts from the end)
    size_t pos;    // the output element it determines
    float want;
  };
  const std::vector<Case> cases = {
      {"GatherElements", {1, 2}, -1, 1, 3},          // data[0][-1]
      {"ScatterElements", {1, 2}, -1, 4, 8},         // out[-1][1] = 8
      {"GatherND", {1, 2}, -1, 0, 6},                // data[1][-1]
      {"NegativeLogLikelihoodLoss", {2}, 1, 1, -5},  // -data[1][1]
  };
  for (const Case& c : cases) {
    GraphBuilder b(/*opset=*/16);
    b.Input("data", kFloat, {2, 3});
    b.Input("idx", kInt64, c.idx_shape);
    b.Output("y", kFloat);
    if (c.op == "ScatterElements") {
      b.Floats("upd", {1, 2}, {7, 8});
      GraphBuilder::Attr(b.Node(c.op, {"data", "idx", "upd"}, {"y"}), "axis", int64_t{0});
    } else if (c.op == "NegativeLogLikelihoodLoss") {
      b.Node(c.op, {"data", "idx"}, {"y"})->add_attribute()->CopyFrom([] {
        onnx::AttributeProto a;
        a.set_name("reduction");
        a.set_type(onnx::AttributeProto::STRING);
        a.set_s("none");
        return a;
      }());
    } else {
      onnx::NodeProto* n = b.Node(c.op, {"data", "idx"}, {"y"});
      if (c.op == "GatherElements") GraphBuilder::Attr(n, "axis", int64_t{1});
    }
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok());
    auto loaded = CompileAndLoad(**engine, c.op + "/1", b.Bytes());
    ASSERT_TRUE(loaded.ok()) << c.op << ": " << loaded.status();
    HostTensor data = Tensor<float>(DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
    std::vector<int64_t> good(2, 0);
    good[1] = c.good;
    if (c.op == "GatherND") good = {1, c.good};  // data[1][-1]
    auto ok = (*loaded)->Run({data, Tensor<int64_t>(DType::kInt64, c.idx_shape, good)});
    ASSERT_TRUE(ok.ok()) << c.op << ": " << ok.status();
    std::vector<float> got = Values<float>((*ok)[0]);
    ASSERT_GT(got.size(), c.pos) << c.op;
    EXPECT_EQ(got[c.pos], c.want) << c.op;
    for (int64_t bad : {int64_t{3}, int64_t{-4}, std::numeric_limits<int64_t>::max(),
                        std::numeric_limits<int64_t>::min()}) {
      std::vector<int64_t> idx(2, 0);
      idx[1] = bad;
      auto y = (*loaded)->Run({data, Tensor<int64_t>(DType::kInt64, c.idx_shape, idx)});
      EXPECT_FALSE(y.ok()) << c.op << " index " << bad;
    }
  }
}

// table[:batch] trusts at compile time that batch <= 3; a larger batch must fail, not read past
// the table.
TEST(BadInputTest, BatchDependentSliceBeyondItsInputFails) {
  GraphBuilder b;
  b.Input("x", kFloat, {-1, 2});
  b.Output("y", kFloat);
  b.Floats("table", {3, 2}, {1, 2, 3, 4, 5, 6});
  b.Int64s("zero", {1}, {0});
  b.Int64s("first", {}, {0});
  b.Node("Shape", {"x"}, {"shape"});
  b.Node("Gather", {"shape", "first"}, {"n"});
  auto* u = b.Node("Unsqueeze", {"n", "zero"}, {"end"});
  u->set_name("unsqueeze");
  b.Node("Slice", {"table", "zero", "end", "zero"}, {"rows"});
  b.Node("Add", {"rows", "x"}, {"y"});
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = CompileAndLoad(**engine, "slice/1", b.Bytes());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto ok = (*loaded)->Run({Tensor<float>(DType::kFloat32, {2, 2}, {})});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(Values<float>((*ok)[0]), ::testing::ElementsAre(1, 2, 3, 4));
  auto y = (*loaded)->Run({Tensor<float>(DType::kFloat32, {5, 2}, {})});
  EXPECT_FALSE(y.ok());
  // The model keeps serving valid batches.
  EXPECT_TRUE((*loaded)->Run({Tensor<float>(DType::kFloat32, {3, 2}, {})}).ok());
}

// K is checked against a batch-dependent axis only at run time.
TEST(BadInputTest, TopKLargerThanABatchDependentAxisFails) {
  GraphBuilder b;
  b.Input("x", kFloat, {-1});
  b.Output("y", kFloat);
  b.Int64s("k", {1}, {3});
  b.Node("TopK", {"x", "k"}, {"y", "i"});
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = CompileAndLoad(**engine, "topk/1", b.Bytes());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto ok = (*loaded)->Run({Tensor<float>(DType::kFloat32, {4}, {3, 9, 1, 7})});
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_THAT(Values<float>((*ok)[0]), ::testing::ElementsAre(9, 7, 3));
  EXPECT_FALSE((*loaded)->Run({Tensor<float>(DType::kFloat32, {2}, {3, 9})}).ok());
}

}  // namespace
}  // namespace cuvil
