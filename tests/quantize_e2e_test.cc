// cuvil-quantize end to end on the model zoo: ResNet-18 and MobileNet-V2 quantized (per-channel
// int8 weights, uint8 activations, min/max calibration on their test data sets), compiled by
// Cuvil from the serialized QDQ file and compared with PyTorch's float reference outputs.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "calibration_data.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/kernel_precision.h"
#include "cuvil/compiler/tensor_file.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "output_error.h"
#include "quantizer.h"
#include "test_models.h"

namespace cuvil::quantize {
namespace {

std::string ModelDir(const std::string& name) {
  const char* root = std::getenv("CUVIL_SOURCE_DIR");
  return std::string(root != nullptr ? root : ".") + "/../shared/models/" + name;
}

class QuantizeE2eTest : public ::testing::TestWithParam<std::string> {};

TEST_P(QuantizeE2eTest, QdqModelMatchesTheFloatReference) {
  const std::string dir = ModelDir(GetParam());
  std::ifstream in(dir + "/model.onnx", std::ios::binary);
  ASSERT_TRUE(in) << dir;
  std::stringstream bytes;
  bytes << in.rdbuf();
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(bytes.str()));
  auto inputs = ModelInputs(model);
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  auto sets = ReadCalibrationSets(dir, *inputs);
  ASSERT_TRUE(sets.ok()) << sets.status();
  ASSERT_EQ(sets->size(), 3u);

  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  QuantizeOptions options;
  options.qdq.per_channel = true;
  auto result = QuantizeModel(**engine, model, *sets, options);
  ASSERT_TRUE(result.ok()) << result.status();

  // Every Conv and Gemm reads dequantized data and weights: nothing was left float.
  const auto& g = result->model.graph();
  std::map<std::string, std::string> producer;
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) producer[o] = n.op_type();
  }
  int quantized = 0;
  for (const auto& n : g.node()) {
    if (n.op_type() != "Conv" && n.op_type() != "Gemm") continue;
    ++quantized;
    for (int k = 0; k < n.input_size(); ++k) {
      EXPECT_EQ(producer[n.input(k)], "DequantizeLinear") << n.name() << " input " << k;
    }
  }
  EXPECT_EQ(static_cast<size_t>(quantized), result->rewrite.layers.size());
  EXPECT_TRUE(result->rewrite.skipped.empty());

  // Compile the serialized QDQ file as a user would, with the ONNX checker on.
  std::string qdq_bytes;
  ASSERT_TRUE(result->model.SerializeToString(&qdq_bytes));
  auto compiled = CompileOnnxBytes(qdq_bytes);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto loaded = (*engine)->Load("e2e/" + GetParam(), std::move(*compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  for (size_t s = 0; s < sets->size(); ++s) {
    auto want = ReadTensorFile(dir + "/test_data_set_" + std::to_string(s) + "/output_0.pb");
    ASSERT_TRUE(want.ok()) << want.status();
    auto got = (*loaded)->Run((*sets)[s]);
    ASSERT_TRUE(got.ok()) << got.status();
    const HostTensor& w = want->tensor;
    const HostTensor& q = (*got)[0];
    ASSERT_EQ(q.shape(), w.shape());
    size_t n = static_cast<size_t>(w.num_elements());
    OutputError e;
    e.Add({w.data_as<float>(), n}, {q.data_as<float>(), n}, w.shape().back());
    EXPECT_GE(e.cosine(), 0.99) << "data set " << s;
    EXPECT_EQ(e.top1_matches(), e.rows()) << "data set " << s;
    EXPECT_EQ(e.rows(), w.shape()[0]);
    std::printf("%s set %zu: batch %lld cosine %.6f max_abs %.4g top1 %lld/%lld\n",
                GetParam().c_str(), s, static_cast<long long>(w.shape()[0]), e.cosine(),
                e.max_abs_error(), static_cast<long long>(e.top1_matches()),
                static_cast<long long>(e.rows()));
  }
}

// One QDQ Conv block as cuvil-quantize writes it: x -> QuantizeLinear -> DequantizeLinear ->
// Conv(DequantizeLinear(int8 per-channel W), DequantizeLinear(int32 bias)) [-> Add x] ->
// Relu/Clip [-> QuantizeLinear -> DequantizeLinear] -> y. Inputs [N, 8, 9, 9]; 16 output
// channels with the residual variant using 8, the depthwise one 8 groups of one.
struct BlockSpec {
  bool x_signed = false;
  bool clip = false;         // Clip(0, 6) instead of Relu
  bool residual = false;     // Add x before the activation (float output)
  bool quantize_out = true;  // QuantizeLinear -> DequantizeLinear after the activation
  int64_t kernel = 3;
  bool depthwise = false;  // group = channels = 8
  bool pool = false;       // GlobalAveragePool after the activation (float output): y [N, M, 1, 1]
};

onnx::TensorProto Initializer(const std::string& name, int type, std::vector<int64_t> dims) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(type);
  for (int64_t d : dims) t.add_dims(d);
  return t;
}

// `v` is a [batch, dims...] tensor of ONNX element type `elem_type`.
void BatchedInfo(onnx::ValueInfoProto* v, const std::string& name, int elem_type,
                 const std::vector<int64_t>& dims) {
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(elem_type);
  t->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

// `v` is a [batch, c, 9, 9] tensor of ONNX element type `elem_type`.
void ImageInfo(onnx::ValueInfoProto* v, const std::string& name, int elem_type, int64_t c) {
  BatchedInfo(v, name, elem_type, {c, 9, 9});
}

// An opset-13 model whose graph is called `name`; the graph is model->mutable_graph().
onnx::ModelProto NewModel(const std::string& name) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  model.mutable_graph()->set_name(name);
  return model;
}

using testing::AddIntAttr;
using testing::AddIntsAttr;
using testing::AddNode;

std::string QdqBlock(const BlockSpec& b, float* y_scale) {
  constexpr int64_t kC = 8;
  const int64_t m = b.residual || b.depthwise ? kC : 16;
  const int64_t cg = b.depthwise ? 1 : kC;  // Input channels per group.
  onnx::ModelProto model = NewModel("qdq_block");
  onnx::GraphProto* g = model.mutable_graph();
  ImageInfo(g->add_input(), "x", onnx::TensorProto::FLOAT, kC);
  if (b.pool) {
    BatchedInfo(g->add_output(), "y", onnx::TensorProto::FLOAT, {m, 1, 1});
  } else {
    ImageInfo(g->add_output(), "y", onnx::TensorProto::FLOAT, m);
  }
  const int qtype = b.x_signed ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8;
  const float sx = 4.0f / 255, sy = 6.0f / 255;
  *y_scale = sy;
  auto scalar = [&](const std::string& name, float v) {
    auto t = Initializer(name, onnx::TensorProto::FLOAT, {});
    t.add_float_data(v);
    *g->add_initializer() = t;
  };
  auto zero = [&](const std::string& name, int type, int32_t v) {
    auto t = Initializer(name, type, {});
    t.add_int32_data(v);
    *g->add_initializer() = t;
  };
  scalar("sx", sx);
  zero("zx", qtype, b.x_signed ? -5 : 120);
  scalar("sy", sy);
  zero("zy", qtype, b.x_signed ? -128 : 0);
  std::mt19937 rng(7);
  const int64_t k = cg * b.kernel * b.kernel;
  auto w = Initializer("wq", onnx::TensorProto::INT8, {m, cg, b.kernel, b.kernel});
  auto ws = Initializer("ws", onnx::TensorProto::FLOAT, {m});
  auto wz = Initializer("wz", onnx::TensorProto::INT8, {m});
  auto bq = Initializer("bq", onnx::TensorProto::INT32, {m});
  auto bs = Initializer("bs", onnx::TensorProto::FLOAT, {m});
  std::uniform_int_distribution<int> wd(-127, 127), bd(-2000, 2000);
  for (int64_t i = 0; i < m * k; ++i) w.add_int32_data(wd(rng));
  for (int64_t o = 0; o < m; ++o) {
    const float s = (0.5f + 0.05f * static_cast<float>(o)) / 127 / static_cast<float>(k) * 4;
    ws.add_float_data(s);
    wz.add_int32_data(0);
    bq.add_int32_data(bd(rng));
    bs.add_float_data(sx * s);
  }
  for (auto* t : {&w, &ws, &wz, &bq, &bs}) *g->add_initializer() = *t;
  auto node = [g](const std::string& op, const std::vector<std::string>& in,
                  const std::string& out) { return AddNode(g, op, in, out); };
  node("QuantizeLinear", {"x", "sx", "zx"}, "xq");
  node("DequantizeLinear", {"xq", "sx", "zx"}, "xd");
  for (auto [in, out] : {std::pair<std::vector<std::string>, std::string>{{"wq", "ws", "wz"}, "wd"},
                         {{"bq", "bs"}, "bd"}}) {
    AddIntAttr(node("DequantizeLinear", in, out), "axis", 0);
  }
  onnx::NodeProto* conv = node("Conv", {"xd", "wd", "bd"}, "conv");
  AddIntsAttr(conv, "pads", std::vector<int64_t>(4, b.kernel / 2));
  if (b.depthwise) AddIntAttr(conv, "group", kC);
  std::string cur = "conv";
  if (b.residual) cur = node("Add", {cur, "x"}, "sum")->output(0);
  if (b.clip) {
    scalar("lo", 0.0f);
    scalar("hi", 6.0f);
    cur = node("Clip", {cur, "lo", "hi"}, "act")->output(0);
  } else {
    cur = node("Relu", {cur}, "act")->output(0);
  }
  if (b.quantize_out) {
    node("QuantizeLinear", {cur, "sy", "zy"}, "yq");
    cur = node("DequantizeLinear", {"yq", "sy", "zy"}, "yd")->output(0);
  }
  if (b.pool) cur = node("GlobalAveragePool", {cur}, "pooled")->output(0);
  node("Identity", {cur}, "y");
  std::string bytes;
  EXPECT_TRUE(model.SerializeToString(&bytes));
  return bytes;
}

// Compiles `bytes` with or without the integer QDQ path; returns whether the code calls
// `callee` (the integer convolution) and the output for `x`.
std::pair<bool, HostTensor> RunBlock(JitEngine& engine, const std::string& bytes, bool integer,
                                     const HostTensor& x, const std::string& name,
                                     const std::string& callee = "cuvil_uk_qconv2d",
                                     bool qdq_graph = true) {
  CompileOptions options;
  options.integer_qdq = integer;
  options.emit_llvm_path = ::testing::TempDir() + "/" + name + ".ll";
  auto compiled = CompileOnnxBytes(bytes, options);
  EXPECT_TRUE(compiled.ok()) << compiled.status();
  if (!compiled.ok()) return {false, HostTensor()};
  std::ifstream ll(options.emit_llvm_path);
  std::stringstream ir;
  ir << ll.rdbuf();
  const bool calls = ir.str().find("call void @" + callee) != std::string::npos;
  // In a QDQ graph the operators' listing says int8 exactly when the integer kernel runs.
  if (qdq_graph && callee == "cuvil_uk_qconv2d") {
    EXPECT_EQ((" " + PrecisionSummary(compiled->kernels)).find(" int8:") != std::string::npos,
              calls)
        << PrecisionSummary(compiled->kernels);
  }
  auto loaded = engine.Load("qdq/" + name, std::move(*compiled));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return {calls, HostTensor()};
  auto out = (*loaded)->Run({x});
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return {calls, HostTensor()};
  return {calls, (*out)[0]};
}

TEST(QdqFusionTest, IntegerConvMatchesTheFloatQdqGraphWithinOneStep) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  HostTensor x(DType::kFloat32, {3, 8, 9, 9});
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> xd(-0.2f, 3.8f);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = xd(rng);
  int variant = 0;
  for (bool x_signed : {false, true}) {
    for (bool clip : {false, true}) {
      for (int64_t kernel : {int64_t{1}, int64_t{3}}) {
        for (int out : {0, 1, 2}) {  // quantized output, float output, float with residual
          BlockSpec b{x_signed, clip, out == 2, out == 0, kernel};
          SCOPED_TRACE(::testing::Message() << "signed " << x_signed << " clip " << clip
                                            << " kernel " << kernel << " out " << out);
          float sy = 0;
          const std::string bytes = QdqBlock(b, &sy);
          const std::string name = "v" + std::to_string(variant++);
          auto [fused, yi] = RunBlock(**engine, bytes, true, x, name + "i");
          auto [unfused, yf] = RunBlock(**engine, bytes, false, x, name + "f");
          EXPECT_TRUE(fused);
          EXPECT_FALSE(unfused);
          ASSERT_EQ(yi.shape(), yf.shape());
          double max_diff = 0, max_abs = 0;
          int64_t exact = 0;
          for (int64_t i = 0; i < yi.num_elements(); ++i) {
            const double d = std::fabs(yi.data_as<float>()[i] - yf.data_as<float>()[i]);
            max_diff = std::max(max_diff, d);
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(yf.data_as<float>()[i])));
            exact += d == 0;
          }
          if (b.quantize_out) {
            // At most one quantisation step, and almost every element the same.
            EXPECT_LE(max_diff, sy * 1.001);
            EXPECT_GE(exact, yi.num_elements() * 95 / 100);
          } else {
            EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_abs));
          }
          EXPECT_GT(max_abs, 0.5);  // the block computes something
        }
      }
    }
  }
}

// A float result read only by a GlobalAveragePool: the integer convolution averages it itself
// (CUVIL_UK_QOUT_FLOAT_MEAN), so the float map is never stored, and the pooled values agree with
// the float QDQ graph's to float rounding. With a QuantizeLinear before the pool, or a residual,
// the pool stays a node of its own.
TEST(QdqFusionTest, GlobalAveragePoolAfterAFloatConvIsFusedIn) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  HostTensor x(DType::kFloat32, {3, 8, 9, 9});
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> xd(-0.2f, 3.8f);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = xd(rng);
  int variant = 0;
  for (bool quantize_out : {false, true}) {
    for (int64_t kernel : {int64_t{1}, int64_t{3}}) {
      for (bool clip : {false, true}) {
        BlockSpec b{false, clip, false, quantize_out, kernel};
        b.pool = true;
        SCOPED_TRACE(::testing::Message() << "quantize_out " << quantize_out << " kernel " << kernel
                                          << " clip " << clip);
        float sy = 0;
        const std::string bytes = QdqBlock(b, &sy);
        const std::string name = "pool" + std::to_string(variant++);
        auto [fused, yi] = RunBlock(**engine, bytes, true, x, name + "i");
        auto [unfused, yf] = RunBlock(**engine, bytes, false, x, name + "f");
        EXPECT_TRUE(fused);
        ASSERT_EQ(yi.shape(), (std::vector<int64_t>{3, 16, 1, 1}));
        ASSERT_EQ(yi.shape(), yf.shape());
        std::ifstream ll(::testing::TempDir() + "/" + name + "i.ll");
        std::stringstream ir;
        ir << ll.rdbuf();
        // A separate pool kernel is emitted exactly when the convolution's output is 8-bit.
        EXPECT_EQ(ir.str().find("GlobalAveragePool") != std::string::npos, quantize_out);
        double max_diff = 0, max_abs = 0;
        for (int64_t i = 0; i < yi.num_elements(); ++i) {
          max_diff = std::max(max_diff, static_cast<double>(std::fabs(yi.data_as<float>()[i] -
                                                                      yf.data_as<float>()[i])));
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(yf.data_as<float>()[i])));
        }
        EXPECT_LE(max_diff, quantize_out ? sy * 1.001 : 1e-4 * std::max(1.0, max_abs));
        EXPECT_GT(max_abs, 0.1);
      }
    }
  }
}

// A QDQ fully connected layer: x [batch, 67] -> QuantizeLinear -> DequantizeLinear -> MatMul with
// DequantizeLinear(int8 [67, 40]) then Add(bias), or Gemm (transB: weights [40, 67]) with C ->
// Relu [-> QuantizeLinear -> DequantizeLinear] -> y [batch, 40]; weight scales per column or per
// tensor.
std::string QdqFullyConnected(bool gemm, bool x_signed, bool per_column, bool quantize_out,
                              float* y_scale, int64_t kN = 40, bool scalar_bias = false) {
  constexpr int64_t kK = 67;
  onnx::ModelProto model = NewModel("qdq_fc");
  onnx::GraphProto* g = model.mutable_graph();
  BatchedInfo(g->add_input(), "x", onnx::TensorProto::FLOAT, {kK});
  BatchedInfo(g->add_output(), "y", onnx::TensorProto::FLOAT, {kN});
  const int qtype = x_signed ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8;
  const float sx = 4.0f / 255, sy = 3.0f / 255;
  *y_scale = sy;
  auto add = [&](onnx::TensorProto t) { *g->add_initializer() = std::move(t); };
  auto scalar_f = Initializer("sx", onnx::TensorProto::FLOAT, {});
  scalar_f.add_float_data(sx);
  add(scalar_f);
  auto sy_t = Initializer("sy", onnx::TensorProto::FLOAT, {});
  sy_t.add_float_data(sy);
  add(sy_t);
  auto zx = Initializer("zx", qtype, {});
  zx.add_int32_data(x_signed ? -9 : 117);
  add(zx);
  auto zy = Initializer("zy", qtype, {});
  zy.add_int32_data(x_signed ? -128 : 0);
  add(zy);
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> wd(-127, 127);
  std::uniform_real_distribution<float> bd(-0.5f, 0.5f);
  auto w = Initializer("wq", onnx::TensorProto::INT8,
                       gemm ? std::vector<int64_t>{kN, kK} : std::vector<int64_t>{kK, kN});
  for (int64_t i = 0; i < kK * kN; ++i) w.add_int32_data(wd(rng));
  add(w);
  auto ws = Initializer("ws", onnx::TensorProto::FLOAT,
                        per_column ? std::vector<int64_t>{kN} : std::vector<int64_t>{});
  for (int64_t j = 0; j < (per_column ? kN : 1); ++j) {
    ws.add_float_data((0.6f + 0.03f * static_cast<float>(j)) / 127 / kK * 4);
  }
  add(ws);
  auto bias = Initializer("b", onnx::TensorProto::FLOAT,
                          scalar_bias ? std::vector<int64_t>{} : std::vector<int64_t>{kN});
  for (int64_t j = 0; j < (scalar_bias ? 1 : kN); ++j) bias.add_float_data(bd(rng));
  add(bias);
  auto node = [g](const std::string& op, const std::vector<std::string>& in,
                  const std::string& out) { return AddNode(g, op, in, out); };
  node("QuantizeLinear", {"x", "sx", "zx"}, "xq");
  node("DequantizeLinear", {"xq", "sx", "zx"}, "xd");
  onnx::NodeProto* wdq = node("DequantizeLinear", {"wq", "ws"}, "wd");
  if (per_column) AddIntAttr(wdq, "axis", gemm ? 0 : 1);
  std::string cur;
  if (gemm) {
    AddIntAttr(node("Gemm", {"xd", "wd", "b"}, "fc"), "transB", 1);
    cur = "fc";
  } else {
    node("MatMul", {"xd", "wd"}, "mm");
    cur = node("Add", {"mm", "b"}, "fc")->output(0);
  }
  cur = node("Relu", {cur}, "act")->output(0);
  if (quantize_out) {
    node("QuantizeLinear", {cur, "sy", "zy"}, "yq");
    cur = node("DequantizeLinear", {"yq", "sy", "zy"}, "yd")->output(0);
  }
  node("Identity", {cur}, "y");
  std::string bytes;
  EXPECT_TRUE(model.SerializeToString(&bytes));
  return bytes;
}

// The QDQ MatMul and Gemm run on the integer matrix product (cuvil_uk_qmatmul) and agree with the
// float QDQ graph as the integer convolution does: within one step, most elements equal.
TEST(QdqFusionTest, MatMulAndGemmRunOnTheIntegerKernel) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  int variant = 0;
  for (int64_t batch : {int64_t{1}, int64_t{13}}) {
    HostTensor x(DType::kFloat32, {batch, 67});
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> xd(-0.3f, 3.7f);
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = xd(rng);
    for (bool gemm : {false, true}) {
      for (bool x_signed : {false, true}) {
        for (bool per_column : {false, true}) {
          for (bool quantize_out : {true, false}) {
            SCOPED_TRACE(::testing::Message()
                         << "batch " << batch << " gemm " << gemm << " signed " << x_signed
                         << " per_column " << per_column << " quantized out " << quantize_out);
            float sy = 0;
            const std::string bytes =
                QdqFullyConnected(gemm, x_signed, per_column, quantize_out, &sy);
            const std::string name = "fc" + std::to_string(variant++);
            auto [fused, yi] =
                RunBlock(**engine, bytes, true, x, name + "i", "cuvil_uk_qmatmul", false);
            auto [unfused, yf] =
                RunBlock(**engine, bytes, false, x, name + "f", "cuvil_uk_qmatmul", false);
            EXPECT_TRUE(fused);
            EXPECT_FALSE(unfused);
            ASSERT_EQ(yi.shape(), yf.shape());
            ASSERT_EQ(yi.shape(), (std::vector<int64_t>{batch, 40}));
            double max_diff = 0, max_abs = 0;
            int64_t exact = 0;
            for (int64_t i = 0; i < yi.num_elements(); ++i) {
              const double d = std::fabs(yi.data_as<float>()[i] - yf.data_as<float>()[i]);
              max_diff = std::max(max_diff, d);
              max_abs = std::max(max_abs, std::fabs(static_cast<double>(yf.data_as<float>()[i])));
              exact += d == 0;
            }
            if (quantize_out) {
              EXPECT_LE(max_diff, sy * 1.001);
              EXPECT_GE(exact, yi.num_elements() * 90 / 100);
            } else {
              EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_abs));
            }
            EXPECT_GT(max_abs, 0.5);
          }
        }
      }
    }
  }
}

// DequantizeLinear -> depthwise Conv -> Clip/Relu -> QuantizeLinear reads and writes 8-bit tensors
// in one kernel (cuvil_uk_qdepthwise2d) and gives exactly the float QDQ graph's values.
TEST(QdqFusionTest, DepthwiseBetweenEightBitTensorsIsExact) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  HostTensor x(DType::kFloat32, {2, 8, 9, 9});
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> xd(-0.2f, 3.8f);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = xd(rng);
  int variant = 0;
  for (bool x_signed : {false, true}) {
    for (bool clip : {false, true}) {
      for (bool quantize_out : {true, false}) {
        BlockSpec b{x_signed, clip, false, quantize_out, 3, /*depthwise=*/true};
        SCOPED_TRACE(::testing::Message() << "signed " << x_signed << " clip " << clip
                                          << " quantized out " << quantize_out);
        float sy = 0;
        const std::string bytes = QdqBlock(b, &sy);
        const std::string name = "dw" + std::to_string(variant++);
        auto [fused, yi] = RunBlock(**engine, bytes, true, x, name + "i", "cuvil_uk_qdepthwise2d");
        auto [unfused, yf] =
            RunBlock(**engine, bytes, false, x, name + "f", "cuvil_uk_qdepthwise2d");
        // Without a QuantizeLinear after it the depthwise Conv stays float.
        EXPECT_EQ(fused, quantize_out);
        EXPECT_FALSE(unfused);
        ASSERT_EQ(yi.shape(), yf.shape());
        double max_abs = 0;
        for (int64_t i = 0; i < yi.num_elements(); ++i) {
          ASSERT_EQ(yi.data_as<float>()[i], yf.data_as<float>()[i]) << "element " << i;
          max_abs = std::max(max_abs, std::fabs(static_cast<double>(yf.data_as<float>()[i])));
        }
        EXPECT_GT(max_abs, 0.5);  // the block computes something
      }
    }
  }
}

// uint8 outputs of the integer kernel (`yi`) and a reference kernel (`yr`): every element within
// one step, at least 95% equal, and not mostly saturated (the test computes something).
void ExpectWithinOneStep(const HostTensor& yi, const HostTensor& yr) {
  ASSERT_EQ(yi.dtype(), DType::kUInt8);
  ASSERT_EQ(yi.shape(), yr.shape());
  int64_t exact = 0, saturated = 0;
  for (int64_t i = 0; i < yi.num_elements(); ++i) {
    const int d = yi.data_as<uint8_t>()[i] - yr.data_as<uint8_t>()[i];
    ASSERT_LE(std::abs(d), 1) << "element " << i;
    exact += d == 0;
    saturated += yr.data_as<uint8_t>()[i] == 0 || yr.data_as<uint8_t>()[i] == 255;
  }
  EXPECT_GE(exact, yi.num_elements() * 95 / 100);
  EXPECT_LT(saturated, yi.num_elements() / 2);
}

// How a test model's 8-bit weights are stored: int8 with zero points 0; uint8 with non-zero
// per-channel zero points, every weight within int8 range of its zero point (the integer kernels
// take them centred); or uint8 around zero point 60 with a few at 255 (they cannot).
enum class WeightForm { kInt8, kUInt8Centred, kUInt8Wide };

// Fills `w` (count values, output channel of value i: (i / inner) % channels) and the zero points
// `wz` (one per channel, or one for kUInt8Wide) in `form`.
void FillWeights(WeightForm form, int64_t count, int64_t inner, int64_t channels, std::mt19937& rng,
                 onnx::TensorProto* w, onnx::TensorProto* wz) {
  std::uniform_int_distribution<int> d8(-128, 127), d100(-100, 100), d50(-50, 50);
  const int type = form == WeightForm::kInt8 ? onnx::TensorProto::INT8 : onnx::TensorProto::UINT8;
  w->set_data_type(type);
  wz->set_data_type(type);
  wz->clear_dims();
  wz->clear_int32_data();
  if (form == WeightForm::kUInt8Wide) {
    wz->add_int32_data(60);
  } else {
    wz->add_dims(channels);
    for (int64_t c = 0; c < channels; ++c) {
      wz->add_int32_data(form == WeightForm::kInt8 ? 0 : static_cast<int>(110 + (c * 7) % 40));
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    const int64_t c = (i / inner) % channels;
    switch (form) {
      case WeightForm::kInt8:
        w->add_int32_data(d8(rng));
        break;
      case WeightForm::kUInt8Centred:
        w->add_int32_data(wz->int32_data(static_cast<int>(c)) + d100(rng));
        break;
      case WeightForm::kUInt8Wide:
        w->add_int32_data(i % 50 == 7 ? 255 : 60 + d50(rng));
        break;
    }
  }
}

const char* FormName(WeightForm form) {
  return form == WeightForm::kInt8 ? "int8" : form == WeightForm::kUInt8Centred ? "uint8" : "wide";
}

// The QLinear test models' uint8 activation parameters: xs 0.02, xz 100, ys 0.05, yz 128.
void AddQLinearScalars(onnx::GraphProto* g) {
  const std::pair<const char*, float> scales[] = {{"xs", 0.02f}, {"ys", 0.05f}};
  const std::pair<const char*, int> zeros[] = {{"xz", 100}, {"yz", 128}};
  for (const auto& [name, v] : scales) {
    auto t = Initializer(name, onnx::TensorProto::FLOAT, {});
    t.add_float_data(v);
    *g->add_initializer() = t;
  }
  for (const auto& [name, v] : zeros) {
    auto t = Initializer(name, onnx::TensorProto::UINT8, {});
    t.add_int32_data(v);
    *g->add_initializer() = t;
  }
}

// Runs the QLinear model `make(form)` for every weight form with and without the integer kernels
// (`callee`): within one step of the reference kernel, and on the integer kernel unless the
// weights cannot be centred.
void ExpectQLinearOnTheIntegerKernel(JitEngine& engine, const HostTensor& x,
                                     std::string (*make)(WeightForm), const std::string& prefix,
                                     const std::string& callee) {
  for (WeightForm form : {WeightForm::kInt8, WeightForm::kUInt8Centred, WeightForm::kUInt8Wide}) {
    SCOPED_TRACE(FormName(form));
    const std::string bytes = make(form);
    const std::string name = prefix + FormName(form);
    auto [fused, yi] = RunBlock(engine, bytes, true, x, name + "_i", callee, false);
    auto [unfused, yr] = RunBlock(engine, bytes, false, x, name + "_r", callee, false);
    EXPECT_EQ(fused, form != WeightForm::kUInt8Wide);
    EXPECT_FALSE(unfused);
    ExpectWithinOneStep(yi, yr);
  }
}

// QLinearConv(uint8 x [N, 8, 9, 9], 8-bit per-channel weights [16, 8, 3, 3] in `form`, int32
// bias) with constant parameters, y uint8.
std::string QLinearConvModel(WeightForm form) {
  onnx::ModelProto model = NewModel("qlinearconv");
  onnx::GraphProto* g = model.mutable_graph();
  ImageInfo(g->add_input(), "x", onnx::TensorProto::UINT8, 8);
  ImageInfo(g->add_output(), "y", onnx::TensorProto::UINT8, 16);
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> bd(-3000, 3000);
  auto w = Initializer("w", onnx::TensorProto::INT8, {16, 8, 3, 3});
  auto wz = Initializer("wz", onnx::TensorProto::INT8, {16});
  FillWeights(form, 16 * 72, 72, 16, rng, &w, &wz);
  auto ws = Initializer("ws", onnx::TensorProto::FLOAT, {16});
  auto bias = Initializer("b", onnx::TensorProto::INT32, {16});
  for (int o = 0; o < 16; ++o) {
    ws.add_float_data(0.002f + 0.0001f * static_cast<float>(o));
    bias.add_int32_data(bd(rng));
  }
  for (auto* t : {&w, &ws, &wz, &bias}) *g->add_initializer() = *t;
  AddQLinearScalars(g);
  AddIntsAttr(AddNode(g, "QLinearConv", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, "y"),
              "pads", {1, 1, 1, 1});
  return model.SerializeAsString();
}

// A Gemm with one output column and a scalar C (broadcast, not an [N] bias) is left to the float
// path instead of being read as a bias (its shape has no last dim), and computes what the float
// QDQ graph does.
TEST(QdqFusionTest, GemmWithAScalarCStaysFloat) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  HostTensor x(DType::kFloat32, {3, 67});
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = 0.05f * (i % 41);
  float sy = 0;
  const std::string bytes = QdqFullyConnected(true, false, false, false, &sy, 1, true);
  auto [fused, yi] = RunBlock(**engine, bytes, true, x, "scalar_c_i", "cuvil_uk_qmatmul", false);
  auto [unfused, yf] = RunBlock(**engine, bytes, false, x, "scalar_c_f", "cuvil_uk_qmatmul", false);
  EXPECT_FALSE(fused);
  ASSERT_EQ(yi.shape(), (std::vector<int64_t>{3, 1}));
  // (The weight's DequantizeLinear folds at a different step on the two paths: the last bits may
  // differ.)
  for (int64_t i = 0; i < 3; ++i) EXPECT_NEAR(yi.data_as<float>()[i], yf.data_as<float>()[i], 1e-5);
}

// A QLinearConv with constant parameters runs on the integer convolution kernel, within one
// quantisation step of its reference kernel and equal on almost every element: int8 weights, and
// uint8 weights within int8 range of their per-channel zero points; uint8 weights that are not
// stay on the reference kernel.
TEST(QdqFusionTest, QLinearConvRunsOnTheIntegerKernel) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  HostTensor x(DType::kUInt8, {2, 8, 9, 9});
  std::mt19937 rng(17);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<uint8_t>()[i] = rng() & 0xff;
  // (Its reference kernel is an int8 one too, so the precision listing cannot tell them apart.)
  ExpectQLinearOnTheIntegerKernel(**engine, x, QLinearConvModel, "qlinear_", "cuvil_uk_qconv2d");
}

// QLinearMatMul(uint8 x [N, 67], 8-bit [67, 40] weights in `form` with per-column scales) with
// constant parameters, y uint8.
std::string QLinearMatMulModel(WeightForm form) {
  onnx::ModelProto model = NewModel("qlinearmatmul");
  onnx::GraphProto* g = model.mutable_graph();
  BatchedInfo(g->add_input(), "x", onnx::TensorProto::UINT8, {67});
  BatchedInfo(g->add_output(), "y", onnx::TensorProto::UINT8, {40});
  std::mt19937 rng(9);
  auto w = Initializer("w", onnx::TensorProto::INT8, {67, 40});
  auto wz = Initializer("wz", onnx::TensorProto::INT8, {40});
  FillWeights(form, 67 * 40, 1, 40, rng, &w, &wz);
  auto ws = Initializer("ws", onnx::TensorProto::FLOAT, {40});
  for (int o = 0; o < 40; ++o) ws.add_float_data(0.003f + 0.0001f * static_cast<float>(o));
  for (auto* t : {&w, &ws, &wz}) *g->add_initializer() = *t;
  AddQLinearScalars(g);
  AddNode(g, "QLinearMatMul", {"x", "xs", "xz", "w", "ws", "wz", "ys", "yz"}, "y");
  return model.SerializeAsString();
}

// A QLinearMatMul with constant weights and parameters runs on the integer matrix product, within
// one quantisation step of its reference kernel (weight forms as for QLinearConv).
TEST(QdqFusionTest, QLinearMatMulRunsOnTheIntegerKernel) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  HostTensor x(DType::kUInt8, {5, 67});
  std::mt19937 rng(19);
  for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<uint8_t>()[i] = rng() & 0xff;
  ExpectQLinearOnTheIntegerKernel(**engine, x, QLinearMatMulModel, "qlmm_", "cuvil_uk_qmatmul");
}

// One integer product with constant 8-bit weights in `form`: MatMulInteger(int8 A [batch, 37],
// W [37, 21], a_zero_point -5) or ConvInteger(uint8 x [batch, 5, 7, 7], W [6, 5, 3, 3],
// x_zero_point 131, pads 1); int32 output.
std::string IntegerProductModel(bool conv, WeightForm form) {
  onnx::ModelProto model = NewModel(conv ? "convinteger" : "matmulinteger");
  onnx::GraphProto* g = model.mutable_graph();
  const int xtype = conv ? onnx::TensorProto::UINT8 : onnx::TensorProto::INT8;
  BatchedInfo(g->add_input(), "x", xtype,
              conv ? std::vector<int64_t>{5, 7, 7} : std::vector<int64_t>{37});
  BatchedInfo(g->add_output(), "y", onnx::TensorProto::INT32,
              conv ? std::vector<int64_t>{6, 7, 7} : std::vector<int64_t>{21});
  std::mt19937 rng(23);
  const std::vector<int64_t> wdims =
      conv ? std::vector<int64_t>{6, 5, 3, 3} : std::vector<int64_t>{37, 21};
  auto w = Initializer("w", onnx::TensorProto::INT8, wdims);
  auto wz = Initializer("wz", onnx::TensorProto::INT8, {});
  if (conv) {
    FillWeights(form, 6 * 45, 45, 6, rng, &w, &wz);
  } else {
    FillWeights(form, 37 * 21, 1, 21, rng, &w, &wz);
  }
  auto xz = Initializer("xz", xtype, {});
  xz.add_int32_data(conv ? 131 : -5);
  for (auto* t : {&w, &xz, &wz}) *g->add_initializer() = *t;
  onnx::NodeProto* n =
      AddNode(g, conv ? "ConvInteger" : "MatMulInteger", {"x", "w", "xz", "wz"}, "y");
  if (conv) AddIntsAttr(n, "pads", {1, 1, 1, 1});
  return model.SerializeAsString();
}

// MatMulInteger and ConvInteger with constant weights run on the integer matrix product and
// convolution, and give exactly their reference kernels' int32 sums: int8 weights, and uint8
// weights within int8 range of their per-channel zero points; wider uint8 weights stay on the
// reference kernels.
TEST(QdqFusionTest, IntegerProductsRunOnTheIntegerKernelsExactly) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  for (bool conv : {false, true}) {
    SCOPED_TRACE(conv ? "ConvInteger" : "MatMulInteger");
    HostTensor x(conv ? DType::kUInt8 : DType::kInt8,
                 conv ? std::vector<int64_t>{3, 5, 7, 7} : std::vector<int64_t>{9, 37});
    std::mt19937 rng(29);
    for (int64_t i = 0; i < x.num_elements(); ++i) {
      // Both ends of the type too.
      x.data_as<uint8_t>()[i] = i % 17 == 0 ? 0 : i % 19 == 0 ? 255 : static_cast<uint8_t>(rng());
    }
    for (WeightForm form : {WeightForm::kInt8, WeightForm::kUInt8Centred, WeightForm::kUInt8Wide}) {
      SCOPED_TRACE(FormName(form));
      const std::string bytes = IntegerProductModel(conv, form);
      const std::string callee = conv ? "cuvil_uk_qconv2d" : "cuvil_uk_qmatmul";
      const std::string name = std::string(conv ? "convint_" : "matmulint_") + FormName(form);
      auto [fused, yi] = RunBlock(**engine, bytes, true, x, name + "_i", callee, false);
      auto [unfused, yr] = RunBlock(**engine, bytes, false, x, name + "_r", callee, false);
      EXPECT_EQ(fused, form != WeightForm::kUInt8Wide);
      EXPECT_FALSE(unfused);
      ASSERT_EQ(yi.dtype(), DType::kInt32);
      ASSERT_EQ(yi.shape(), yr.shape());
      int64_t nonzero = 0;
      for (int64_t i = 0; i < yi.num_elements(); ++i) {
        ASSERT_EQ(yi.data_as<int32_t>()[i], yr.data_as<int32_t>()[i]) << "element " << i;
        nonzero += yr.data_as<int32_t>()[i] != 0;
      }
      EXPECT_GT(nonzero, yi.num_elements() / 2);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Zoo, QuantizeE2eTest, ::testing::Values("resnet18", "mobilenet_v2"));

}  // namespace
}  // namespace cuvil::quantize
