#include "fuse_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

// A Conv of x float32[batch, 4, 8, 8] with `w` float32[8, 4, 3, 3] into float32[batch, 8, 6, 6].
ir::Node* AddConv(ir::Graph& g, ir::Value* x, ir::Value* w, const std::string& name) {
  ir::Node* n = g.NewNode("Conv", name);
  ir::Value* y = g.NewValue(name + ".y");
  y->type = {DType::kFloat32,
             {SymDim::Batch(), SymDim::Const(8), SymDim::Const(6), SymDim::Const(6)},
             true};
  y->producer = n;
  n->inputs = {x, w};
  n->outputs = {y};
  n->attrs["kernel_shape"] = std::vector<int64_t>{3, 3};
  y->is_graph_output = true;
  g.outputs.push_back(y);
  g.output_names.push_back(y->name);
  return n;
}

ir::Value* Weights(ir::Graph& g, const std::string& name, float base) {
  ir::Value* w = g.NewValue(name);
  HostTensor t(DType::kFloat32, {8, 4, 3, 3});
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data_as<float>()[i] = base + i;
  g.MakeConstant(w, std::move(t));
  return w;
}

// Input x float32[batch, 4, 8, 8] of `g`.
ir::Value* AddInput(ir::Graph& g) {
  ir::Value* x = g.NewValue("x");
  x->type = {DType::kFloat32,
             {SymDim::Batch(), SymDim::Const(4), SymDim::Const(8), SymDim::Const(8)},
             true};
  x->is_graph_input = true;
  g.inputs.push_back(x);
  return x;
}

// Weights only their Conv reads become a ConstantImage holding exactly the packed layout;
// weights two Convs share are packed into a constant of each Conv, as without images.
TEST(FuseConvTest, SoleUseWeightsArePackedIntoAnImageSharedOnesIntoConstants) {
  ir::Graph g;
  g.symbol = "batch";
  ir::Value* x = AddInput(g);
  ir::Value* own = Weights(g, "own", 0.5f);
  ir::Value* shared = Weights(g, "shared", -3.0f);
  ir::Node* solo = AddConv(g, x, own, "solo");
  ir::Node* first = AddConv(g, x, shared, "first");
  ir::Node* second = AddConv(g, x, shared, "second");

  ConstantImages images;
  ASSERT_TRUE(FuseConvolutions(g, &images).ok());
  EXPECT_EQ(solo->attr_int("ukernel", 0), 1);
  EXPECT_EQ(solo->inputs[1], own);  // Unchanged: the image is its blob form.
  ASSERT_EQ(images.size(), 1u);
  ASSERT_TRUE(images.count(own));
  const int64_t floats = cuvil_uk_packed_conv_weights_size(1, 8, 36);
  ASSERT_GT(floats, 0);
  EXPECT_EQ(images[own].bytes, floats * 4);
  std::vector<float> want(floats), got(floats);
  cuvil_uk_pack_conv_weights(own->constant->data_as<float>(), 1, 8, 36, want.data());
  images[own].write(own->constant->data(), reinterpret_cast<uint8_t*>(got.data()));
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);

  for (ir::Node* n : {first, second}) {
    EXPECT_EQ(n->attr_int("ukernel", 0), 1);
    ASSERT_NE(n->inputs[1], shared);
    ASSERT_TRUE(n->inputs[1]->is_constant());
    EXPECT_EQ(n->inputs[1]->constant->num_elements(), floats);
  }
}

// A dilation as wide as the map (DeepLab's ASPP) leaves 1 of 9 taps reading input: that Conv runs
// on the live-tap kernel, its weights packed tap-major; the plain 3x3 beside it does not.
TEST(FuseConvTest, ConvsOfMostlyDeadTapsRunOnLiveTapsWithTapMajorWeights) {
  ir::Graph g;
  g.symbol = "batch";
  ir::Value* x = AddInput(g);
  ir::Value* own = Weights(g, "own", 0.5f);
  ir::Node* plain = AddConv(g, x, Weights(g, "plain", 1.0f), "plain");
  ir::Node* aspp = AddConv(g, x, own, "aspp");
  aspp->attrs["dilations"] = std::vector<int64_t>{12, 12};
  aspp->attrs["pads"] = std::vector<int64_t>{12, 12, 12, 12};
  aspp->outputs[0]->type.shape = {SymDim::Batch(), SymDim::Const(8), SymDim::Const(8),
                                  SymDim::Const(8)};

  ConstantImages images;
  ASSERT_TRUE(FuseConvolutions(g, &images).ok());
  EXPECT_EQ(plain->attr_int("ukernel", 0), 1);
  EXPECT_EQ(aspp->attr_int("ukernel", 0), 4);
  ASSERT_TRUE(images.count(own));
  const int64_t floats = cuvil_uk_packed_conv_weights_size(1, 8, 36);
  std::vector<float> want(floats), got(floats);
  cuvil_uk_pack_conv_weights_tap_major(own->constant->data_as<float>(), 1, 8, 4, 9, want.data());
  images[own].write(own->constant->data(), reinterpret_cast<uint8_t*>(got.data()));
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * 4), 0);
  // Tap-major: panel row (tap * 4 + c) holds w[m][c][tap], so row 1 (tap 0, channel 1) holds
  // weight index m * 36 + 9 for m < CUVIL_UK_MR.
  for (int64_t m = 0; m < std::min<int64_t>(8, CUVIL_UK_MR); ++m) {
    EXPECT_EQ(got[1 * CUVIL_UK_MR + m], 0.5f + static_cast<float>(m * 36 + 9)) << m;
  }
}

}  // namespace
}  // namespace cuvil
