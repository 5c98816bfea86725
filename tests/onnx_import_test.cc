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

// Writes BinaryWithConstant("Add", 4, ...) with its constant moved to `location` at `offset`
// (external_data values are strings in the format, so tests can store anything there).
std::string WriteExternalModel(const std::string& dir, const std::string& location,
                               const std::string& offset, const std::string& length = "16") {
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
  add("offset", offset);
  add("length", length);
  std::string path = dir + "/model.onnx";
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();
  return path;
}

TEST(OnnxImportTest, ExternalDataIsReadFromTheModelDirectory) {
  std::string dir = ::testing::TempDir() + "/external_ok";
  std::string path = WriteExternalModel(dir, "weights.bin", "8");
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
  auto compiled = CompileOnnxFile(WriteExternalModel(dir, "../secret.bin", "0"));
  ASSERT_FALSE(compiled.ok());
  EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("secret.bin"));
}

TEST(OnnxImportTest, MissingOrShortExternalDataIsAnError) {
  std::string dir = ::testing::TempDir() + "/external_short";
  std::string path = WriteExternalModel(dir, "weights.bin", "0");
  EXPECT_FALSE(CompileOnnxFile(path).ok());  // File missing.
  std::ofstream(dir + "/weights.bin", std::ios::binary) << "short";
  auto compiled = CompileOnnxFile(path);
  ASSERT_FALSE(compiled.ok());
}

// std::stoll used to throw on these and terminate the loader thread.
TEST(OnnxImportTest, MalformedExternalDataOffsetOrLengthIsInvalidArgument) {
  std::string dir = ::testing::TempDir() + "/external_malformed";
  fs::create_directories(dir);
  std::ofstream(dir + "/weights.bin", std::ios::binary) << std::string(64, '\0');
  struct Case {
    std::string offset, length, key;
  };
  for (const Case& c :
       {Case{"abc", "16", "offset"}, Case{"", "16", "offset"}, Case{"-8", "16", "offset"},
        Case{"99999999999999999999999", "16", "offset"}, Case{"0", "sixteen", "length"},
        Case{"0", "-16", "length"}, Case{"0", "1e3", "length"}}) {
    auto compiled = CompileOnnxFile(WriteExternalModel(dir, "weights.bin", c.offset, c.length));
    ASSERT_FALSE(compiled.ok()) << c.offset << " " << c.length;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
    EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("'c'"));
    EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr(c.key));
  }
}

TEST(OnnxImportTest, ExternalDataBeyondTheFileIsInvalidArgument) {
  std::string dir = ::testing::TempDir() + "/external_beyond";
  fs::create_directories(dir);
  std::ofstream(dir + "/weights.bin", std::ios::binary) << std::string(64, '\0');
  // 60 + 16 > 64, and INT64_MAX + 16 overflows.
  for (const std::string offset : {"60", "9223372036854775807"}) {
    auto compiled = CompileOnnxFile(WriteExternalModel(dir, "weights.bin", offset));
    ASSERT_FALSE(compiled.ok()) << offset;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
    EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("beyond the end"));
  }
  // In bounds at the very end of the file.
  EXPECT_TRUE(CompileOnnxFile(WriteExternalModel(dir, "weights.bin", "48")).ok());
}

}  // namespace
}  // namespace cuvil
