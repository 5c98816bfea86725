// Binding a model's free dimensions from the shapes of one request's inputs.
//
// A compiled model's inputs have DimExpr dims (e.g. ids [batch, seq], image [batch, 3, H, W]).
// BindSymbols solves for every symbol from the request's concrete shapes — a dim that is
// c*x + (terms in known symbols) determines x — and then checks every dim against the binding, so
// a request whose shapes violate the model's constraints (a height the graph cannot split, two
// inputs disagreeing on seq) fails with an error naming the tensor and the dim.
#ifndef CUVIL_RUNTIME_SYMBOL_BINDING_H_
#define CUVIL_RUNTIME_SYMBOL_BINDING_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dim_expr.h"

namespace cuvil {

// One input's expected dims, with its name for error messages.
struct TensorDims {
  std::string name;
  std::vector<DimExpr> dims;
};

// Returns values[id] for symbols 0..symbol_count-1, given shapes[i] for signature[i].
// InvalidArgument naming the tensor and dim when a rank differs, a dim is negative, a dim does not
// match the binding (or no non-negative symbol value can produce it), or a symbol cannot be
// determined from the inputs (it appears only inside divisions, min/max or products of unknowns).
absl::StatusOr<std::vector<int64_t>> BindSymbols(absl::Span<const TensorDims> signature,
                                                 absl::Span<const std::vector<int64_t>> shapes,
                                                 int32_t symbol_count);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_SYMBOL_BINDING_H_
