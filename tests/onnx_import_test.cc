// Importing models: weights in external data files next to the model, large raw_data weights read
// straight from the model bytes, one preparation lowered at several optimisation levels.
#include <filesystem>
#include <fstream>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/object_cache.h"
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

// BinaryWithConstant("Add", width, ...) with the constant c[i] = i stored as raw_data, large
// enough for the importer to read it straight from the model's bytes; `extra` raw bytes make the
// field disagree with the shape.
std::string RawDataModel(int64_t width, size_t extra = 0) {
  onnx::ModelProto model;
  model.ParseFromString(testing::BinaryWithConstant("Add", width, 0.0f));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  std::vector<float> values(static_cast<size_t>(width));
  for (int64_t i = 0; i < width; ++i) values[i] = static_cast<float>(i);
  std::string raw(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
  raw.append(extra, '\0');
  c->set_raw_data(raw);
  return model.SerializeAsString();
}

// y = x + c for a batch of 2 rows of zeros and ones.
void ExpectAddsRawConstant(CompiledModel compiled, int64_t width) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("raw/1", std::move(compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor x(DType::kFloat32, {2, width});
  for (int64_t i = 0; i < width; ++i) x.data_as<float>()[width + i] = 1;
  auto y = (*loaded)->Run({x});
  ASSERT_TRUE(y.ok()) << y.status();
  const float* out = (*y)[0].data_as<float>();
  for (int64_t i = 0; i < width; ++i) {
    ASSERT_EQ(out[i], static_cast<float>(i)) << i;
    ASSERT_EQ(out[width + i], static_cast<float>(i) + 1) << i;
  }
}

TEST(OnnxImportTest, LargeRawDataIsReadFromFileAndBytes) {
  constexpr int64_t kWidth = 4096;  // 16 KiB: read from the model's bytes, not the parsed proto.
  const std::string bytes = RawDataModel(kWidth);
  std::string dir = ::testing::TempDir() + "/raw_data";
  fs::create_directories(dir);
  std::ofstream(dir + "/model.onnx", std::ios::binary) << bytes;
  auto from_file = CompileOnnxFile(dir + "/model.onnx");
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  ExpectAddsRawConstant(*std::move(from_file), kWidth);
  auto from_bytes = CompileOnnxBytes(bytes);
  ASSERT_TRUE(from_bytes.ok()) << from_bytes.status();
  ExpectAddsRawConstant(*std::move(from_bytes), kWidth);
}

TEST(OnnxImportTest, LargeRawDataOfTheWrongSizeIsInvalidArgument) {
  auto compiled = CompileOnnxBytes(RawDataModel(4096, /*extra=*/4));
  ASSERT_FALSE(compiled.ok());
  EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  EXPECT_THAT(compiled.status().message(), ::testing::HasSubstr("holds 16388 bytes of data"));
}

TEST(OnnxImportTest, TruncatedModelIsInvalidArgument) {
  std::string bytes = RawDataModel(4096);
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{7}}) {
    auto compiled = CompileOnnxBytes(bytes.substr(0, keep));
    ASSERT_FALSE(compiled.ok()) << keep;
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kInvalidArgument) << compiled.status();
  }
}

// Both tiers lower one preparation: one weights blob, same results.
TEST(OnnxImportTest, PreparedModelLowersEveryTierFromOneWeightsBlob) {
  constexpr int64_t kWidth = 4096;
  auto prepared = PrepareOnnxBytes(RawDataModel(kWidth));
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  CompileOptions quick;
  quick.opt_level = kFastTierOptLevel;
  auto fast = (*prepared)->Lower(quick);
  auto full = (*prepared)->Lower(CompileOptions());
  ASSERT_TRUE(fast.ok()) << fast.status();
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(fast->weights.data(), full->weights.data());
  EXPECT_TRUE(full->weights.read_only());
  EXPECT_NE(fast->object_code, full->object_code);
  ExpectAddsRawConstant(*std::move(fast), kWidth);
  ExpectAddsRawConstant(*std::move(full), kWidth);
}

}  // namespace
}  // namespace cuvil
