// cuvil-quantize end to end on the model zoo: ResNet-18 and MobileNet-V2 quantized (per-channel
// int8 weights, uint8 activations, min/max calibration on their test data sets), compiled by
// Cuvil from the serialized QDQ file and compared with PyTorch's float reference outputs.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "calibration_data.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/tensor_file.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "output_error.h"
#include "quantizer.h"

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

INSTANTIATE_TEST_SUITE_P(Zoo, QuantizeE2eTest, ::testing::Values("resnet18", "mobilenet_v2"));

}  // namespace
}  // namespace cuvil::quantize
