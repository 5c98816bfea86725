#include "initializer_data.h"

#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

// A model whose graph holds a large raw_data initializer, a small one and a float_data one.
std::string Model() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("g");
  onnx::TensorProto* big = g->add_initializer();
  big->set_name("big");
  big->set_data_type(onnx::TensorProto::FLOAT);
  big->add_dims(2048);
  std::string raw(2048 * 4, '\0');
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<char>(i * 7);
  big->set_raw_data(raw);
  onnx::TensorProto* small = g->add_initializer();
  small->set_name("small");
  small->set_data_type(onnx::TensorProto::FLOAT);
  small->add_dims(1);
  small->set_raw_data(std::string(4, '\1'));
  onnx::TensorProto* floats = g->add_initializer();
  floats->set_name("floats");
  floats->set_data_type(onnx::TensorProto::FLOAT);
  floats->add_dims(1);
  floats->add_float_data(2.5f);
  g->add_node()->set_op_type("Identity");
  return model.SerializeAsString();
}

const uint8_t* Bytes(const std::string& s) { return reinterpret_cast<const uint8_t*>(s.data()); }

TEST(InitializerDataTest, MovesOnlyLargeRawDataAndKeepsEverythingElse) {
  const std::string bytes = Model();
  auto split = SplitInitializerData(Bytes(bytes), bytes.size());
  ASSERT_TRUE(split.has_value());
  ASSERT_EQ(split->raw_data.size(), 3u);
  onnx::ModelProto original, skeleton;
  ASSERT_TRUE(original.ParseFromString(bytes));
  ASSERT_TRUE(skeleton.ParseFromString(split->skeleton));
  EXPECT_LT(split->skeleton.size(), 200u);
  // The large field's bytes, found inside the original buffer, not copied.
  const std::string_view big = split->raw_data[0];
  EXPECT_GE(reinterpret_cast<const char*>(big.data()), bytes.data());
  EXPECT_LE(big.data() + big.size(), bytes.data() + bytes.size());
  EXPECT_EQ(big, original.graph().initializer(0).raw_data());
  EXPECT_EQ(skeleton.graph().initializer(0).raw_data(), std::string(1, '\0'));
  EXPECT_EQ(split->raw_data[1].data(), nullptr);
  EXPECT_EQ(split->raw_data[2].data(), nullptr);
  // Everything else survives: the placeholder is the only difference.
  skeleton.mutable_graph()->mutable_initializer(0)->set_raw_data(std::string(big));
  EXPECT_EQ(skeleton.SerializeAsString(), original.SerializeAsString());
}

TEST(InitializerDataTest, DeclinesWhatTheParserMustJudge) {
  const std::string bytes = Model();
  // Truncated anywhere, the graph field repeated, or nothing large to move.
  for (size_t keep : {bytes.size() - 1, bytes.size() / 2, size_t{3}}) {
    EXPECT_FALSE(SplitInitializerData(Bytes(bytes), keep).has_value()) << keep;
  }
  const std::string twice = bytes + bytes;
  EXPECT_FALSE(SplitInitializerData(Bytes(twice), twice.size()).has_value());
  onnx::ModelProto small;
  ASSERT_TRUE(small.ParseFromString(bytes));
  small.mutable_graph()->mutable_initializer()->DeleteSubrange(0, 1);
  const std::string no_large = small.SerializeAsString();
  EXPECT_FALSE(SplitInitializerData(Bytes(no_large), no_large.size()).has_value());
  const std::string garbage = "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
  EXPECT_FALSE(SplitInitializerData(Bytes(garbage), garbage.size()).has_value());
}

}  // namespace
}  // namespace cuvil
