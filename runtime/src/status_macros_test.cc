// CUVIL_RETURN_IF_ERROR and CUVIL_ASSIGN_OR_RETURN: errors pass through unchanged, values move
// into their target, and each expression is evaluated once.
#include "cuvil/runtime/status_macros.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

absl::Status Fails() { return absl::DataLossError("torn"); }
absl::StatusOr<int> Value(int v) { return v; }
absl::StatusOr<int> NoValue() { return absl::NotFoundError("none"); }

absl::Status ReturnIfError(const absl::Status& s, int* reached) {
  CUVIL_RETURN_IF_ERROR(s);
  ++*reached;
  return absl::OkStatus();
}

absl::StatusOr<int> ReturnIfErrorOfStatusOr(absl::StatusOr<int> s) {
  CUVIL_RETURN_IF_ERROR(s);
  return *s + 1;
}

absl::StatusOr<int> Sum(absl::StatusOr<int> a, absl::StatusOr<int> b) {
  CUVIL_ASSIGN_OR_RETURN(int x, a);
  CUVIL_ASSIGN_OR_RETURN(const int y, b);  // Two on one function: distinct temporaries.
  return x + y;
}

absl::Status AssignExisting(int* out) {
  CUVIL_ASSIGN_OR_RETURN(*out, Value(7));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<int>> Boxed(int v) { return std::make_unique<int>(v); }

absl::StatusOr<int> MoveOnly() {
  CUVIL_ASSIGN_OR_RETURN(std::unique_ptr<int> p, Boxed(5));
  return *p;
}

TEST(StatusMacrosTest, ReturnIfErrorPassesTheErrorThroughUnchanged) {
  int reached = 0;
  absl::Status s = ReturnIfError(Fails(), &reached);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "torn");
  EXPECT_EQ(reached, 0);
  EXPECT_TRUE(ReturnIfError(absl::OkStatus(), &reached).ok());
  EXPECT_EQ(reached, 1);
}

TEST(StatusMacrosTest, ReturnIfErrorAcceptsAStatusOr) {
  EXPECT_EQ(*ReturnIfErrorOfStatusOr(Value(1)), 2);
  EXPECT_EQ(ReturnIfErrorOfStatusOr(NoValue()).status().code(), absl::StatusCode::kNotFound);
}

TEST(StatusMacrosTest, ReturnIfErrorIsOneStatement) {
  auto f = [](bool check) -> absl::Status {
    if (check)
      CUVIL_RETURN_IF_ERROR(Fails());
    else
      return absl::OkStatus();
    return absl::InternalError("unreachable");
  };
  EXPECT_EQ(f(true).code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(f(false).ok());
}

TEST(StatusMacrosTest, AssignOrReturnDeclaresAssignsAndReturns) {
  EXPECT_EQ(*Sum(Value(2), Value(3)), 5);
  absl::StatusOr<int> first = Sum(NoValue(), Value(3));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(first.status().message(), "none");
  EXPECT_EQ(Sum(Value(2), NoValue()).status().code(), absl::StatusCode::kNotFound);
  int out = 0;
  EXPECT_TRUE(AssignExisting(&out).ok());
  EXPECT_EQ(out, 7);
  EXPECT_EQ(*MoveOnly(), 5);
}

TEST(StatusMacrosTest, EachExpressionIsEvaluatedOnce) {
  int calls = 0;
  auto counted = [&]() -> absl::StatusOr<int> {
    ++calls;
    return absl::UnavailableError("busy");
  };
  auto f = [&]() -> absl::Status {
    CUVIL_RETURN_IF_ERROR(counted());
    return absl::OkStatus();
  };
  auto g = [&]() -> absl::StatusOr<int> {
    CUVIL_ASSIGN_OR_RETURN(int v, counted());
    return v;
  };
  EXPECT_EQ(f().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(g().status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace cuvil
