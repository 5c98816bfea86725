#include "cuvil/runtime/symbol_binding.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

DimExpr U(std::optional<DimExpr> e) {
  EXPECT_TRUE(e.has_value());
  return e.value_or(DimExpr(-999999));
}

const DimExpr kB = DimExpr::Symbol(0, "batch");
const DimExpr kS = DimExpr::Symbol(1, "seq");
const DimExpr kH = DimExpr::Symbol(2, "H");
const DimExpr kW = DimExpr::Symbol(3, "W");

std::string Error(const absl::StatusOr<std::vector<int64_t>>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? "" : std::string(r.status().message());
}

TEST(SymbolBindingTest, BindsEverySymbolFromTheInputs) {
  std::vector<TensorDims> sig = {{"ids", {kB, kS}}, {"image", {kB, 3, kH, kW}}};
  auto v = BindSymbols(sig, {{2, 7}, {2, 3, 32, 48}}, 4);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<int64_t>{2, 7, 32, 48}));
}

TEST(SymbolBindingTest, SolvesLinearDimsAndChecksTheRest) {
  // mask [batch, seq + 1] and a flattened [batch * seq, 4] solve once batch and seq are known.
  std::vector<TensorDims> sig = {{"flat", {U(DimMul(kB, kS)), 4}},
                                 {"mask", {kB, U(DimAdd(kS, 1))}},
                                 {"pairs", {U(DimMul(kS, 2))}}};
  auto v = BindSymbols(sig, {{15, 4}, {3, 6}, {10}}, 2);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, (std::vector<int64_t>{3, 5}));
  // batch * seq disagrees with batch and seq.
  EXPECT_NE(Error(BindSymbols(sig, {{16, 4}, {3, 6}, {10}}, 2)).find("input 'flat' dim 0 is 16"),
            std::string::npos);
}

TEST(SymbolBindingTest, ViolationsNameTheTensorAndDim) {
  std::vector<TensorDims> sig = {{"a", {kB, kS}}, {"b", {kB, kS}}};
  std::string e = Error(BindSymbols(sig, {{2, 7}, {2, 8}}, 2));
  EXPECT_NE(e.find("input 'b' dim 1 is 8"), std::string::npos) << e;
  EXPECT_NE(e.find("seq = 7"), std::string::npos) << e;
  // An odd size where the model needs an even one.
  std::vector<TensorDims> even = {{"img", {U(DimMul(kH, 2))}}};
  e = Error(BindSymbols(even, {{7}}, 3));
  EXPECT_NE(e.find("input 'img' dim 0 is 7"), std::string::npos) << e;
  EXPECT_NE(e.find("H"), std::string::npos) << e;
  // A static dim.
  std::vector<TensorDims> rgb = {{"image", {kB, 3}}};
  e = Error(BindSymbols(rgb, {{1, 4}}, 1));
  EXPECT_NE(e.find("input 'image' dim 1 is 4; the model expects 3"), std::string::npos) << e;
  // Rank and sign.
  EXPECT_NE(Error(BindSymbols(rgb, {{1}}, 1)).find("rank 1"), std::string::npos);
  EXPECT_NE(Error(BindSymbols(rgb, {{-1, 3}}, 1)).find("negative"), std::string::npos);
  // seq + 4 cannot be 2 for seq >= 0.
  std::vector<TensorDims> pad = {{"x", {U(DimAdd(kS, 4))}}};
  EXPECT_NE(Error(BindSymbols(pad, {{2}}, 2)).find("input 'x' dim 0 is 2"), std::string::npos);
}

TEST(SymbolBindingTest, UndeterminedSymbolsAreReported) {
  // H only appears inside a floor division.
  DimExpr h = DimExpr::Symbol(0, "H");
  std::vector<TensorDims> sig = {{"x", {U(DimFloorDiv(h, 2))}}};
  std::string e = Error(BindSymbols(sig, {{4}}, 1));
  EXPECT_NE(e.find("H cannot be determined"), std::string::npos) << e;
  // A floor of a symbol that another input binds is checked, not solved.
  std::vector<TensorDims> both = {{"x", {h}}, {"half", {U(DimFloorDiv(h, 2))}}};
  auto v = BindSymbols(both, {{9}, {4}}, 1);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ((*v)[0], 9);
  EXPECT_NE(Error(BindSymbols(both, {{9}, {5}}, 1)).find("input 'half' dim 0 is 5"),
            std::string::npos);
  // A symbol in no input.
  std::vector<TensorDims> none = {{"x", {kB}}};
  EXPECT_NE(Error(BindSymbols(none, {{3}}, 2)).find("symbol 1"), std::string::npos);
}

}  // namespace
}  // namespace cuvil
