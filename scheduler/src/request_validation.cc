#include "cuvil/scheduler/request_validation.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/runtime/tensor_size.h"

namespace cuvil {
namespace {

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

}  // namespace

absl::StatusOr<int64_t> ValidateInputTensor(const TensorSpec& spec, bool batched,
                                            int64_t max_batch_size, absl::Span<const int64_t> shape,
                                            uint64_t byte_size) {
  const size_t lead = batched ? 1 : 0;
  bool ok = shape.size() == spec.dims.size() + lead;
  for (size_t d = 0; ok && d < shape.size(); ++d) {
    ok = shape[d] >= 0 && (d < lead || spec.dims[d - lead] < 0 || spec.dims[d - lead] == shape[d]);
  }
  if (!ok) {
    std::vector<int64_t> expected = spec.dims;
    if (batched) expected.insert(expected.begin(), -1);
    return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "': expected shape ",
                                                   ShapeString(expected), ", got ",
                                                   ShapeString(shape)));
  }
  int64_t batch = 1;
  if (batched) {
    batch = shape[0];
    if (batch < 1 || batch > max_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "': batch size ", batch,
                                                     " is outside 1..", max_batch_size,
                                                     " (max_batch_size)"));
    }
  }
  auto want = CheckedTensorBytes(spec.dtype, shape);
  if (!want.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", spec.name, "': ", want.status().message()));
  }
  if (byte_size != *want) {
    return absl::InvalidArgumentError(absl::StrCat("input '", spec.name, "': shape ",
                                                   ShapeString(shape), " needs ", *want,
                                                   " bytes, got ", byte_size));
  }
  return batch;
}

}  // namespace cuvil
