#include "model_layout.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/scheduler/request_validation.h"

namespace cuvil {

ModelLayout::ModelLayout(const Executable& executable, int64_t max_batch_size)
    : executable_(executable),
      max_batch_size_(max_batch_size),
      max_rows_(max_batch_size > 0 ? max_batch_size : 1) {
  const auto& inputs = executable.inputs();
  for (size_t i = 0; i < inputs.size(); ++i) {
    bool batched = max_batch_size > 0 && inputs[i].batched;
    input_batched_.push_back(batched);
    if (!batched) {
      unbatched_inputs_.push_back(i);
    } else if (inputs[i].RowBytes() < 0) {
      varying_inputs_.push_back(i);
    }
  }
  for (const TensorSpec& out : executable.outputs()) {
    output_batched_.push_back(max_batch_size > 0 && out.batched);
    for (int64_t d : out.dims) outputs_vary_ |= d < 0;
    fixed_output_dims_.push_back(out.dims);
  }
}

absl::StatusOr<int64_t> ModelLayout::Validate(const InferenceRequest& request) const {
  const auto& specs = executable_.inputs();
  if (request.inputs.size() != specs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected ", specs.size(), " inputs, got ", request.inputs.size()));
  }
  if (!request.output_requested.empty() &&
      request.output_requested.size() != executable_.outputs().size()) {
    return absl::InvalidArgumentError(absl::StrCat("output_requested has ",
                                                   request.output_requested.size(), " entries for ",
                                                   executable_.outputs().size(), " outputs"));
  }
  int64_t rows = 1;
  if (max_batch_size_ > 0) {
    rows = request.batch_size;
    if (rows < 1 || rows > max_batch_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request batch size ", rows, " is outside [1, max_batch_size ", max_batch_size_, "]"));
    }
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const InputView& view = request.inputs[i];
    auto batch = ValidateInputTensor(specs[i], input_batched_[i], max_batch_size_, view.shape,
                                     view.byte_size);
    if (!batch.ok()) return batch.status();
    if (input_batched_[i] && *batch != rows) {
      return absl::InvalidArgumentError(absl::StrCat("input '", specs[i].name, "': batch size ",
                                                     *batch, " differs from the request's ", rows));
    }
    if (view.byte_size > 0 && view.data == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("input '", specs[i].name, "' has no data"));
    }
  }
  return rows;
}

bool ModelLayout::CanShareBatch(const InferenceRequest& a, const InferenceRequest& b) const {
  if (executable_.outputs_sized_by_run()) return false;
  for (size_t i : varying_inputs_) {
    if (a.inputs[i].shape != b.inputs[i].shape) {
      // Dim 0 is each request's own row count; only the rest must agree.
      const auto& sa = a.inputs[i].shape;
      const auto& sb = b.inputs[i].shape;
      if (!std::equal(sa.begin() + 1, sa.end(), sb.begin() + 1, sb.end())) return false;
    }
  }
  for (size_t i : unbatched_inputs_) {
    const InputView& va = a.inputs[i];
    const InputView& vb = b.inputs[i];
    if (va.shape != vb.shape || va.byte_size != vb.byte_size) return false;
    if (va.data != vb.data && std::memcmp(va.data, vb.data, va.byte_size) != 0) return false;
  }
  return true;
}

absl::StatusOr<std::vector<std::vector<int64_t>>> ModelLayout::VaryingOutputDims(
    const InferenceRequest& request) const {
  std::vector<std::vector<int64_t>> input_dims;
  input_dims.reserve(request.inputs.size());
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const auto& shape = request.inputs[i].shape;
    input_dims.emplace_back(shape.begin() + (input_batched_[i] ? 1 : 0), shape.end());
  }
  auto dims = executable_.OutputDims(input_dims);
  if (!dims.ok()) return dims.status();
  if (dims->size() != fixed_output_dims_.size()) {
    return absl::InternalError("executable returned dims for the wrong number of outputs");
  }
  for (size_t o = 0; o < dims->size(); ++o) {
    for (int64_t d : (*dims)[o]) {
      if (d < 0) {
        return absl::InternalError(absl::StrCat("executable left output '",
                                                executable_.outputs()[o].name, "' unresolved"));
      }
    }
  }
  return dims;
}

}  // namespace cuvil
