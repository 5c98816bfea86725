// Bad input gets a clear error and never a crash: garbage models, invalid graphs, unsupported ops,
// inputs of the wrong shape or dtype.
#include <fstream>

#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/tensor_file.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "test_models.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

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

}  // namespace
}  // namespace cuvil
