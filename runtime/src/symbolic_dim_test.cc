#include "cuvil/runtime/symbolic_dim.h"

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TEST(SymDimTest, ArithmeticOnBatchMonomials) {
  SymDim b = SymDim::Batch();
  SymDim four_b = SymMul(b, SymDim::Const(4));
  EXPECT_EQ(four_b.ToString(), "4*batch");
  EXPECT_EQ(four_b.Eval(3), 12);
  EXPECT_EQ(*SymDiv(four_b, SymDim::Const(2)), SymDim::Batch(2));
  EXPECT_EQ(*SymDiv(four_b, b), SymDim::Const(4));
  EXPECT_FALSE(SymDiv(b, SymDim::Const(3)).has_value());
  EXPECT_FALSE(SymAdd(b, SymDim::Const(1)).has_value());
  EXPECT_EQ(*SymAdd(b, b), SymDim::Batch(2));
  EXPECT_EQ(*SymSub(b, b), SymDim::Const(0));
}

TEST(SymDimTest, ShapeHelpers) {
  SymShape s = {SymDim::Batch(), SymDim::Const(3), SymDim::Const(5)};
  EXPECT_EQ(SymShapeToString(s), "[batch,3,5]");
  EXPECT_EQ(SymNumElements(s), SymDim::Batch(15));
  EXPECT_EQ(EvalShape(s, 2), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_FALSE(IsStaticShape(s));
}

}  // namespace
}  // namespace cuvil
