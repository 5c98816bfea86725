#include "cuvil/scheduler/executable.h"

#include "absl/strings/str_cat.h"

namespace cuvil {

int64_t TensorSpec::RowBytes() const {
  int64_t n = DTypeSize(dtype);
  for (int64_t d : dims) {
    if (d < 0) return -1;
    n *= d;
  }
  return n;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> Executable::OutputDims(
    const std::vector<std::vector<int64_t>>& input_dims) const {
  std::vector<std::vector<int64_t>> dims;
  for (const TensorSpec& out : outputs()) {
    for (int64_t d : out.dims) {
      if (d < 0) {
        return absl::UnimplementedError(
            absl::StrCat("output '", out.name, "' has a varying dim the executable cannot infer"));
      }
    }
    dims.push_back(out.dims);
  }
  return dims;
}

}  // namespace cuvil
