#include "cuvil/runtime/dim_expr.h"

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// Unwraps an operation that must succeed.
DimExpr U(std::optional<DimExpr> e) {
  EXPECT_TRUE(e.has_value());
  return e.value_or(DimExpr(-999999));
}

class DimExprTest : public ::testing::Test {
 protected:
  DimExpr b = DimExpr::Symbol(0, "batch");
  DimExpr s = DimExpr::Symbol(1, "seq");
  DimExpr h = DimExpr::Symbol(2, "H");
  DimExpr w = DimExpr::Symbol(3, "W");

  DimExpr Add(const DimExpr& x, const DimExpr& y) { return U(DimAdd(x, y)); }
  DimExpr Sub(const DimExpr& x, const DimExpr& y) { return U(DimSub(x, y)); }
  DimExpr Mul(const DimExpr& x, const DimExpr& y) { return U(DimMul(x, y)); }
  DimExpr Floor(const DimExpr& x, const DimExpr& y) { return U(DimFloorDiv(x, y)); }
  DimExpr Trunc(const DimExpr& x, const DimExpr& y) { return U(DimTruncDiv(x, y)); }
  DimExpr Ceil(const DimExpr& x, const DimExpr& y) { return U(DimCeilDiv(x, y)); }
  DimExpr Min(const DimExpr& x, const DimExpr& y) { return U(DimMin(x, y)); }
  DimExpr Max(const DimExpr& x, const DimExpr& y) { return U(DimMax(x, y)); }
  // A conv's (or pool's) output length.
  DimExpr ConvOut(const DimExpr& in, int64_t pad, int64_t kernel, int64_t stride,
                  int64_t dilation = 1) {
    DimExpr span = Add(Sub(Add(in, 2 * pad), dilation * (kernel - 1)), -1);
    return Add(Floor(span, stride), 1);
  }
};

TEST_F(DimExprTest, ConstantsFoldAndStayStatic) {
  DimExpr seven = Add(DimExpr(3), DimExpr(4));
  EXPECT_TRUE(seven.IsStatic());
  EXPECT_EQ(seven.AsConstant(), 7);
  EXPECT_EQ(seven, DimExpr::Const(7));
  EXPECT_EQ(Mul(seven, 6), DimExpr(42));
  EXPECT_EQ(Floor(-7, 2), DimExpr(-4));
  EXPECT_EQ(Trunc(-7, 2), DimExpr(-3));
  EXPECT_EQ(Ceil(7, 2), DimExpr(4));
  EXPECT_EQ(U(DimMod(-7, 3)), DimExpr(2));
  EXPECT_EQ(Min(3, 9), DimExpr(3));
  EXPECT_EQ(Max(3, 9), DimExpr(9));
  EXPECT_EQ(DimExpr().AsConstant(), 0);
  EXPECT_FALSE(b.IsStatic());
  EXPECT_EQ(b.AsConstant(), std::nullopt);
}

TEST_F(DimExprTest, PolynomialsAreCanonical) {
  // (b + s) * (b - s) == b^2 - s^2, however it is built.
  DimExpr lhs = Mul(Add(b, s), Sub(b, s));
  DimExpr rhs = Sub(Mul(b, b), Mul(s, s));
  EXPECT_EQ(lhs, rhs);
  EXPECT_EQ(lhs.Hash(), rhs.Hash());
  EXPECT_EQ(Add(b, s), Add(s, b));
  EXPECT_EQ(Mul(Mul(b, s), h), Mul(h, Mul(s, b)));
  EXPECT_EQ(Sub(Add(b, s), b), s);
  EXPECT_EQ(Sub(b, b), DimExpr(0));
  EXPECT_TRUE(Sub(b, b).IsStatic());
  EXPECT_EQ(Add(Mul(b, 3), Mul(b, 4)), Mul(b, 7));
  EXPECT_NE(Add(b, 1), b);
  EXPECT_NE(b, s);
  EXPECT_EQ(Mul(b, 0), DimExpr(0));
}

TEST_F(DimExprTest, ConvAndPoolArithmeticSimplifies) {
  // 3x3, pad 1, stride 1 keeps the size.
  EXPECT_EQ(ConvOut(h, 1, 3, 1), h);
  // 1x1 stride 1.
  EXPECT_EQ(ConvOut(h, 0, 1, 1), h);
  // 3x3 pad 1 stride 2: floor((H - 1) / 2) + 1 == floor((H + 1) / 2) == ceil(H / 2).
  DimExpr half = ConvOut(h, 1, 3, 2);
  EXPECT_EQ(half, Floor(Add(h, 1), 2));
  EXPECT_EQ(half, Ceil(h, 2));
  EXPECT_EQ(half.ToString(), "floor((H + 1) / 2)");
  // 7x7 pad 3 stride 2 (resnet's stem) gives the same as 3x3 pad 1 stride 2.
  EXPECT_EQ(ConvOut(h, 3, 7, 2), half);
  // 2x2 pool stride 2: floor(H / 2).
  EXPECT_EQ(ConvOut(h, 0, 2, 2), Floor(h, 2));
  // Two stride-2 pools: floor(floor(H / 2) / 2) == floor(H / 4).
  EXPECT_EQ(Floor(Floor(h, 2), 2), Floor(h, 4));
  // floor((floor(H / 2) + 1) / 2) == floor((H + 2) / 4).
  EXPECT_EQ(Floor(Add(Floor(h, 2), 1), 2), Floor(Add(h, 2), 4));
  for (int64_t v = 0; v < 40; ++v) {
    int64_t vals[] = {0, 0, v, 0};
    EXPECT_EQ(half.Eval(vals), (v + 1) / 2) << v;
    EXPECT_EQ(ConvOut(h, 2, 5, 3, 2).Eval(vals), (v + 4 - 8 - 1 + 3 * 100) / 3 - 100 + 1) << v;
  }
}

TEST_F(DimExprTest, FloorDivisionSplitsAndReduces) {
  // Exact parts come out of the floor: floor((4b + 3) / 2) == 2b + 1.
  EXPECT_EQ(Floor(Add(Mul(b, 4), 3), 2), Add(Mul(b, 2), 1));
  EXPECT_EQ(Floor(Mul(b, 4), 2), Mul(b, 2));
  EXPECT_EQ(Floor(Add(Mul(Mul(b, s), 6), 5), 3), Add(Mul(Mul(b, s), 2), 1));
  // Common factors of the divisor and the coefficients cancel: floor((2H + 2) / 4) ==
  // floor((H + 1) / 2), and floor((2H + 1) / 4) == floor(H / 2).
  EXPECT_EQ(Floor(Add(Mul(h, 2), 2), 4), Floor(Add(h, 1), 2));
  EXPECT_EQ(Floor(Add(Mul(h, 2), 1), 4), Floor(h, 2));
  // A negative divisor or leading coefficient is normalised: floor(H / -2) == floor(-H / 2) ==
  // -ceil(H / 2).
  EXPECT_EQ(Floor(h, -2), Floor(Sub(0, h), 2));
  EXPECT_EQ(Floor(Sub(0, h), 2), Sub(0, Ceil(h, 2)));
  EXPECT_EQ(Floor(h, 1), h);
  EXPECT_FALSE(DimFloorDiv(h, 0).has_value());
  EXPECT_FALSE(DimTruncDiv(h, 0).has_value());
  // Mixed signs evaluate with floor semantics everywhere.
  DimExpr e = Floor(Sub(w, h), 3);
  for (int64_t hv = 0; hv < 9; ++hv) {
    for (int64_t wv = 0; wv < 9; ++wv) {
      int64_t vals[] = {0, 0, hv, wv};
      int64_t d = wv - hv, q = d / 3 - ((d % 3 != 0 && d < 0) ? 1 : 0);
      EXPECT_EQ(e.Eval(vals), q) << hv << " " << wv;
    }
  }
}

TEST_F(DimExprTest, SymbolicDivisors) {
  EXPECT_EQ(Floor(Mul(b, 4), b), DimExpr(4));
  EXPECT_EQ(Floor(Mul(b, s), s), b);
  EXPECT_EQ(Floor(Add(Mul(b, s), s), s), Add(b, 1));
  EXPECT_EQ(Trunc(Mul(Mul(b, s), 8), Mul(s, 2)), Mul(b, 4));
  EXPECT_EQ(Floor(s, s), DimExpr(1));
  DimExpr q = Floor(b, s);
  EXPECT_FALSE(q.IsStatic());
  EXPECT_EQ(Floor(Sub(0, b), Sub(0, s)), q);
  // Dimensions are non-negative, so truncating division of dimensions is floor division.
  EXPECT_EQ(Trunc(b, s), q);
  int64_t vals[] = {7, 2};
  EXPECT_EQ(q.Eval(vals), 3);
  int64_t zero[] = {7, 0};
  EXPECT_EQ(q.Eval(zero), std::nullopt);  // Division by zero at run time.
}

TEST_F(DimExprTest, TruncatingDivision) {
  // A non-negative numerator: trunc == floor.
  EXPECT_EQ(Trunc(Add(h, 1), 2), Floor(Add(h, 1), 2));
  // A non-positive one: trunc(-H / 2) == -floor(H / 2).
  EXPECT_EQ(Trunc(Sub(0, h), 2), Sub(0, Floor(h, 2)));
  // Exact.
  EXPECT_EQ(Trunc(Add(Mul(h, 4), -8), 4), Add(h, -2));
  EXPECT_EQ(Trunc(h, -1), Sub(0, h));
  // Unknown sign keeps the atom, which evaluates with C semantics.
  DimExpr t = Trunc(Add(h, -5), 2);
  EXPECT_EQ(t.ToString(), "trunc((H - 5) / 2)");
  for (int64_t v = 0; v < 12; ++v) {
    int64_t vals[] = {0, 0, v};
    EXPECT_EQ(t.Eval(vals), (v - 5) / 2) << v;
  }
  // INT64_MIN / -1 wraps as the generated code does.
  EXPECT_EQ(Trunc(kMin, -1), DimExpr(kMin));
}

TEST_F(DimExprTest, Modulo) {
  EXPECT_EQ(U(DimMod(Mul(h, 2), 2)), DimExpr(0));
  EXPECT_EQ(U(DimMod(Add(Mul(h, 2), 1), 2)), DimExpr(1));
  EXPECT_EQ(U(DimMod(Add(Mul(h, 4), 7), 4)), DimExpr(3));
  DimExpr m = U(DimMod(h, 3));
  for (int64_t v = 0; v < 10; ++v) {
    int64_t vals[] = {0, 0, v};
    EXPECT_EQ(m.Eval(vals), v % 3) << v;
  }
}

TEST_F(DimExprTest, MinAndMax) {
  EXPECT_EQ(Min(Add(s, 3), Add(s, 5)), Add(s, 3));
  EXPECT_EQ(Max(Add(s, 3), Add(s, 5)), Add(s, 5));
  EXPECT_EQ(Max(s, 0), s);  // Dimensions are non-negative.
  EXPECT_EQ(Min(s, 0), DimExpr(0));
  EXPECT_EQ(Min(s, Mul(s, 2)), s);
  EXPECT_EQ(Min(s, s), s);
  EXPECT_EQ(Min(b, s), Min(s, b));
  EXPECT_EQ(Min(Min(b, s), h), Min(b, Min(s, h)));
  EXPECT_EQ(Max(Max(b, 4), Max(s, 6)), Max(Max(b, s), 6));
  // Constant offsets come out: min(s + 3, 7) == min(s, 4) + 3.
  EXPECT_EQ(Min(Add(s, 3), 7), Add(Min(s, 4), 3));
  EXPECT_EQ(Min(Add(Min(b, s), 2), Add(b, 2)), Add(Min(b, s), 2));
  EXPECT_EQ(Min(s, 512).ToString(), "min(seq, 512)");
  DimExpr clipped = Min(Max(Sub(s, 4), 2), 9);
  for (int64_t v = 0; v < 20; ++v) {
    int64_t vals[] = {0, v};
    EXPECT_EQ(clipped.Eval(vals), std::min<int64_t>(std::max<int64_t>(v - 4, 2), 9)) << v;
  }
}

TEST_F(DimExprTest, QueriesAndPrinting) {
  DimExpr e = Add(Mul(Mul(b, s), 2), 3);
  EXPECT_EQ(e.ToString(), "2*batch*seq + 3");
  EXPECT_EQ(Sub(Mul(b, b), 1).ToString(), "batch^2 - 1");
  EXPECT_EQ(Sub(1, b).ToString(), "-batch + 1");
  EXPECT_EQ(DimExpr(-4).ToString(), "-4");
  EXPECT_EQ(e.Symbols(), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(Floor(h, Add(w, 1)).Symbols(), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(Floor(h, Add(w, 1)).SymbolCount(), 4);
  EXPECT_EQ(DimExpr(5).SymbolCount(), 0);
  EXPECT_EQ(s.AsSymbol(), 1);
  EXPECT_EQ(Mul(s, 2).AsSymbol(), std::nullopt);
  EXPECT_EQ(e.constant_term(), 3);
  ASSERT_EQ(e.terms().size(), 1u);
  EXPECT_EQ(e.terms()[0].coef, 2);
  EXPECT_TRUE(e.IsProvablyNonNegative());
  EXPECT_TRUE(Floor(h, 2).IsProvablyNonNegative());
  EXPECT_TRUE(Mul(Sub(h, w), Sub(h, w)).IsProvablyNonNegative() ||
              !Mul(Sub(h, w), Sub(h, w)).IsProvablyNonNegative());  // Sound either way.
  EXPECT_FALSE(Sub(h, 1).IsProvablyNonNegative());
  EXPECT_FALSE(Sub(h, w).IsProvablyNonNegative());
  int64_t vals[] = {2, 5};
  EXPECT_EQ(e.Eval(vals), 23);
  int64_t short_vals[] = {2};
  EXPECT_EQ(e.Eval(short_vals), std::nullopt);  // seq has no value.
}

TEST_F(DimExprTest, Substitution) {
  // H = 2k makes floor(H / 2) == k.
  DimExpr k = DimExpr::Symbol(4, "k");
  EXPECT_EQ(U(DimSubstitute(Floor(h, 2), 2, Mul(k, 2))), k);
  EXPECT_EQ(U(DimSubstitute(Min(s, 5), 1, 7)), DimExpr(5));
  EXPECT_EQ(U(DimSubstitute(Add(Mul(b, s), s), 1, 3)), Add(Mul(b, 3), 3));
  EXPECT_EQ(U(DimSubstitute(Mul(s, s), 1, Add(b, 1))), Add(Add(Mul(b, b), Mul(b, 2)), 1));
  EXPECT_EQ(U(DimSubstitute(b, 1, 3)), b);
}

TEST_F(DimExprTest, OverflowIsReportedNotWrapped) {
  DimExpr big(int64_t{1} << 62);
  EXPECT_FALSE(DimMul(big, 4).has_value());
  EXPECT_FALSE(DimMul(Mul(b, big), 4).has_value());
  EXPECT_FALSE(DimAdd(kMax, 1).has_value());
  EXPECT_FALSE(DimAdd(Add(b, kMax), 1).has_value());
  EXPECT_FALSE(DimNeg(kMin).has_value());
  EXPECT_FALSE(DimNeg(Mul(b, kMin)).has_value());
  // Evaluation overflow.
  DimExpr e = Mul(b, big);
  int64_t vals[] = {4};
  EXPECT_EQ(e.Eval(vals), std::nullopt);
  int64_t ok[] = {1};
  EXPECT_EQ(e.Eval(ok), int64_t{1} << 62);
}

TEST_F(DimExprTest, ExtremeCoefficientsNeverMisbehave) {
  // INT64_MIN has no magnitude in int64: every operation must refuse or stay exact, not overflow.
  DimExpr m = Mul(b, kMin);
  for (int64_t d : {int64_t{-1}, int64_t{1}, int64_t{2}, int64_t{3}, kMax, kMin}) {
    auto f = DimFloorDiv(m, d), t = DimTruncDiv(m, d), r = DimMod(m, d);
    int64_t one[] = {1};
    if (f) {
      auto v = f->Eval(one);
      if (v && d > 0) EXPECT_EQ(*v, kMin / d - (kMin % d != 0 ? 1 : 0)) << d;
    }
    if (t && d != -1) {
      auto v = t->Eval(one);
      if (v) EXPECT_EQ(*v, kMin / d) << d;
    }
    (void)r;
  }
  EXPECT_EQ(Trunc(m, m), DimExpr(1));
  EXPECT_FALSE(DimFloorDiv(m, Mul(b, -1)).has_value() && DimFloorDiv(m, Mul(b, -1))->IsStatic() &&
               DimFloorDiv(m, Mul(b, -1))->constant_term() != kMin);
  (void)DimMin(m, Mul(b, kMax));
  (void)DimMax(m, kMin);
}

TEST_F(DimExprTest, SizeIsBounded) {
  // Powers are capped.
  DimExpr p = b;
  for (int i = 1; i < kMaxDimExprPower; ++i) p = Mul(p, b);
  EXPECT_FALSE(DimMul(p, b).has_value());
  EXPECT_FALSE(DimMul(p, s).has_value());  // Total degree too.
  // Repeatedly nesting atoms fails once the tree exceeds the node cap, instead of growing.
  std::optional<DimExpr> e = b;
  int steps = 0;
  while (e && steps < 10000) {
    e = DimFloorDiv(U(DimAdd(*e, DimExpr::Symbol(steps % 7, "x"))), Add(s, 1));
    ++steps;
  }
  EXPECT_FALSE(e.has_value());
  EXPECT_LT(steps, 10000);
}

// Random expression trees: the canonical form must evaluate exactly like the tree it came from.
struct RefNode {
  enum Op { kConst, kSym, kAdd, kSub, kMul, kFloor, kCeil, kTrunc, kMod, kMin, kMax } op;
  int64_t value = 0;
  std::vector<RefNode> kids;

  std::optional<int64_t> Eval(const std::vector<int64_t>& v) const {
    if (op == kConst) return value;
    if (op == kSym) return v[value];
    auto x = kids[0].Eval(v), y = kids[1].Eval(v);
    if (!x || !y) return std::nullopt;
    int64_t a = *x, b = *y;
    auto floor_div = [](int64_t p, int64_t q) {
      return p / q - ((p % q != 0 && (p < 0) != (q < 0)) ? 1 : 0);
    };
    switch (op) {
      case kAdd:
        return a + b;
      case kSub:
        return a - b;
      case kMul:
        return a * b;
      case kFloor:
        if (b == 0) return std::nullopt;
        return floor_div(a, b);
      case kCeil:
        if (b == 0) return std::nullopt;
        return -floor_div(-a, b);
      case kTrunc:
        if (b == 0) return std::nullopt;
        return a / b;
      case kMod:
        if (b == 0) return std::nullopt;
        return a - b * floor_div(a, b);
      case kMin:
        return std::min(a, b);
      case kMax:
        return std::max(a, b);
      default:
        return std::nullopt;
    }
  }
};

std::optional<DimExpr> Build(const RefNode& n) {
  if (n.op == RefNode::kConst) return DimExpr(n.value);
  if (n.op == RefNode::kSym) return DimExpr::Symbol(static_cast<int32_t>(n.value), "v");
  auto x = Build(n.kids[0]), y = Build(n.kids[1]);
  if (!x || !y) return std::nullopt;
  switch (n.op) {
    case RefNode::kAdd:
      return DimAdd(*x, *y);
    case RefNode::kSub:
      return DimSub(*x, *y);
    case RefNode::kMul:
      return DimMul(*x, *y);
    case RefNode::kFloor:
      return DimFloorDiv(*x, *y);
    case RefNode::kCeil:
      return DimCeilDiv(*x, *y);
    case RefNode::kTrunc:
      return DimTruncDiv(*x, *y);
    case RefNode::kMod:
      return DimMod(*x, *y);
    case RefNode::kMin:
      return DimMin(*x, *y);
    case RefNode::kMax:
      return DimMax(*x, *y);
    default:
      return std::nullopt;
  }
}

RefNode RandomTree(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> pick(0, 10);
  int op = depth == 0 ? pick(rng) % 2 : pick(rng);
  RefNode n{static_cast<RefNode::Op>(op), 0, {}};
  if (op == RefNode::kConst) {
    n.value = std::uniform_int_distribution<int64_t>(-4, 6)(rng);
  } else if (op == RefNode::kSym) {
    n.value = std::uniform_int_distribution<int64_t>(0, 2)(rng);
  } else {
    n.kids.push_back(RandomTree(rng, depth - 1));
    n.kids.push_back(RandomTree(rng, depth - 1));
  }
  return n;
}

TEST(DimExprPropertyTest, CanonicalFormEvaluatesLikeTheTree) {
  std::mt19937 rng(12345);
  int checked = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    RefNode tree = RandomTree(rng, 1 + iter % 4);
    auto e = Build(tree);
    if (!e) {
      // Small trees never hit the caps: only a divisor that is identically zero refuses, and then
      // the tree is undefined everywhere.
      for (int64_t x = 0; x < 5; ++x) ASSERT_EQ(tree.Eval({x, x + 1, 2 * x}), std::nullopt);
      ++refused;
      continue;
    }
    for (int64_t x = 0; x < 5; ++x) {
      for (int64_t y = 0; y < 5; ++y) {
        for (int64_t z : {0, 3, 7}) {
          std::vector<int64_t> v = {x, y, z};
          auto want = tree.Eval(v);
          if (!want) continue;  // Undefined in the tree (division by zero): nothing to compare.
          ASSERT_EQ(e->Eval(v), want) << e->ToString() << " at " << x << "," << y << "," << z;
          ++checked;
        }
      }
    }
    // Rebuilding from the canonical form's own pieces changes nothing (idempotent).
    ASSERT_EQ(U(DimAdd(*e, 0)), *e);
    ASSERT_EQ(U(DimMul(*e, 1)), *e);
    ASSERT_EQ(U(DimFloorDiv(*e, 1)), *e);
    ASSERT_EQ(U(DimSub(U(DimAdd(*e, DimExpr::Symbol(5, "t"))), DimExpr::Symbol(5, "t"))), *e);
  }
  EXPECT_GT(checked, 100000);
  EXPECT_LT(refused, 600);  // Divisors from {-4..6} and their differences hit 0.
}

TEST(DimExprPropertyTest, EqualBuildsHashEqual) {
  // Two orders of the same sum of random trees are the same expression.
  std::mt19937 rng(777);
  for (int iter = 0; iter < 500; ++iter) {
    auto x = Build(RandomTree(rng, 2)), y = Build(RandomTree(rng, 2)),
         z = Build(RandomTree(rng, 2));
    if (!x || !y || !z) continue;  // A divisor that is identically zero.
    DimExpr l = U(DimAdd(U(DimAdd(*x, *y)), *z)), r = U(DimAdd(*z, U(DimAdd(*y, *x))));
    ASSERT_EQ(l, r) << l.ToString() << " vs " << r.ToString();
    ASSERT_EQ(l.Hash(), r.Hash());
    DimExpr ml = U(DimMul(*x, *y)), mr = U(DimMul(*y, *x));
    ASSERT_EQ(ml, mr);
    DimExpr nl = U(DimMin(*x, *y)), nr = U(DimMin(*y, *x));
    ASSERT_EQ(nl, nr) << nl.ToString() << " vs " << nr.ToString();
  }
}

}  // namespace
}  // namespace cuvil
