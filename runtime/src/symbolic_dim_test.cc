#include "cuvil/runtime/symbolic_dim.h"

#include <limits>

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
  EXPECT_EQ(*SymAdd(b, b), SymDim::Batch(2));
  EXPECT_EQ(*SymSub(b, b), SymDim::Const(0));
}

TEST(SymDimTest, ResultsThatAreNotMonomialsBecomeGeneralExpressions) {
  SymDim b = SymDim::Batch();
  SymDim b_plus_1 = *SymAdd(b, SymDim::Const(1));
  EXPECT_FALSE(b_plus_1.IsMonomial());
  EXPECT_EQ(b_plus_1.power(), -1);
  EXPECT_EQ(b_plus_1.coef(), 0);
  EXPECT_EQ(b_plus_1.ToString(), "batch + 1");
  EXPECT_EQ(b_plus_1.Eval(4), 5);
  SymDim third = *SymDiv(b, SymDim::Const(3));
  EXPECT_EQ(third.Eval(7), 2);
  EXPECT_EQ(*SymSub(b_plus_1, SymDim::Const(1)), b);  // Back to the monomial.
  EXPECT_TRUE(SymSub(b_plus_1, SymDim::Const(1))->IsMonomial());
}

TEST(SymDimTest, SymbolsBeyondTheBatch) {
  SymDim b = SymDim::Batch();
  SymDim seq = SymDim::Symbol(1, "seq");
  EXPECT_FALSE(seq.IsMonomial());
  EXPECT_FALSE(seq.IsStatic());
  SymDim tokens = SymMul(b, seq);
  EXPECT_EQ(tokens.ToString(), "batch*seq");
  const int64_t syms[] = {3, 7};
  EXPECT_EQ(*tokens.Eval(syms), 21);
  // Reshape [batch, seq, 128] -> [batch*seq, 4, 32] -> back: the -1 dim divides exactly.
  SymDim numel = SymNumElements({b, seq, SymDim::Const(128)});
  EXPECT_EQ(*SymDiv(numel, SymMul(tokens, SymDim::Const(4))), SymDim::Const(32));
  EXPECT_EQ(SymbolCount({b, seq}), 2);
  EXPECT_EQ(*EvalShape({b, seq, SymDim::Const(5)}, syms), (std::vector<int64_t>{3, 7, 5}));
  const int64_t batch_only[] = {3};
  EXPECT_FALSE(EvalShape({b, seq}, batch_only).has_value());
  // A conv-style extent: floor((H + 2 - 3) / 2) + 1.
  SymDim h = SymDim::Symbol(2, "H");
  SymDim out =
      *SymAdd(*SymDiv(*SymSub(*SymAdd(h, SymDim::Const(2)), SymDim::Const(3)), SymDim::Const(2)),
              SymDim::Const(1));
  const int64_t hs[] = {1, 1, 9};
  EXPECT_EQ(*out.Eval(hs), 5);
}

TEST(SymDimTest, ShapeHelpers) {
  SymShape s = {SymDim::Batch(), SymDim::Const(3), SymDim::Const(5)};
  EXPECT_EQ(SymShapeToString(s), "[batch,3,5]");
  EXPECT_EQ(SymNumElements(s), SymDim::Batch(15));
  EXPECT_EQ(EvalShape(s, 2), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_FALSE(IsStaticShape(s));
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(SymDimTest, ProductsThatOverflowAreDetectedNotWrapped) {
  // 2^62 * 4 wraps to 0 in plain int64 arithmetic; (2^62 + 1) * 4 wraps to 4.
  SymDim big = SymDim::Const(int64_t{1} << 62);
  EXPECT_FALSE(SymMulChecked(big, SymDim::Const(4)).has_value());
  EXPECT_FALSE(SymMulChecked(SymDim::Const((int64_t{1} << 62) + 1), SymDim::Batch(4)).has_value());
  EXPECT_EQ(SymMul(big, SymDim::Const(4)).coef(), kMax);
  EXPECT_EQ(SymMul(big, SymDim::Const(-4)).coef(), kMin);
  EXPECT_FALSE(SymNumElementsChecked({SymDim::Const((int64_t{1} << 62) + 1), SymDim::Const(4)}));
  EXPECT_EQ(SymNumElements({SymDim::Const((int64_t{1} << 62) + 1), SymDim::Const(4)}).coef(), kMax);
  EXPECT_EQ(*SymNumElementsChecked({SymDim::Const(3), SymDim::Batch(), SymDim::Const(0)}),
            SymDim::Const(0));
  EXPECT_EQ(*SymMulChecked(SymDim::Const(1 << 20), SymDim::Batch(1 << 20)),
            SymDim::Batch(int64_t{1} << 40));
}

TEST(SymDimTest, PowerIsCapped) {
  SymDim d = SymDim::Batch();
  for (int i = 0; i < 6; ++i) d = SymMul(d, d);  // batch^64 uncapped.
  EXPECT_LE(d.power(), kMaxSymPower);
  EXPECT_EQ(d.coef(), kMax);
  EXPECT_FALSE(SymMulChecked({1, kMaxSymPower}, SymDim::Batch()).has_value());
}

TEST(SymDimTest, SumsThatOverflowAreNullopt) {
  EXPECT_FALSE(SymAdd(SymDim::Const(kMax), SymDim::Const(1)).has_value());
  EXPECT_FALSE(SymSub(SymDim::Const(0), SymDim::Const(kMin)).has_value());
  EXPECT_FALSE(SymSub(SymDim::Const(-2), SymDim::Const(kMax)).has_value());
  EXPECT_EQ(*SymSub(SymDim::Const(-1), SymDim::Const(kMax)), SymDim::Const(kMin));
}

TEST(SymDimTest, DivisionEdgeCasesDoNotTrap) {
  // INT64_MIN / -1 traps (SIGFPE) in hardware division; it wraps to INT64_MIN like numpy.
  EXPECT_EQ(*SymDiv(SymDim::Const(kMin), SymDim::Const(-1)), SymDim::Const(kMin));
  EXPECT_EQ(*SymDiv(SymDim::Const(7), SymDim::Const(-1)), SymDim::Const(-7));
  EXPECT_EQ(*SymDiv(SymDim::Const(-7), SymDim::Const(2)), SymDim::Const(-3));
  EXPECT_FALSE(SymDiv(SymDim::Const(7), SymDim::Const(0)).has_value());
  EXPECT_FALSE(SymDiv(SymDim::Batch(kMin), SymDim::Const(-1)).has_value());
  EXPECT_EQ(*SymDiv(SymDim::Batch(6), SymDim::Const(-1)), SymDim::Batch(-6));
}

TEST(SymDimTest, EvalSaturates) {
  EXPECT_EQ(SymDim::Batch(int64_t{1} << 40).Eval(int64_t{1} << 30), kMax);
  EXPECT_EQ(SymDim::Batch(3).Eval(5), 15);
  EXPECT_EQ(SymDim::Const(9).Eval(1 << 30), 9);
}

TEST(SymDimTest, ConvertsToAndFromDimExpr) {
  for (SymDim d :
       {SymDim::Const(0), SymDim::Const(-3), SymDim::Batch(), SymDim::Batch(4), SymDim{2, 3}}) {
    DimExpr e = ToDimExpr(d);
    EXPECT_EQ(e.IsStatic(), d.IsStatic());
    for (int64_t b : {0, 1, 3, 8}) {
      int64_t vals[] = {b};
      EXPECT_EQ(e.Eval(vals), d.Eval(b)) << d.ToString();
    }
    auto back = ToSymDim(e);
    ASSERT_TRUE(back.has_value()) << d.ToString();
    EXPECT_EQ(*back, d);
  }
  EXPECT_EQ(ToDimExpr(SymDim::Batch(4)).ToString(), "4*batch");
  EXPECT_EQ(ToDimExpr(SymDim::Batch(), 2, "n").ToString(), "n");
  DimExpr b = DimExpr::Symbol(0, "batch"), s = DimExpr::Symbol(1, "seq");
  EXPECT_FALSE(ToSymDim(*DimAdd(b, 1)).has_value());  // Not a monomial.
  EXPECT_FALSE(ToSymDim(*DimMul(b, s)).has_value());  // Two symbols.
  EXPECT_FALSE(ToSymDim(s).has_value());              // Not the batch.
  EXPECT_EQ(ToSymDim(s, 1), SymDim::Batch());
}

TEST(SymDimTest, StoresItsValueAsADimExprInSymbolZero) {
  DimExpr b = DimExpr::Symbol(0, "batch");
  EXPECT_EQ(SymDim::Batch(4).expr(), *DimMul(b, 4));
  EXPECT_EQ((SymDim{3, 2}).expr(), *DimMul(*DimMul(b, b), 3));
  EXPECT_EQ(SymDim::Const(7).expr(), DimExpr(7));
  EXPECT_EQ(SymDim::Const(7).AsConstant(), 7);
  EXPECT_FALSE(SymDim::Batch().AsConstant().has_value());
  // A zero coefficient is the constant 0, whatever the power.
  EXPECT_EQ((SymDim{0, 3}), SymDim::Const(0));
  EXPECT_TRUE((SymDim{0, 3}).IsStatic());
  EXPECT_EQ((SymDim{0, 3}).power(), 0);
  // The monomial view reads back what was built.
  SymDim d{-5, 3};
  EXPECT_EQ(d.coef(), -5);
  EXPECT_EQ(d.power(), 3);
  EXPECT_EQ(d.ToString("n"), "-5*n^3");
  // Arithmetic results share the same symbol, so they compare equal to directly built dims.
  EXPECT_EQ(SymMul(SymDim::Batch(2), SymDim::Batch(3)), (SymDim{6, 2}));
  EXPECT_FALSE(SymDim::Batch() == SymDim::Const(1));
}

}  // namespace
}  // namespace cuvil
