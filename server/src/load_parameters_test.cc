#include "load_parameters.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model_name.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;
using Type = LoadParameter::Type;

LoadParameter Param(std::string key, Type type, absl::string_view value) {
  LoadParameter p;
  p.key = std::move(key);
  p.type = type;
  p.value = value;
  return p;
}

TEST(ModelNameTest, AcceptsRepositoryStyleNames) {
  for (const char* name : {"mlp", "resnet-50_v1.2", "a", "...", "name with space", "ünïcode"}) {
    EXPECT_TRUE(ValidateModelName(name).ok()) << name;
  }
  EXPECT_TRUE(ValidateModelName(std::string(kMaxModelNameBytes, 'x')).ok());
}

TEST(ModelNameTest, RefusesNamesThatAreNotOneSafeComponent) {
  const std::string too_long(kMaxModelNameBytes + 1, 'x');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "empty"},
      {".", "'.' and '..'"},
      {"..", "'.' and '..'"},
      {"a/b", "'/'"},
      {"a\\b", "'\\'"},
      {std::string("a\0b", 3), "control characters"},
      {"a\nb", "control characters"},
      {"a\x7f", "control characters"},
      {too_long, "longer than 255 bytes"},
  };
  for (const auto& [name, why] : cases) {
    absl::Status s = ValidateModelName(name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << absl::CHexEscape(name);
    EXPECT_THAT(s.message(), HasSubstr("invalid model name")) << absl::CHexEscape(name);
    EXPECT_THAT(s.message(), HasSubstr(why)) << absl::CHexEscape(name);
  }
  // The name is escaped and shortened in the message.
  EXPECT_THAT(ValidateModelName("a\nb").message(), HasSubstr("a\\nb"));
  EXPECT_LT(ValidateModelName(too_long).message().size(), 200u);
}

TEST(LoadParametersTest, ParsesConfigAndFiles) {
  const std::string onnx = "\x08\x07onnx-bytes";
  const std::string onnx_b64 = absl::Base64Escape(onnx);
  LoadParametersInput input;
  input.model_name = "m";
  input.parameters = {Param("config", Type::kString, R"({"max_batch_size": 4})"),
                      Param("file:1/model.onnx", Type::kBytes, onnx),
                      Param("file:12/model.onnx", Type::kString, onnx_b64)};
  absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->name, "m");
  EXPECT_EQ(load->config_json, R"({"max_batch_size": 4})");
  EXPECT_TRUE(load->config_pbtxt.empty());
  ASSERT_EQ(load->model_bytes.size(), 2u);
  EXPECT_EQ(load->model_bytes.at(1), onnx);
  EXPECT_EQ(load->model_bytes.at(12), onnx);
  EXPECT_TRUE(load->wait);
}

TEST(LoadParametersTest, NoParametersIsARepositoryLoad) {
  LoadParametersInput input;
  input.model_name = "lenet";
  absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
  ASSERT_TRUE(load.ok()) << load.status();
  EXPECT_EQ(load->name, "lenet");
  EXPECT_TRUE(load->config_json.empty());
  EXPECT_TRUE(load->model_bytes.empty());
}

TEST(LoadParametersTest, RefusesBadParametersWithAClearMessage) {
  struct Case {
    std::vector<LoadParameter> params;
    std::string message;
  };
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<Case> cases = {
      {{Param("unload_dependents", Type::kOther, "")},
       "load parameter 'unload_dependents' is not supported"},
      {{Param("config", Type::kBytes, "{}")}, "'config' must be a string"},
      {{Param("config", Type::kOther, "")}, "'config' must be a string"},
      {{Param("config", Type::kString, "")}, "'config' is empty"},
      {{Param("config", Type::kString, deep)}, "JSON nesting deeper than 64"},
      {{Param("file:model.onnx", Type::kBytes, "x")}, "must look like file:<version>/model.onnx"},
      {{Param("file:0/model.onnx", Type::kBytes, "x")}, "must look like file:<version>/model.onnx"},
      {{Param("file:01/model.onnx", Type::kBytes, "x")},
       "must look like file:<version>/model.onnx"},
      {{Param("file:-1/model.onnx", Type::kBytes, "x")},
       "must look like file:<version>/model.onnx"},
      {{Param("file:99999999999999999999/model.onnx", Type::kBytes, "x")},
       "must look like file:<version>/model.onnx"},
      {{Param("file:1/weights.bin", Type::kBytes, "x")}, "only the version's .onnx model file"},
      {{Param("file:1/sub/model.onnx", Type::kBytes, "x")}, "only the version's .onnx model file"},
      {{Param("file:1/.onnx", Type::kBytes, "x")}, "only the version's .onnx model file"},
      {{Param("file:1/model.onnx", Type::kOther, "")}, "must hold the file's bytes"},
      {{Param("file:1/model.onnx", Type::kString, "not base64!")}, "is not valid base64"},
      {{Param("file:1/model.onnx", Type::kBytes, "")}, "'file:1/model.onnx' is empty"},
      {{Param("file:1/a.onnx", Type::kBytes, "x"), Param("file:1/b.onnx", Type::kBytes, "y")},
       "'file:1/b.onnx' is a second file for version 1"},
  };
  for (const Case& c : cases) {
    LoadParametersInput input;
    input.model_name = "m";
    input.parameters = c.params;
    absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
    EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument) << c.message;
    EXPECT_THAT(load.status().message(), HasSubstr(c.message));
  }
}

TEST(LoadParametersTest, ChecksTheModelNameFirst) {
  for (const char* name : {"", "..", "a/b", "a\\b", "a\x01"}) {
    LoadParametersInput input;
    input.model_name = name;
    input.parameters = {Param("bogus", Type::kOther, "")};
    absl::StatusOr<LoadRequest> load = ParseLoadParameters(input);
    EXPECT_EQ(load.status().code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_THAT(load.status().message(), HasSubstr("invalid model name")) << name;
  }
}

TEST(LoadParametersTest, FirstErrorDoesNotDependOnParameterOrder) {
  LoadParametersInput a;
  a.model_name = "m";
  a.parameters = {Param("zeta", Type::kOther, ""), Param("alpha", Type::kOther, "")};
  LoadParametersInput b = a;
  std::swap(b.parameters[0], b.parameters[1]);
  EXPECT_EQ(ParseLoadParameters(a).status(), ParseLoadParameters(b).status());
  EXPECT_THAT(ParseLoadParameters(a).status().message(), HasSubstr("'alpha'"));
}

}  // namespace
}  // namespace cuvil
