#include "patch_validation.h"

#include <cstring>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/code_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "patch_test_models.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kWidth = 8;

// y = If(cond, x + 1, x + 10): the then-branch runs only for cond == true.
class PatchValidationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    model_ = Load("if/1");
    for (const KernelFunction& k : model_->model().kernels) {
      if (k.op_type != "Add") continue;
      (k.symbol.find("then") != std::string::npos ? then_add_ : else_add_) = k.symbol;
    }
    ASSERT_FALSE(then_add_.empty());
    inputs_ = PatchValidationInputs(*model_, inference::ModelConfig());
  }

  std::unique_ptr<LoadedModel> Load(const std::string& ns) {
    const std::string onnx = testing::IfOfTwoAdds(kWidth, 1.0f, 10.0f);
    auto compiled = CompileOnnxBytes(onnx);
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    auto loaded = engine_->Load(ns, std::move(*compiled));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    (*loaded)->set_source(
        std::make_shared<const CodeSource>(CodeSource{"", onnx, CompileOptions()}));
    return std::move(*loaded);
  }

  std::shared_ptr<PreparedPatch> Prepare(const std::string& kernel, float scale) {
    auto patch = model_->patches().PrepareIrPatch(testing::ScaledAddIr(kernel, kWidth, scale),
                                                  {kernel}, inputs_.front());
    EXPECT_TRUE(patch.ok()) << patch.status();
    return patch.ok() ? *patch : nullptr;
  }

  std::unique_ptr<JitEngine> engine_;
  std::unique_ptr<LoadedModel> model_;
  std::string then_add_, else_add_;
  std::vector<std::vector<HostTensor>> inputs_;
};

TEST_F(PatchValidationTest, GeneratedInputsTakeBothBranches) {
  ASSERT_EQ(inputs_.size(), 3u);
  ASSERT_EQ(inputs_[0][1].dtype(), DType::kBool);
  EXPECT_EQ(inputs_[0][1].data()[0], 0);
  EXPECT_EQ(inputs_[1][1].data()[0], 1);
}

TEST_F(PatchValidationTest, APatchOfTheBranchZerosNeverTakeIsCaught) {
  // With only the all-zero input (cond false) this patch looked harmless (issue 37 item 7).
  auto patch = Prepare(then_add_, 3.0f);
  auto checked = ValidatePatch(*model_, patch.get(), inputs_, PatchValidationOptions());
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_GE(checked->input_sets, 2);
  EXPECT_THAT(checked->first_mismatch, HasSubstr("input set 2"));
  // The branch that the first set takes, unchanged: no mismatch anywhere.
  auto same = Prepare(else_add_, 1.0f);
  checked = ValidatePatch(*model_, same.get(), inputs_, PatchValidationOptions());
  ASSERT_TRUE(checked.ok()) << checked.status();
  EXPECT_EQ(checked->first_mismatch, "");
  EXPECT_EQ(checked->max_abs_diff, 0);
}

TEST_F(PatchValidationTest, ExactAndZeroTolerancesMeanWhatTheySay) {
  // 1 + 2^-20 scales every output by a relative 1e-6: inside the default rtol of 1e-3.
  auto patch = Prepare(else_add_, 1.0f + 1.0f / (1 << 20));
  PatchValidationOptions options;
  auto loose = ValidatePatch(*model_, patch.get(), inputs_, options);
  ASSERT_TRUE(loose.ok()) << loose.status();
  EXPECT_EQ(loose->first_mismatch, "");
  options.rtol = 0;
  options.atol = 0;
  auto zero = ValidatePatch(*model_, patch.get(), inputs_, options);
  ASSERT_TRUE(zero.ok());
  EXPECT_NE(zero->first_mismatch, "");
  options = PatchValidationOptions();
  options.exact = true;
  auto exact = ValidatePatch(*model_, patch.get(), inputs_, options);
  ASSERT_TRUE(exact.ok());
  EXPECT_THAT(exact->first_mismatch, HasSubstr("bitwise"));
}

TEST_F(PatchValidationTest, AStaleTableIsAbortedNotRun) {
  auto first = Prepare(else_add_, 2.0f);
  auto stale = Prepare(then_add_, 2.0f);
  ASSERT_TRUE(model_->patches().CommitPatch(first, "a").ok());
  auto checked = ValidatePatch(*model_, stale.get(), inputs_, PatchValidationOptions());
  EXPECT_TRUE(absl::IsAborted(checked.status())) << checked.status();
}

TEST_F(PatchValidationTest, ARecompileOfAllKernelsLeavesIrPatchedKernelsAlone) {
  auto patch = Prepare(then_add_, 3.0f);
  ASSERT_TRUE(model_->patches().CommitPatch(patch, "user").ok());
  auto recompile = PrepareRecompileFromSource(*model_, "opt_level=1", {});
  ASSERT_TRUE(recompile.ok()) << recompile.status();
  ASSERT_TRUE(model_->patches().CommitPatch(*recompile, "recompile").ok());
  std::vector<PatchRecord> records = model_->patches().Patches();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_THAT(records[1].functions, ::testing::Not(::testing::Contains(then_add_)));
  EXPECT_THAT(records[1].functions, ::testing::Contains(else_add_));
  // The IR patch still computes: cond true takes x + 1 scaled by 3.
  auto out = model_->Run(inputs_[1]);
  ASSERT_TRUE(out.ok()) << out.status();
  auto plain = Load("if/plain")->Run(inputs_[1]);
  ASSERT_TRUE(plain.ok());
  EXPECT_FLOAT_EQ((*out)[0].data_as<float>()[0], 3.0f * (*plain)[0].data_as<float>()[0]);
}

TEST_F(PatchValidationTest, ReapplyCarriesTheStackOntoANewBuild) {
  auto patch = Prepare(then_add_, 3.0f);
  auto id = model_->patches().CommitPatch(patch, "user");
  ASSERT_TRUE(id.ok());
  std::vector<PatchRecord> stack = model_->patches().Freeze("reload");
  std::unique_ptr<LoadedModel> next = Load("if/1#2");
  std::vector<std::string> refused =
      ReapplyPatches(*next, stack, inputs_, PatchValidationOptions());
  EXPECT_TRUE(refused.empty()) << refused.front();
  std::vector<PatchRecord> records = next->patches().Patches();
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].id, *id);
  EXPECT_EQ(records[0].author, "user");
  auto a = model_->Run(inputs_[1]);
  auto b = next->Run(inputs_[1]);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ((*a)[0].data_as<float>()[0], (*b)[0].data_as<float>()[0]);
  // A record whose IR no longer fits is named and left out; the build still serves.
  PatchRecord bad = stack[0];
  bad.id = *id + 100;
  bad.source = "this is not IR";
  refused = ReapplyPatches(*next, {bad}, inputs_, PatchValidationOptions());
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_THAT(refused[0], HasSubstr("was not re-applied"));
  EXPECT_EQ(next->patches().Patches().size(), 1u);
}

// y = x + 1 with x float32[batch, n]: a free dim besides the batch.
std::string AddOneOverFreeDim() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("free_dim");
  for (auto* info : {g->add_input(), g->add_output()}) {
    info->set_name(info == &g->input(0) ? "x" : "y");
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_param("n");
  }
  onnx::TensorProto* one = g->add_initializer();
  one->set_name("one");
  one->set_data_type(onnx::TensorProto::FLOAT);
  one->add_float_data(1.0f);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("one");
  n->add_output("y");
  return model.SerializeAsString();
}

TEST(PatchValidationInputsTest, FreeDimsBesidesTheBatchGetARealisticSize) {
  // An image model's height and width at 1 pass no strided convolution (mobilenet_v3_large's
  // validation failed on every input that way): free dims take the largest size that fits.
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto compiled = CompileOnnxBytes(AddOneOverFreeDim());
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto loaded = (*engine)->Load("free/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  auto sets = PatchValidationInputs(**loaded, inference::ModelConfig());
  ASSERT_EQ(sets.size(), 3u);
  EXPECT_EQ(sets[0][0].shape(), (std::vector<int64_t>{1, 224}));
  EXPECT_TRUE((*loaded)->Run(sets[0]).ok());
}

}  // namespace
}  // namespace cuvil
