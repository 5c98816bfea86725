// The op traits (op_table.h): every op declares the ones it must, and the passes that read them
// (batch separability, host folding, the importer's domains, the FLOP estimate) see what the rows
// say.
#include <string>
#include <vector>

#include "cuvil/compiler/flops.h"
#include "cuvil/compiler/ir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "op_table.h"

namespace cuvil {
namespace {

absl::Status NoOp(ir::InferContext&) { return absl::OkStatus(); }
absl::Status NoEmit(codegen::KernelContext&) { return absl::OkStatus(); }

// The completeness check: an op added without its traits fails here, by name.
TEST(OpTraitsTest, EveryOpDeclaresItsTraits) {
  EXPECT_THAT(OpTable::Get().MissingTraits(), ::testing::IsEmpty());
}

TEST(OpTraitsTest, ARowWithoutABatchClassIsReported) {
  OpTable table;
  table.DefineShape("Bare", NoOp);
  table.DefineEmitter("Bare", NoEmit);
  table.DefineShape("Declared", NoOp).Batch(BatchClass::kMixes);
  table.DefineEmitter("Declared", NoEmit);
  table.DefineShape("Incomplete", NoOp);  // no emitter: IncompleteRows' business, not ours
  EXPECT_THAT(table.MissingTraits(), ::testing::ElementsAre("Bare: batch class"));
}

TEST(OpTraitsTest, DomainsBesidesOnnx) {
  const OpTable& table = OpTable::Get();
  std::vector<std::string> training, microsoft, internal;
  for (const std::string& op : table.OpTypes()) {
    switch (table.Find(op)->domain) {
      case OpDomain::kTraining:
        training.push_back(op);
        break;
      case OpDomain::kMicrosoft:
        microsoft.push_back(op);
        break;
      case OpDomain::kInternal:
        internal.push_back(op);
        break;
      case OpDomain::kOnnx:
        EXPECT_NE(op.rfind("Cuvil", 0), 0u) << op << ": Cuvil's own ops are internal";
        break;
    }
  }
  EXPECT_THAT(training, ::testing::ElementsAre("Adagrad", "Adam", "Momentum"));
  EXPECT_THAT(microsoft, ::testing::ElementsAre("MatMulNBits"));
  for (const std::string& op : internal) EXPECT_EQ(op.rfind("Cuvil", 0), 0u) << op;
}

TEST(OpTraitsTest, HostFoldsAreWellFormed) {
  const OpTable& table = OpTable::Get();
  for (const std::string& op : table.OpTypes()) {
    const HostFold& f = table.Find(op)->fold;
    EXPECT_TRUE(f.arity == 0 || f.arity == 1 || f.arity == 2) << op;
    EXPECT_EQ(f.arity != 0, f.fn != nullptr) << op;
  }
  const HostFold& sub = table.Find("Sub")->fold;
  ASSERT_EQ(sub.arity, 2);
  EXPECT_EQ(sub.fn(5, 1.5), 3.5);
  EXPECT_TRUE(table.Find("Div")->fold.floats_only);
  EXPECT_TRUE(table.Find("Cast")->fold.to_bool);
  EXPECT_EQ(table.Find("Exp")->fold.arity, 0);
}

TEST(OpTraitsTest, FlopsOfAMatMul) {
  // y = MatMul(x [batch, 64], w [64, 32]): 2 * 64 FLOPs per output element.
  ir::Graph g;
  ir::Value* x = g.NewValue("x");
  x->type = {DType::kFloat32, {SymDim::Batch(1), SymDim::Const(64)}, true};
  ir::Value* w = g.NewValue("w");
  w->type = {DType::kFloat32, {SymDim::Const(64), SymDim::Const(32)}, true};
  ir::Node* mm = g.NewNode("MatMul", "mm");
  ir::Value* y = g.NewValue("y");
  y->type = {DType::kFloat32, {SymDim::Batch(1), SymDim::Const(32)}, true};
  y->producer = mm;
  mm->inputs = {x, w};
  mm->outputs = {y};
  ir::Node* relu = g.NewNode("Relu", "relu");  // elementwise: not counted
  ir::Value* z = g.NewValue("z");
  z->type = y->type;
  z->producer = relu;
  relu->inputs = {y};
  relu->outputs = {z};
  const std::vector<int64_t> batch4 = {4};
  EXPECT_EQ(EstimateFlops(g, batch4), 2.0 * 64 * 4 * 32);
}

}  // namespace
}  // namespace cuvil
