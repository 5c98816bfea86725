// Importing models whose weights live in external data files next to the model.
#include <filesystem>
#include <fstream>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_models.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

// Writes BinaryWithConstant("Add", 4, ...) with its constant moved to `location` at `offset`.
std::string WriteExternalModel(const std::string& dir, const std::string& location, int64_t offset) {
  fs::create_directories(dir);
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", 4, 0.0f));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  c->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* k, const std::string& v) {
    auto* e = c->add_external_data();
    e->set_key(k);
    e->set_value(v);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  add("length", "16");
  std::string path = dir + "/model.onnx";
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();
  return path;
}

TEST(OnnxImportTest, ExternalDataIsReadFromTheModelDirectory) {
  std::string dir = ::testing::TempDir() + "/external_ok";
  std::string path = WriteExternalModel(dir, "weights.bin", 8);
  float weights[4] = {1, 2, 3, 4};
  std::ofstream out(dir + "/weights.bin", std::ios::binary);
  out.write("padding!", 8);
  out.write(reinterpret_cast<const char*>(weights), sizeof(weights));
  out.close();
  auto compiled = CompileOnnxFile(path);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("ext/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok());
  HostTensor x(DType::kFloat32, {2, 4});
  auto y = (*loaded)->Run({x});
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_THAT(std::vector<float>((*y)[0].data_as<float>(), (*y)[0].data_as<float>() + 8),
              ::testing::ElementsAre(1, 2, 3, 4, 1, 2, 3, 4));
}

TEST(OnnxImportTest, ExternalDataOutsideTheModelDirectoryIsRefused) {
  std::string dir = ::testing::TempDir() + "/external_escape";
  auto compiled = CompileOnnxFile(WriteExternalModel(dir, "../secret.bin", 0));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("secret.bin"));
}

TEST(OnnxImportTest, MissingOrShortExternalDataIsAnError) {
  std::string dir = ::testing::TempDir() + "/external_short";
  std::string path = WriteExternalModel(dir, "weights.bin", 0);
  EXPECT_FALSE(CompileOnnxFile(path).ok());  // File missing.
  std::ofstream(dir + "/weights.bin", std::ios::binary) << "short";
  auto compiled = CompileOnnxFile(path);
  ASSERT_FALSE(compiled.ok());
}

}  // namespace
}  // namespace cuvil
