// A flat postfix encoding of DimExprs.
//
// The encoding is a sequence of int64 words, portable between processes (cache entries and
// snapshots store it) and cheap to evaluate without rebuilding the expression: the memory plan's
// sizes and offsets are evaluated this way once per execution. Words:
//   kConst v | kSymbol id | kAdd | kMul | kPow p | kFloorDiv | kTruncDiv | kMin n | kMax n
// Binary operators pop two values and push one; kMin/kMax pop n >= 2; kPow raises the top value to
// the power p in [2, kMaxDimExprPower]. A program leaves exactly one value.
#ifndef CUVIL_RUNTIME_DIM_EXPR_CODEC_H_
#define CUVIL_RUNTIME_DIM_EXPR_CODEC_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dim_expr.h"

namespace cuvil {

// Operation words of the encoding (stable: stored in cache entries and snapshots).
enum class DimOp : int64_t {
  kConst = 1,
  kSymbol = 2,
  kAdd = 3,
  kMul = 4,
  kPow = 5,
  kFloorDiv = 6,
  kTruncDiv = 7,
  kMin = 8,
  kMax = 9,
};

// Encodes e; DecodeDimExpr of the result gives back an expression == e.
std::vector<int64_t> EncodeDimExpr(const DimExpr& e);

// Rebuilds (and re-simplifies) an encoded expression; symbol id i is named symbol_names[i].
// InvalidArgument for a malformed program (unknown word, stack underflow or leftovers, a symbol id
// without a name, a power or operand count out of range, a division by the constant 0, or a result
// over the size caps), so untrusted bytes from a cache file cannot produce a bad expression.
absl::StatusOr<DimExpr> DecodeDimExpr(absl::Span<const int64_t> words,
                                      absl::Span<const std::string> symbol_names);

// Evaluates an encoded expression for the given symbol values without rebuilding it, with the
// semantics of DimExpr::Eval (nullopt on overflow, division by zero or a missing symbol value) and
// also nullopt for a malformed program.
std::optional<int64_t> EvalDimProgram(absl::Span<const int64_t> words,
                                      absl::Span<const int64_t> values);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_DIM_EXPR_CODEC_H_
