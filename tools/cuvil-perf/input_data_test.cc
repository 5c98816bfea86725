#include "input_data.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::perf {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(RequestShapeTest, ReplacesTheBatchDim) {
  TensorInfo in{"x", "FP32", {-1, 3, 4}};
  absl::StatusOr<std::vector<int64_t>> s = RequestShape(in, 32, 8);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_THAT(*s, ElementsAre(8, 3, 4));
}

TEST(RequestShapeTest, UnknownMaxBatchGuessesFromALeadingMinusOne) {
  absl::StatusOr<std::vector<int64_t>> s = RequestShape({"x", "FP32", {-1, 2}}, -1, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_THAT(*s, ElementsAre(4, 2));
}

TEST(RequestShapeTest, Errors) {
  EXPECT_THAT(RequestShape({"x", "FP32", {-1, -1}}, 8, 1).status().message(),
              HasSubstr("dim 1 is variable"));
  EXPECT_THAT(RequestShape({"x", "FP32", {3, 4}}, 0, 2).status().message(),
              HasSubstr("no batch dimension"));
  EXPECT_THAT(RequestShape({"x", "FP32", {-1, 4}}, 8, 16).status().message(),
              HasSubstr("max_batch_size 8"));
  EXPECT_THAT(RequestShape({"x", "FP32", {-1, 4}}, 0, 1).status().message(),
              HasSubstr("dim 0 is variable"));
}

TEST(BuildInputsTest, ZeroRandomAndDirectory) {
  ModelInfo model;
  model.max_batch_size = 4;
  model.inputs = {{"a", "FP32", {-1, 3}}, {"b", "INT64", {-1, 2}}};
  PerfOptions options;
  options.batch = 2;
  absl::StatusOr<std::vector<InputTensor>> zero = BuildInputs(model, options);
  ASSERT_TRUE(zero.ok()) << zero.status();
  ASSERT_EQ(zero->size(), 2u);
  EXPECT_THAT((*zero)[0].shape, ElementsAre(2, 3));
  EXPECT_EQ((*zero)[0].data, std::string(24, '\0'));
  EXPECT_EQ((*zero)[1].data.size(), 32u);

  options.input_data = InputDataKind::kRandom;
  absl::StatusOr<std::vector<InputTensor>> random = BuildInputs(model, options);
  ASSERT_TRUE(random.ok());
  for (size_t i = 0; i < 6; ++i) {
    float v;
    std::memcpy(&v, (*random)[0].data.data() + 4 * i, 4);
    EXPECT_GE(v, 0.0f);
    EXPECT_LT(v, 1.0f);
  }
  EXPECT_NE((*random)[0].data, std::string(24, '\0'));

  // One sample in the file is replicated over the batch; a wrong size is an error.
  std::filesystem::path dir = std::filesystem::path(testing::TempDir()) / "cuvil_perf_inputs";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "a.bin", std::ios::binary) << std::string("0123456789ab");
  std::ofstream(dir / "b.bin", std::ios::binary) << std::string(32, 'z');
  options.input_data = InputDataKind::kDirectory;
  options.input_dir = dir.string();
  absl::StatusOr<std::vector<InputTensor>> files = BuildInputs(model, options);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ((*files)[0].data, "0123456789ab0123456789ab");
  EXPECT_EQ((*files)[1].data, std::string(32, 'z'));
  std::ofstream(dir / "b.bin", std::ios::binary) << std::string(5, 'z');
  EXPECT_THAT(BuildInputs(model, options).status().message(), HasSubstr("holds 5 bytes"));
  std::filesystem::remove(dir / "b.bin");
  EXPECT_THAT(BuildInputs(model, options).status().message(), HasSubstr("cannot read"));
}

TEST(BuildInputsTest, UnsupportedDatatype) {
  ModelInfo model;
  model.inputs = {{"s", "BYTES", {1}}};
  EXPECT_FALSE(BuildInputs(model, PerfOptions()).ok());
}

}  // namespace
}  // namespace cuvil::perf
