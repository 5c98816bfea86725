#include "cuvil/runtime/tensor_size.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil {

bool CheckedMul(int64_t a, int64_t b, int64_t* product) {
  if (a < 0 || b < 0) return false;
  return !__builtin_mul_overflow(a, b, product);
}

bool CheckedAdd(int64_t a, int64_t b, int64_t* sum) {
  if (a < 0 || b < 0) return false;
  return !__builtin_add_overflow(a, b, sum);
}

absl::StatusOr<int64_t> CheckedElementCount(absl::Span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] has a negative dimension"));
    }
    if (!CheckedMul(n, d, &n)) {
      return absl::InvalidArgumentError(
          absl::StrCat("shape [", absl::StrJoin(shape, ","), "] has too many elements"));
    }
  }
  return n;
}

absl::StatusOr<uint64_t> CheckedTensorBytes(DType dtype, absl::Span<const int64_t> shape) {
  const int size = DTypeSize(dtype);
  if (size <= 0) return absl::InvalidArgumentError("data type has no element size");
  auto elements = CheckedElementCount(shape);
  if (!elements.ok()) return elements.status();
  int64_t bytes = 0;
  if (!CheckedMul(*elements, size, &bytes) || static_cast<uint64_t>(bytes) > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("shape [", absl::StrJoin(shape, ","),
                                                   "] is larger than the ", kMaxTensorBytes,
                                                   "-byte tensor limit"));
  }
  return static_cast<uint64_t>(bytes);
}

}  // namespace cuvil
