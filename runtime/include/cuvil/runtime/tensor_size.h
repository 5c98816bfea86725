// Overflow-checked tensor size arithmetic: every size computed from untrusted input (a model, a
// config, a request) goes through these helpers instead of a plain product.
#ifndef CUVIL_RUNTIME_TENSOR_SIZE_H_
#define CUVIL_RUNTIME_TENSOR_SIZE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/runtime/dtype.h"

namespace cuvil {

// The largest single tensor Cuvil accepts (1 TiB): far above any real model or request, far below
// the point where byte counts wrap in 64-bit arithmetic.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;

// a * b, or false when the product overflows int64 or either operand is negative.
bool CheckedMul(int64_t a, int64_t b, int64_t* product);
// a + b, or false when the sum overflows int64 or either operand is negative.
bool CheckedAdd(int64_t a, int64_t b, int64_t* sum);

// Number of elements of `shape`. InvalidArgument when a dim is negative or the product overflows.
absl::StatusOr<int64_t> CheckedElementCount(absl::Span<const int64_t> shape);

// Bytes of a `dtype` tensor shaped `shape`. InvalidArgument when a dim is negative, the dtype has
// no size, or the size exceeds kMaxTensorBytes (which also rules out wrap-around).
absl::StatusOr<uint64_t> CheckedTensorBytes(DType dtype, absl::Span<const int64_t> shape);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_TENSOR_SIZE_H_
