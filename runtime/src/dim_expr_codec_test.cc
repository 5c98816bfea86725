#include "cuvil/runtime/dim_expr_codec.h"

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

const std::vector<std::string> kNames = {"batch", "seq", "H"};

DimExpr U(std::optional<DimExpr> e) {
  EXPECT_TRUE(e.has_value());
  return e.value_or(DimExpr(-999999));
}

int64_t W(DimOp op) { return static_cast<int64_t>(op); }

TEST(DimExprCodecTest, RoundTripsAndEvaluates) {
  DimExpr b = DimExpr::Symbol(0, "batch"), s = DimExpr::Symbol(1, "seq"),
          h = DimExpr::Symbol(2, "H");
  std::vector<DimExpr> exprs = {
      DimExpr(0),
      DimExpr(-17),
      b,
      U(DimAdd(U(DimMul(U(DimMul(b, s)), 3)), 5)),
      U(DimMul(U(DimMul(s, s)), b)),
      U(DimFloorDiv(U(DimAdd(h, 1)), 2)),
      U(DimTruncDiv(U(DimSub(h, 5)), 2)),
      U(DimFloorDiv(b, s)),
      U(DimMin(U(DimMax(U(DimSub(s, 4)), 2)), 9)),
      U(DimMin(U(DimMin(b, s)), h)),
  };
  for (const DimExpr& e : exprs) {
    std::vector<int64_t> words = EncodeDimExpr(e);
    auto back = DecodeDimExpr(words, kNames);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, e) << e.ToString() << " -> " << back->ToString();
    EXPECT_EQ(back->ToString(), e.ToString());
    for (int64_t x : {0, 1, 5}) {
      for (int64_t y : {1, 3, 8}) {
        for (int64_t z : {0, 7, 32}) {
          int64_t vals[] = {x, y, z};
          EXPECT_EQ(EvalDimProgram(words, vals), e.Eval(vals)) << e.ToString();
        }
      }
    }
  }
}

TEST(DimExprCodecTest, StaticExpressionIsTwoWords) {
  EXPECT_EQ(EncodeDimExpr(DimExpr(42)), (std::vector<int64_t>{W(DimOp::kConst), 42}));
  EXPECT_EQ(EvalDimProgram(EncodeDimExpr(DimExpr(42)), {}), 42);
}

TEST(DimExprCodecTest, EvaluationFailuresAreReported) {
  DimExpr q = U(DimFloorDiv(DimExpr::Symbol(0, "b"), DimExpr::Symbol(1, "s")));
  auto words = EncodeDimExpr(q);
  int64_t zero[] = {4, 0};
  EXPECT_EQ(EvalDimProgram(words, zero), std::nullopt);
  int64_t missing[] = {4};
  EXPECT_EQ(EvalDimProgram(words, missing), std::nullopt);
  auto big = EncodeDimExpr(U(DimMul(DimExpr::Symbol(0, "b"), int64_t{1} << 62)));
  int64_t four[] = {4};
  EXPECT_EQ(EvalDimProgram(big, four), std::nullopt);
}

TEST(DimExprCodecTest, MalformedProgramsAreRejected) {
  const int64_t c = W(DimOp::kConst), sym = W(DimOp::kSymbol);
  std::vector<std::vector<int64_t>> bad = {
      {},                                           // Nothing on the stack.
      {c},                                          // Truncated constant.
      {c, 1, c, 2},                                 // Two values left.
      {c, 1, W(DimOp::kAdd)},                       // Underflow.
      {99},                                         // Unknown word.
      {sym, 7},                                     // No such symbol.
      {sym, -1},                                    // Negative id.
      {c, 3, W(DimOp::kPow), 1000},                 // Power out of range.
      {c, 3, c, 4, W(DimOp::kMin), 3},              // Arity over the stack.
      {c, 3, W(DimOp::kMin), 1},                    // Arity below 2.
      {sym, 0, c, 0, W(DimOp::kFloorDiv)},          // Division by the constant 0.
      {c, int64_t{1} << 62, c, 4, W(DimOp::kMul)},  // Overflow.
  };
  for (const auto& words : bad) {
    auto r = DecodeDimExpr(words, kNames);
    EXPECT_FALSE(r.ok()) << testing::PrintToString(words);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    }
    int64_t vals[] = {1, 2, 3};
    if (words.size() != 5 || words[4] != W(DimOp::kFloorDiv)) {
      EXPECT_EQ(EvalDimProgram(words, vals), std::nullopt) << testing::PrintToString(words);
    }
  }
}

TEST(DimExprCodecTest, RandomProgramsNeverCrashTheDecoder) {
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<int64_t> word(-2, 11);
  int decoded = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<int64_t> words(1 + iter % 12);
    for (int64_t& w : words) w = word(rng);
    auto r = DecodeDimExpr(words, kNames);
    if (!r.ok()) continue;
    ++decoded;
    // Whatever decodes evaluates like the program that produced it.
    int64_t vals[] = {2, 3, 5};
    EXPECT_EQ(r->Eval(vals), EvalDimProgram(EncodeDimExpr(*r), vals));
  }
  EXPECT_GT(decoded, 0);
}

}  // namespace
}  // namespace cuvil
