#include "output.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::admin_cli {
namespace {

using ::testing::HasSubstr;

TEST(AdminOutputTest, TableColumnsAlign) {
  EXPECT_EQ(RenderTable({"A", "LONGER"}, {{"xyz", "1"}, {"q"}}),
            "A    LONGER\n"
            "xyz  1\n"
            "q\n");
}

TEST(AdminOutputTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(12), "12 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{3} << 30), "3.0 GiB");
}

TEST(AdminOutputTest, ModelsTableAndJson) {
  cuvil::admin::v1::ListModelsResponse r;
  auto* m = r.add_models();
  m->set_name("mlp");
  m->set_version(1);
  m->set_state("READY");
  m->set_namespace_("mlp/1");
  m->set_compile_ms(12.34);
  m->set_weights_bytes(2048);
  m->set_code_bytes(100);
  m->set_cuvil_precision("int8:20 float32:3");
  auto* f = r.add_models();
  f->set_name("bad");
  f->set_version(2);
  f->set_state("FAILED");
  f->set_reason("no model.onnx");
  const std::string table = RenderModels(r);
  EXPECT_THAT(table, HasSubstr("MODEL  VERSION  STATE   NAMESPACE"));
  EXPECT_THAT(table, HasSubstr("mlp    1        READY   mlp/1      12.3        2.0 KiB  100 B  "
                               "int8:20 float32:3"));
  EXPECT_THAT(table, HasSubstr("bad    2        FAILED  -"));
  EXPECT_THAT(table, HasSubstr("no model.onnx"));
  const std::string json = RenderJson(r);
  EXPECT_THAT(json, HasSubstr("\"namespace\":\"mlp/1\""));
  EXPECT_THAT(json, HasSubstr("\"weights_bytes\":\"2048\""));  // int64 as a string (proto JSON)
  EXPECT_THAT(json, HasSubstr("\"reason\":\"\""));             // zero values included
}

TEST(AdminOutputTest, FunctionsTableShowsEachKernelsPrecision) {
  cuvil::admin::v1::ListFunctionsResponse r;
  auto* f = r.add_functions();
  f->set_index(0);
  f->set_symbol("k0_CuvilQConv");
  f->set_op_type("CuvilQConv");
  f->set_precision("int8");
  f->set_node_name("/conv1");
  f->set_signature("(uint8[batch,3,8,8]) -> uint8[batch,4,8,8]");
  auto* g = r.add_functions();
  g->set_index(1);
  g->set_symbol("k1_Gemm");
  g->set_op_type("Gemm");
  const std::string table = RenderFunctions(r);
  EXPECT_THAT(table, HasSubstr("INDEX  SYMBOL         OP          PRECISION  NODE"));
  EXPECT_THAT(table, HasSubstr("0      k0_CuvilQConv  CuvilQConv  int8       /conv1"));
  EXPECT_THAT(table, HasSubstr("1      k1_Gemm        Gemm        -"));  // an older server
}

TEST(AdminOutputTest, ProfileTable) {
  cuvil::admin::v1::PatchFunctionResponse r;
  r.set_patch_id("4");
  auto* k = r.add_profile();
  k->set_function("k0_Gemm");
  k->set_calls(10);
  k->set_total_ns(2'500'000);
  k->set_mean_ns(250'000);
  k->set_share(0.75);
  const std::string text = RenderPatch(r);
  EXPECT_THAT(text, HasSubstr("FUNCTION  CALLS  TOTAL_MS  MEAN_US  SHARE"));
  EXPECT_THAT(text, HasSubstr("k0_Gemm   10     2.500     250.0    75.0%"));
  EXPECT_THAT(text, HasSubstr("total            2.500"));
}

TEST(AdminOutputTest, PatchesTable) {
  cuvil::admin::v1::ListPatchesResponse r;
  auto* p = r.add_patches();
  p->set_patch_id("3");
  p->set_unix_ms(1700000000123);
  p->set_kind("ir");
  p->add_functions("k_relu_1");
  p->set_active(false);
  p->set_rolled_back_unix_ms(1700000001000);
  const std::string table = RenderPatches(r);
  EXPECT_THAT(table, HasSubstr("2023-11-14T22:13:20.123Z"));
  EXPECT_THAT(table, HasSubstr("rolled back 2023-11-14T22:13:21.000Z"));
  EXPECT_THAT(table, HasSubstr("k_relu_1"));
}

TEST(AdminOutputTest, SequencesTable) {
  cuvil::admin::v1::ListSequencesResponse r;
  auto* a = r.add_sequences();
  a->set_model("vad");
  a->set_version(1);
  a->set_sequence_id(7);
  a->set_steps(12);
  a->set_checkpoint_step(10);
  a->set_state_bytes(2048);
  a->set_idle_seconds(0.25);
  auto* b = r.add_sequences();
  b->set_model("vad");
  b->set_version(1);
  b->set_string_sequence_id("call-9");
  b->set_steps(1);
  b->set_running(true);
  b->set_pending_steps(2);
  const std::string table = RenderSequences(r);
  EXPECT_THAT(table, HasSubstr("ID        MODEL  VERSION  STEPS  CHECKPOINT  STATE    IDLE_S"));
  EXPECT_THAT(table, HasSubstr("7         vad    1        12     10          2.0 KiB  0.2"));
  EXPECT_THAT(
      table,
      HasSubstr("\"call-9\"  vad    1        1      -           0 B      0.0     running+2"));
}

}  // namespace
}  // namespace cuvil::admin_cli
