#include "op_table.h"

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

absl::Status NoOp(ir::InferContext&) { return absl::OkStatus(); }
absl::Status NoEmit(codegen::KernelContext&) { return absl::OkStatus(); }

TEST(OpTableTest, EveryRowHasAShapeFunctionAndACodeGenerator) {
  EXPECT_THAT(OpTable::Get().IncompleteRows(), ::testing::IsEmpty());
}

TEST(OpTableTest, CoversTheCoreOps) {
  const OpTable& table = OpTable::Get();
  for (const char* op : {"Conv", "Gemm", "MatMul", "Relu", "Add", "Reshape", "Loop", "If"}) {
    const OpDef* row = table.Find(op);
    ASSERT_NE(row, nullptr) << op;
    EXPECT_EQ(row->op_type, op);
    EXPECT_TRUE(row->infer && row->emit) << op;
  }
  EXPECT_GE(table.OpTypes().size(), 150u);
  ASSERT_NE(table.Find("CastLike"), nullptr);
  EXPECT_EQ(table.Find("CastLike")->rewrites_to, "Cast");
}

TEST(OpTableTest, ARowMissingEitherHalfIsNotFound) {
  OpTable table;
  table.DefineShape("ShapeOnly", NoOp);
  table.DefineEmitter("EmitterOnly", NoEmit);
  table.DefineShape("Both", NoOp);
  table.DefineEmitter("Both", NoEmit);

  EXPECT_EQ(table.Find("ShapeOnly"), nullptr);
  EXPECT_EQ(table.Find("EmitterOnly"), nullptr);
  EXPECT_EQ(table.Find("Unknown"), nullptr);
  ASSERT_NE(table.Find("Both"), nullptr);
  EXPECT_EQ(table.WhyMissing("ShapeOnly"), "no code generator");
  EXPECT_EQ(table.WhyMissing("EmitterOnly"), "no shape function");
  EXPECT_EQ(table.WhyMissing("Unknown"), "unknown op");
  EXPECT_EQ(table.WhyMissing("Both"), "");
  EXPECT_THAT(table.OpTypes(), ::testing::ElementsAre("Both"));
  EXPECT_THAT(table.IncompleteRows(), ::testing::ElementsAre("EmitterOnly: no shape function",
                                                             "ShapeOnly: no code generator"));
}

TEST(OpTableTest, ARewriteIsCompleteOnlyWhenItsTargetIs) {
  OpTable table;
  table.DefineRewrite("ToBoth", NoOp, "Both");
  table.DefineRewrite("ToShapeOnly", NoOp, "ShapeOnly");
  table.DefineShape("ShapeOnly", NoOp);
  EXPECT_EQ(table.Find("ToBoth"), nullptr);  // target not defined yet
  table.DefineShape("Both", NoOp);
  table.DefineEmitter("Both", NoEmit);
  ASSERT_NE(table.Find("ToBoth"), nullptr);
  EXPECT_EQ(table.Find("ToBoth")->rewrites_to, "Both");
  EXPECT_EQ(table.Find("ToShapeOnly"), nullptr);
  EXPECT_EQ(table.WhyMissing("ToShapeOnly"), "rewritten into ShapeOnly, which has no complete row");
}

}  // namespace
}  // namespace cuvil
