#include "cuvil/server/model_config.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace cuvil {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

std::filesystem::path SourceDir() {
  if (const char* dir = std::getenv("CUVIL_SOURCE_DIR")) return dir;
  // Run by hand (not through ctest): look upwards from the working directory, then from the
  // binary (<source>/<build>/bin/server_unit_test).
  std::error_code ec;
  for (auto start :
       {std::filesystem::current_path(ec), std::filesystem::read_symlink("/proc/self/exe", ec)}) {
    for (auto dir = start; !dir.empty(); dir = dir.parent_path()) {
      if (std::filesystem::exists(dir / "examples" / "model-repository")) return dir;
      if (dir == dir.parent_path()) break;
    }
  }
  return ".";
}

std::string ReadText(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

inference::ModelConfig MustParse(const std::string& text) {
  auto config = ParseModelConfigText(text);
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : inference::ModelConfig();
}

// An MLP as the compiler reports it: input float32[batch,784] -> output float32[batch,10].
CompiledModel Mlp() {
  CompiledModel model;
  model.name = "mlp";
  model.symbol = "batch";
  model.inputs.push_back({"input", DType::kFloat32, {SymDim::Batch(), SymDim::Const(784)}});
  model.outputs.push_back({"output", DType::kFloat32, {SymDim::Batch(), SymDim::Const(10)}});
  return model;
}

// Two inputs, one with a non-batch symbolic dim, plus an int64 output.
CompiledModel TwoInputs() {
  CompiledModel model;
  model.name = "two";
  model.symbol = "batch";
  model.inputs.push_back({"a", DType::kFloat32, {SymDim::Batch(), SymDim::Const(3)}});
  model.inputs.push_back({"b", DType::kInt64, {SymDim::Batch(), SymDim::Batch(4)}});
  model.outputs.push_back({"y", DType::kFloat32, {SymDim::Batch(), SymDim::Const(3)}});
  model.outputs.push_back({"idx", DType::kInt64, {SymDim::Batch()}});
  return model;
}

// No symbolic dims at all.
CompiledModel StaticModel() {
  CompiledModel model;
  model.name = "static";
  model.inputs.push_back({"x", DType::kFloat32, {SymDim::Const(1), SymDim::Const(8)}});
  model.outputs.push_back({"y", DType::kFloat32, {SymDim::Const(1), SymDim::Const(2)}});
  return model;
}

absl::Status Complete(const CompiledModel& model, const std::string& pbtxt) {
  inference::ModelConfig config = MustParse(pbtxt);
  return CompleteModelConfig(model, &config);
}

TEST(ParseModelConfigTextTest, ParsesExampleRepositoryConfigs) {
  const auto repo = SourceDir() / "examples" / "model-repository";
  int parsed = 0;
  for (const auto& entry : std::filesystem::directory_iterator(repo)) {
    const auto path = entry.path() / "config.pbtxt";
    if (!std::filesystem::exists(path)) continue;
    auto config = ParseModelConfigText(ReadText(path));
    ASSERT_TRUE(config.ok()) << path << ": " << config.status();
    EXPECT_EQ(config->name(), entry.path().filename().string());
    EXPECT_EQ(config->platform(), "onnxruntime_onnx");
    EXPECT_GT(config->max_batch_size(), 0);
    EXPECT_GE(config->input_size(), 1);
    EXPECT_TRUE(config->has_dynamic_batching());
    ++parsed;
  }
  EXPECT_GE(parsed, 2) << "no example configs under " << repo;
}

TEST(ParseModelConfigTextTest, ReadsEveryFieldWeUse) {
  auto config = MustParse(R"pb(
    name: "m"
    backend: "onnxruntime"
    max_batch_size: 16
    version_policy { specific { versions: [ 1, 3 ] } } input
    [ {
      name: "x"
      data_type: TYPE_INT64
      dims: [ -1, 5 ]
    }]
    dynamic_batching {
      preferred_batch_size: [ 4, 8 ]
      max_queue_delay_microseconds: 100
      priority_levels: 2
      default_priority_level: 1
      priority_queue_policy {
        key: 2
        value { timeout_action: DELAY default_timeout_microseconds: 7 max_queue_size: 3 }
      }
    }
    parameters {
      key: "intra_op_threads"
      value { string_value: "2" }
    }
    default_model_filename: "net.onnx"
  )pb");
  EXPECT_EQ(config.backend(), "onnxruntime");
  EXPECT_EQ(config.max_batch_size(), 16);
  ASSERT_EQ(config.version_policy().specific().versions_size(), 2);
  EXPECT_EQ(config.version_policy().specific().versions(1), 3);
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_INT64);
  EXPECT_EQ(config.input(0).dims(0), -1);
  EXPECT_EQ(config.dynamic_batching().priority_queue_policy().at(2).max_queue_size(), 3u);
  EXPECT_EQ(config.parameters().at("intra_op_threads").string_value(), "2");
  EXPECT_EQ(config.default_model_filename(), "net.onnx");
}

TEST(ParseModelConfigTextTest, UnknownFieldNamesFieldWithLineAndColumn) {
  auto config = ParseModelConfigText(
      "name: \"m\"\nplatform: \"onnxruntime_onnx\"\n"
      "max_batch_sizee: 4\n");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(config.status().message()),
              StartsWith("config.pbtxt:3:1: unknown field \"max_batch_sizee\""));
  EXPECT_EQ(std::string(config.status().message()).find('\n'), std::string::npos);
}

TEST(ParseModelConfigTextTest, UnknownNestedFieldNamesField) {
  auto config = ParseModelConfigText("input [ { name: \"x\" dimz: [ 1 ] } ]\n");
  ASSERT_FALSE(config.ok());
  EXPECT_THAT(std::string(config.status().message()),
              HasSubstr("unknown field \"dimz\" in ModelInput"));
  EXPECT_THAT(std::string(config.status().message()), StartsWith("config.pbtxt:1:"));
}

TEST(ParseModelConfigTextTest, BadValueNamesField) {
  auto bad_int = ParseModelConfigText("name: \"m\"\nmax_batch_size: lots\n");
  ASSERT_FALSE(bad_int.ok());
  EXPECT_EQ(bad_int.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad_int.status().message()), StartsWith("config.pbtxt:2:"));
  EXPECT_THAT(std::string(bad_int.status().message()), HasSubstr("max_batch_size"));

  auto bad_enum = ParseModelConfigText("input { name: \"x\" data_type: TYPE_FP33 }");
  ASSERT_FALSE(bad_enum.ok());
  EXPECT_THAT(std::string(bad_enum.status().message()), HasSubstr("TYPE_FP33"));
  EXPECT_THAT(std::string(bad_enum.status().message()), HasSubstr("data_type"));
}

// Found by fuzz_model_config: byte escapes made string fields that the config's JSON form (the
// config endpoint) could not carry.
TEST(ParseModelConfigTextTest, RejectsInvalidUtf8InStringFields) {
  auto top = ParseModelConfigText("name: \"\\377\"");
  ASSERT_FALSE(top.ok());
  EXPECT_THAT(std::string(top.status().message()), HasSubstr("'name' is not valid UTF-8"));
  auto nested = ParseModelConfigText("input { name: \"x\" }\ninput { name: \"\\300\\200\" }");
  ASSERT_FALSE(nested.ok());
  EXPECT_THAT(std::string(nested.status().message()), HasSubstr("'input.name'"));
  auto map_key =
      ParseModelConfigText("parameters { key: \"\\xff\" value { string_value: \"v\" } }");
  ASSERT_FALSE(map_key.ok());
  EXPECT_TRUE(ParseModelConfigText("name: \"caf\\303\\251 \\360\\237\\232\\200\"").ok());
}

TEST(ModelConfigJsonTest, RoundTripsWithTritonFieldNamesAndNumbers) {
  auto config = MustParse(R"pb(
    name: "mlp"
    platform: "onnxruntime_onnx"
    max_batch_size: 8 input
    [ {
      name: "input"
      data_type: TYPE_FP32
      dims: [ 784 ]
    }] output
    [ {
      name: "output"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }]
    dynamic_batching {
      max_queue_delay_microseconds: 500
      preferred_batch_size: [ 4 ]
    } instance_group
    [ { count: 2 kind: KIND_CPU }]
  )pb");
  std::string json = ModelConfigToJson(config);
  auto j = nlohmann::json::parse(json);
  EXPECT_EQ(j["max_batch_size"], 8);
  EXPECT_EQ(j["input"][0]["data_type"], "TYPE_FP32");
  // 64-bit fields as numbers, like Triton's config endpoint.
  EXPECT_EQ(j["input"][0]["dims"][0], 784);
  EXPECT_EQ(j["output"][0]["dims"][0], -1);
  EXPECT_EQ(j["dynamic_batching"]["max_queue_delay_microseconds"], 500);
  EXPECT_EQ(j["dynamic_batching"]["preferred_batch_size"][0], 4);
  EXPECT_EQ(j["instance_group"][0]["kind"], "KIND_CPU");
  EXPECT_TRUE(j.contains("default_model_filename"));  // Proto field names, defaults printed.

  auto back = ParseModelConfigJson(json);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->SerializeAsString(), config.SerializeAsString());
}

TEST(ModelConfigJsonTest, ZeroMaxBatchSizeIsPrinted) {
  inference::ModelConfig config;
  config.set_name("m");
  auto j = nlohmann::json::parse(ModelConfigToJson(config));
  EXPECT_EQ(j["max_batch_size"], 0);
}

TEST(ModelConfigJsonTest, ParsesTritonJsonAndRejectsUnknownField) {
  auto config = ParseModelConfigJson(
      R"({"name":"m","max_batch_size":4,"input":[{"name":"x","data_type":"TYPE_INT64","dims":[3]}]})");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->input(0).dims(0), 3);
  EXPECT_EQ(config->input(0).data_type(), inference::TYPE_INT64);

  auto bad = ParseModelConfigJson(R"({"name":"m","max_batch_sizee":4})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("max_batch_sizee"));
  EXPECT_FALSE(ParseModelConfigJson("{not json").ok());
}

TEST(CompleteModelConfigTest, FillsEmptyConfigFromModel) {
  inference::ModelConfig config;
  ASSERT_TRUE(CompleteModelConfig(Mlp(), &config).ok());
  EXPECT_EQ(config.name(), "mlp");
  EXPECT_EQ(config.platform(), "onnxruntime_onnx");
  EXPECT_EQ(config.max_batch_size(), 32);
  ASSERT_EQ(config.input_size(), 1);
  EXPECT_EQ(config.input(0).name(), "input");
  EXPECT_EQ(config.input(0).data_type(), inference::TYPE_FP32);
  ASSERT_EQ(config.input(0).dims_size(), 1);
  EXPECT_EQ(config.input(0).dims(0), 784);
  ASSERT_EQ(config.output_size(), 1);
  EXPECT_EQ(config.output(0).name(), "output");
  ASSERT_EQ(config.output(0).dims_size(), 1);
  EXPECT_EQ(config.output(0).dims(0), 10);
  ASSERT_EQ(config.instance_group_size(), 1);
  EXPECT_EQ(config.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config.instance_group(0).count(), 1);
  EXPECT_EQ(config.instance_group(0).name(), "mlp_0");
  EXPECT_FALSE(config.has_dynamic_batching());
  EXPECT_EQ(config.version_policy().latest().num_versions(), 1u);

  // Completing again changes nothing: a completed config is a fixed point.
  inference::ModelConfig again = config;
  ASSERT_TRUE(CompleteModelConfig(Mlp(), &again).ok());
  EXPECT_EQ(again.SerializeAsString(), config.SerializeAsString());
}

TEST(CompleteModelConfigTest, StringModelsAreRefusedWithAClearError) {
  CompiledModel in_strings = Mlp();
  in_strings.inputs[0].dtype = DType::kString;
  absl::Status s = Complete(in_strings, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("\"input\" is a string tensor"));
  // Strings made inside (no string input or output) would need a heap the server does not give.
  CompiledModel makes = Mlp();
  makes.makes_strings = true;
  s = Complete(makes, "");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("makes string tensors"));
}

TEST(CompleteModelConfigTest, SymbolicNonBatchDimsBecomeMinusOne) {
  inference::ModelConfig config;
  ASSERT_TRUE(CompleteModelConfig(TwoInputs(), &config).ok());
  EXPECT_EQ(config.max_batch_size(), 32);
  ASSERT_EQ(config.input_size(), 2);
  EXPECT_EQ(config.input(1).name(), "b");
  EXPECT_EQ(config.input(1).data_type(), inference::TYPE_INT64);
  ASSERT_EQ(config.input(1).dims_size(), 1);
  EXPECT_EQ(config.input(1).dims(0), -1);
  ASSERT_EQ(config.output_size(), 2);
  EXPECT_EQ(config.output(1).dims_size(), 0);  // [batch] -> per-row scalar.
}

TEST(CompleteModelConfigTest, StaticModelGetsNoBatching) {
  inference::ModelConfig config;
  ASSERT_TRUE(CompleteModelConfig(StaticModel(), &config).ok());
  EXPECT_EQ(config.max_batch_size(), 0);
  ASSERT_EQ(config.input(0).dims_size(), 2);
  EXPECT_EQ(config.input(0).dims(0), 1);
  EXPECT_EQ(config.input(0).dims(1), 8);
}

TEST(CompleteModelConfigTest, AcceptsMatchingConfigAndKeepsItsValues) {
  inference::ModelConfig config = MustParse(R"pb(
    max_batch_size: 8 input
    [ {
      name: "input"
      data_type: TYPE_FP32
      dims: [ -1 ]
    }]
    dynamic_batching { preferred_batch_size: [ 2, 8 ] } instance_group
    [ { count: 3 kind: KIND_AUTO }]
  )pb");
  ASSERT_TRUE(CompleteModelConfig(Mlp(), &config).ok());
  EXPECT_EQ(config.max_batch_size(), 8);
  // A -1 over the model's fixed 784 narrows to 784: a config never loosens the signature.
  EXPECT_EQ(config.input(0).dims(0), 784);
  ASSERT_EQ(config.output_size(), 1);  // Left-out outputs are filled in.
  EXPECT_EQ(config.output(0).dims(0), 10);
  EXPECT_EQ(config.instance_group(0).kind(), inference::ModelInstanceGroup::KIND_CPU);
  EXPECT_EQ(config.instance_group(0).count(), 3);
}

TEST(CompleteModelConfigTest, ExampleConfigsMatchTheirModels) {
  for (const char* name : {"mlp", "lenet"}) {
    const auto path = SourceDir() / "examples" / "model-repository" / name / "config.pbtxt";
    inference::ModelConfig config = MustParse(ReadText(path));
    CompiledModel model;
    model.name = name;
    SymShape in = {SymDim::Batch(), SymDim::Const(784)};
    if (std::string(name) == "lenet") {
      in = {SymDim::Batch(), SymDim::Const(1), SymDim::Const(28), SymDim::Const(28)};
    }
    model.inputs.push_back({"input", DType::kFloat32, in});
    model.outputs.push_back({"output", DType::kFloat32, {SymDim::Batch(), SymDim::Const(10)}});
    EXPECT_TRUE(CompleteModelConfig(model, &config).ok()) << name;
  }
}

TEST(CompleteModelConfigTest, ReordersConfigTensorsToModelOrder) {
  inference::ModelConfig config = MustParse(R"pb(
    max_batch_size: 4 input
    [ {
      name: "b"
      data_type: TYPE_INT64
      dims: [ -1 ]
    }
      , {
        name: "a"
        data_type: TYPE_FP32
        dims: [ 3 ]
      }]
  )pb");
  ASSERT_TRUE(CompleteModelConfig(TwoInputs(), &config).ok());
  EXPECT_EQ(config.input(0).name(), "a");
  EXPECT_EQ(config.input(1).name(), "b");
}

TEST(CompleteModelConfigTest, RejectsUnknownTensorName) {
  absl::Status s = Complete(Mlp(), R"pb(
    max_batch_size: 8 input
    [ {
      name: "images"
      data_type: TYPE_FP32
      dims: [ 784 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"images\" is not in the model"));

  s = Complete(Mlp(), R"pb(
    max_batch_size: 8 output
    [ {
      name: "logits"
      data_type: TYPE_FP32
      dims: [ 10 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("output \"logits\""));
}

TEST(CompleteModelConfigTest, RejectsMissingInput) {
  absl::Status s = Complete(TwoInputs(), R"pb(
    max_batch_size: 8 input
    [ {
      name: "a"
      data_type: TYPE_FP32
      dims: [ 3 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"b\" is missing"));
}

TEST(CompleteModelConfigTest, RejectsDataTypeMismatch) {
  absl::Status s = Complete(Mlp(), R"pb(
    max_batch_size: 8 input
    [ {
      name: "input"
      data_type: TYPE_INT64
      dims: [ 784 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"input\": data_type TYPE_INT64"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("float32"));
}

TEST(CompleteModelConfigTest, RejectsDimsMismatch) {
  absl::Status s = Complete(Mlp(), R"pb(
    max_batch_size: 8 input
    [ {
      name: "input"
      data_type: TYPE_FP32
      dims: [ 785 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"input\": dims [785]"));

  // Rank mismatch: batch dim written although max_batch_size > 0.
  s = Complete(Mlp(), R"pb(
    max_batch_size: 8 output
    [ {
      name: "output"
      data_type: TYPE_FP32
      dims: [ -1, 10 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("output \"output\""));

  // A fixed config dim cannot match a symbolic model dim.
  s = Complete(TwoInputs(), R"pb(
    max_batch_size: 8 input
    [ {
      name: "a"
      data_type: TYPE_FP32
      dims: [ 3 ]
    }
      , {
        name: "b"
        data_type: TYPE_INT64
        dims: [ 4 ]
      }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"b\""));
}

TEST(CompleteModelConfigTest, RejectsMaxBatchSizeWithoutSymbolicBatch) {
  absl::Status s = Complete(StaticModel(), R"pb(
    max_batch_size: 4 input
    [ {
      name: "x"
      data_type: TYPE_FP32
      dims: [ 8 ]
    }]
  )pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"x\": max_batch_size 4 requires dim 0"));

  // Also when the config leaves the tensors to be filled in.
  s = Complete(StaticModel(), "max_batch_size: 4");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"x\": max_batch_size 4 requires dim 0"));
}

TEST(CompleteModelConfigTest, MaxBatchSizeZeroUsesFullShape) {
  inference::ModelConfig config = MustParse(R"pb(
    input
    [ {
      name: "input"
      data_type: TYPE_FP32
      dims: [ -1, 784 ]
    }]
  )pb");
  ASSERT_TRUE(CompleteModelConfig(Mlp(), &config).ok());
  EXPECT_EQ(config.max_batch_size(), 0);
  ASSERT_EQ(config.output(0).dims_size(), 2);
  EXPECT_EQ(config.output(0).dims(0), -1);
}

TEST(CompleteModelConfigTest, RejectsUnsupportedPlatformAndBackend) {
  absl::Status s = Complete(Mlp(), "platform: \"tensorrt_plan\"");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("tensorrt_plan"));
  s = Complete(Mlp(), "backend: \"pytorch\"");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("pytorch"));
  for (const char* ok : {"platform: \"onnxruntime_onnx\"", "backend: \"onnxruntime\"",
                         "backend: \"cuvil\"", "platform: \"cuvil\""}) {
    EXPECT_TRUE(Complete(Mlp(), ok).ok()) << ok;
  }
}

TEST(CompleteModelConfigTest, ValidatesDynamicBatching) {
  absl::Status s =
      Complete(Mlp(), "max_batch_size: 8 dynamic_batching { preferred_batch_size: 16 }");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("preferred_batch_size 16"));
  s = Complete(Mlp(), "max_batch_size: 8 dynamic_batching { preferred_batch_size: 0 }");
  EXPECT_THAT(std::string(s.message()), HasSubstr("preferred_batch_size 0"));
  s = Complete(StaticModel(), "dynamic_batching {}");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("dynamic_batching requires max_batch_size > 0"));
  s = Complete(Mlp(), "max_batch_size: -1");
  EXPECT_THAT(std::string(s.message()), HasSubstr("max_batch_size -1"));
  s = Complete(Mlp(), "dynamic_batching { priority_levels: 2 default_priority_level: 3 }");
  EXPECT_THAT(std::string(s.message()), HasSubstr("default_priority_level 3"));
  s = Complete(Mlp(), R"pb(dynamic_batching {
                             priority_levels: 2
                             default_priority_level: 1
                             priority_queue_policy {
                               key: 5
                               value {}
                             }
                           })pb");
  EXPECT_THAT(std::string(s.message()), HasSubstr("priority_queue_policy key 5"));
  // An empty config on a batchable model gets max_batch_size 32 first, so {} is fine.
  EXPECT_TRUE(Complete(Mlp(), "dynamic_batching {}").ok());
  EXPECT_TRUE(Complete(Mlp(), R"pb(dynamic_batching {
                                     priority_levels: 2
                                     default_priority_level: 2
                                     priority_queue_policy {
                                       key: 1
                                       value {}
                                     }
                                   })pb")
                  .ok());
}

TEST(CompleteModelConfigTest, ValidatesInstanceGroups) {
  absl::Status s = Complete(Mlp(), "instance_group { kind: KIND_GPU }");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("KIND_GPU"));
  s = Complete(Mlp(), "instance_group { kind: KIND_MODEL }");
  EXPECT_THAT(std::string(s.message()), HasSubstr("KIND_MODEL"));
  s = Complete(Mlp(), "instance_group { count: -2 }");
  EXPECT_THAT(std::string(s.message()), HasSubstr("count -2"));

  inference::ModelConfig config = MustParse("instance_group [ { count: 0 }, { count: 2 } ]");
  ASSERT_TRUE(CompleteModelConfig(Mlp(), &config).ok());
  EXPECT_EQ(config.instance_group(0).count(), 1);
  EXPECT_EQ(config.instance_group(1).count(), 2);
  EXPECT_EQ(config.instance_group(1).name(), "mlp_1");
}

TEST(CompleteModelConfigTest, ValidatesVersionPolicyAndParameters) {
  absl::Status s = Complete(Mlp(), "version_policy { specific { versions: [ 1, 0 ] } }");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("versions 0"));
  s = Complete(Mlp(), "version_policy { latest { num_versions: 0 } }");
  EXPECT_THAT(std::string(s.message()), HasSubstr("num_versions"));
  EXPECT_TRUE(Complete(Mlp(), "version_policy { all {} }").ok());
  s = Complete(Mlp(), R"pb(parameters {
                             key: "intra_op_threads"
                             value { string_value: "many" }
                           })pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("intra_op_threads"));
  for (const char* bad : {"-1", "soon", "100001"}) {
    s = Complete(Mlp(), absl::StrCat(R"pb(parameters { key: "cuvil_inline_execution_max_us"
                                                       value { string_value: ")pb",
                                     bad, "\" } }"));
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("cuvil_inline_execution_max_us")) << bad;
  }
}

TEST(SchedulerOptionsFromConfigTest, InlineExecutionLimit) {
  EXPECT_EQ(SchedulerOptionsFromConfig(MustParse("max_batch_size: 4")).inline_execution_max_us,
            500u);
  for (const auto& [value, expected] :
       std::vector<std::pair<std::string, uint64_t>>{{"0", 0}, {"2000", 2000}}) {
    SchedulerOptions o = SchedulerOptionsFromConfig(MustParse(absl::StrCat(
        R"pb(parameters { key: "cuvil_inline_execution_max_us"
                          value { string_value: ")pb",
        value, "\" } }")));
    EXPECT_EQ(o.inline_execution_max_us, expected) << value;
  }
}

TEST(CompileOptionsFromConfigTest, DimMultiples) {
  auto with = [](const std::string& value) {
    return CompileOptionsFromConfig(MustParse(absl::StrCat(
        R"pb(parameters { key: "cuvil_dim_multiples"
                          value { string_value: ")pb",
        value, "\" } }")));
  };
  auto none = CompileOptionsFromConfig(MustParse("max_batch_size: 4"));
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->import.dim_multiples.empty());
  auto two = with("height=8, width = 16");
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->import.dim_multiples,
            (std::map<std::string, int64_t>{{"height", 8}, {"width", 16}}));
  for (const char* bad :
       {"height", "height=eight", "=8", "height=1", "height=2097152", ",", "height=8=8"}) {
    auto s = with(bad);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("cuvil_dim_multiples")) << bad;
  }
  // CompleteModelConfig refuses the same values.
  absl::Status s = Complete(Mlp(), R"pb(parameters {
                                          key: "cuvil_dim_multiples"
                                          value { string_value: "h=1" }
                                        })pb");
  EXPECT_THAT(std::string(s.message()), HasSubstr("each K must be from 2 to 1048576"));
}

// Config dims that fix free model dims become input_shapes (the batch kept free when batched);
// inputs whose dims are all -1, or that the config does not list, are left alone.
TEST(CompileOptionsFromConfigTest, FixedDimsBecomeInputShapes) {
  auto batched = CompileOptionsFromConfig(MustParse(R"pb(
    max_batch_size: 4
    input {
      name: "image"
      data_type: TYPE_FP32
      dims: [ 3, 224, 224 ]
    }
    input {
      name: "free"
      data_type: TYPE_FP32
      dims: [ -1, -1 ]
    }
  )pb"));
  ASSERT_TRUE(batched.ok()) << batched.status();
  EXPECT_EQ(batched->import.input_shapes,
            (std::map<std::string, std::vector<int64_t>>{{"image", {-1, 3, 224, 224}}}));
  EXPECT_THAT(batched->import.input_shapes_origin, HasSubstr("dims leave out the batch dim 0"));
  auto unbatched = CompileOptionsFromConfig(MustParse(R"pb(
    input {
      name: "image"
      data_type: TYPE_FP32
      dims: [ 1, 3, -1, 320 ]
    }
  )pb"));
  ASSERT_TRUE(unbatched.ok()) << unbatched.status();
  EXPECT_EQ(unbatched->import.input_shapes,
            (std::map<std::string, std::vector<int64_t>>{{"image", {1, 3, -1, 320}}}));
  // Malformed dims are CompleteModelConfig's to report: no binding from them.
  auto malformed = CompileOptionsFromConfig(MustParse(R"pb(
    max_batch_size: 4
    input {
      name: "twice"
      data_type: TYPE_FP32
      dims: [ 3 ]
    }
    input {
      name: "twice"
      data_type: TYPE_FP32
      dims: [ 4 ]
    }
    input {
      name: "negative"
      data_type: TYPE_FP32
      dims: [ 3, -5 ]
    }
  )pb"));
  ASSERT_TRUE(malformed.ok()) << malformed.status();
  EXPECT_TRUE(malformed->import.input_shapes.empty());
}

// Batch-invariant kernels: on by default for a streaming model (its state must not depend on
// which steps share an execution), off otherwise, and the parameter overrides both ways.
TEST(CompileOptionsFromConfigTest, BatchInvariant) {
  auto parse = [](const std::string& text) { return CompileOptionsFromConfig(MustParse(text)); };
  EXPECT_FALSE(parse("max_batch_size: 4")->batch_invariant);
  EXPECT_TRUE(parse("max_batch_size: 4 sequence_batching { }")->batch_invariant);
  EXPECT_TRUE(parse(R"pb(max_batch_size: 4
                         parameters {
                           key: "cuvil_batch_invariant"
                           value { string_value: "true" }
                         })pb")
                  ->batch_invariant);
  EXPECT_FALSE(parse(R"pb(sequence_batching {}
                          parameters {
                            key: "cuvil_batch_invariant"
                            value { string_value: "false" }
                          })pb")
                   ->batch_invariant);
  auto bad = parse(R"pb(parameters {
                          key: "cuvil_batch_invariant"
                          value { string_value: "yes" }
                        })pb");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cuvil_batch_invariant"));
}

TEST(CompleteModelConfigTest, ValidatesWarmupInputs) {
  absl::Status s = Complete(Mlp(), R"pb(model_warmup {
                                          name: "w"
                                          batch_size: 1
                                          inputs {
                                            key: "nope"
                                            value { data_type: TYPE_FP32 dims: 784 zero_data: true }
                                          }
                                        })pb");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("input \"nope\""));
}

TEST(SchedulerOptionsFromConfigTest, MapsBatchingInstancesAndThreads) {
  inference::ModelConfig config = MustParse(R"pb(
    max_batch_size: 16
    dynamic_batching {
      preferred_batch_size: [ 4, 8 ]
      max_queue_delay_microseconds: 250
      preserve_ordering: true
      priority_levels: 2
      default_priority_level: 1
      default_queue_policy { max_queue_size: 10 default_timeout_microseconds: 99 }
      priority_queue_policy {
        key: 2
        value { timeout_action: DELAY allow_timeout_override: true }
      }
    } instance_group
    [ { count: 2 }
      , { count: 3 }]
    parameters {
      key: "intra_op_threads"
      value { string_value: "4" }
    }
  )pb");
  SchedulerOptions o = SchedulerOptionsFromConfig(config);
  EXPECT_EQ(o.max_batch_size, 16);
  EXPECT_TRUE(o.dynamic_batching);
  EXPECT_EQ(o.batching.preferred_batch_sizes, (std::vector<int32_t>{4, 8}));
  EXPECT_EQ(o.batching.max_queue_delay_us, 250u);
  EXPECT_TRUE(o.batching.preserve_ordering);
  EXPECT_EQ(o.batching.priority_levels, 2u);
  EXPECT_EQ(o.batching.default_priority_level, 1u);
  EXPECT_EQ(o.batching.default_queue_policy.max_queue_size, 10u);
  EXPECT_EQ(o.batching.default_queue_policy.default_timeout_us, 99u);
  EXPECT_EQ(o.batching.default_queue_policy.timeout_action, QueuePolicy::TimeoutAction::kReject);
  ASSERT_EQ(o.batching.priority_queue_policy.count(2), 1u);
  EXPECT_EQ(o.batching.priority_queue_policy.at(2).timeout_action,
            QueuePolicy::TimeoutAction::kDelay);
  EXPECT_TRUE(o.batching.priority_queue_policy.at(2).allow_timeout_override);
  EXPECT_EQ(o.instance_count, 5);
  EXPECT_EQ(o.intra_op_threads, 4);
}

TEST(SchedulerOptionsFromConfigTest, Defaults) {
  SchedulerOptions o = SchedulerOptionsFromConfig(MustParse("max_batch_size: 0"));
  EXPECT_EQ(o.max_batch_size, 0);
  EXPECT_FALSE(o.dynamic_batching);
  EXPECT_EQ(o.instance_count, 1);
  // Unset: the cores are shared among the instances, so nothing is oversubscribed.
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_EQ(o.intra_op_threads, cores);
  o = SchedulerOptionsFromConfig(
      MustParse("instance_group [ { count: 2 kind: KIND_CPU }, { count: 1 kind: KIND_CPU } ]"));
  EXPECT_EQ(o.instance_count, 3);
  EXPECT_EQ(o.intra_op_threads, std::max(1, cores / 3));
  EXPECT_LE(o.instance_count * o.intra_op_threads, std::max(cores, o.instance_count));

  // Triton's ORT parameter name is honoured too.
  o = SchedulerOptionsFromConfig(MustParse(R"pb(parameters {
                                                  key: "intra_op_thread_count"
                                                  value { string_value: "3" }
                                                })pb"));
  EXPECT_EQ(o.intra_op_threads, 3);
}

TEST(TensorSpecsTest, BatchedFollowsMaxBatchSize) {
  inference::ModelConfig config;
  ASSERT_TRUE(CompleteModelConfig(TwoInputs(), &config).ok());
  std::vector<TensorSpec> in = InputSpecs(config);
  ASSERT_EQ(in.size(), 2u);
  EXPECT_EQ(in[0].name, "a");
  EXPECT_EQ(in[0].dtype, DType::kFloat32);
  EXPECT_EQ(in[0].dims, (std::vector<int64_t>{3}));
  EXPECT_TRUE(in[0].batched);
  EXPECT_EQ(in[1].dtype, DType::kInt64);
  EXPECT_EQ(in[1].dims, (std::vector<int64_t>{-1}));
  std::vector<TensorSpec> out = OutputSpecs(config);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].name, "idx");
  EXPECT_TRUE(out[1].dims.empty());

  inference::ModelConfig fixed;
  ASSERT_TRUE(CompleteModelConfig(StaticModel(), &fixed).ok());
  std::vector<TensorSpec> s = InputSpecs(fixed);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_FALSE(s[0].batched);
  EXPECT_EQ(s[0].dims, (std::vector<int64_t>{1, 8}));
}

TEST(DTypeConversionTest, RoundTripsSupportedTypes) {
  for (DType d : {DType::kBool, DType::kUInt8, DType::kUInt16, DType::kUInt32, DType::kUInt64,
                  DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kFloat32,
                  DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    EXPECT_NE(ConfigFromDType(d), inference::TYPE_INVALID) << DTypeName(d);
    EXPECT_EQ(DTypeFromConfig(ConfigFromDType(d)), d) << DTypeName(d);
  }
  EXPECT_EQ(ConfigFromDType(DType::kFloat32), inference::TYPE_FP32);
  EXPECT_EQ(DTypeFromConfig(inference::TYPE_FP16), DType::kFloat16);
  EXPECT_EQ(DTypeFromConfig(inference::TYPE_STRING), DType::kUndefined);
  EXPECT_EQ(ConfigFromDType(DType::kUndefined), inference::TYPE_INVALID);
}

}  // namespace
}  // namespace cuvil
