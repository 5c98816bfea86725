#include "request_sampler.h"

#include <cstring>
#include <string>
#include <utility>

namespace cuvil {

RequestSampler::RequestSampler(const std::vector<TensorSpec>& inputs,
                               const std::vector<std::string>& signature,
                               RequestSamplerOptions options)
    : options_(options) {
  usable_ = options_.capacity > 0 && inputs.size() == signature.size() && !inputs.empty();
  std::vector<bool> taken(signature.size(), false);
  for (const TensorSpec& spec : inputs) {
    dtypes_.push_back(spec.dtype);
    size_t slot = signature.size();
    for (size_t j = 0; j < signature.size(); ++j) {
      if (signature[j] == spec.name && !taken[j]) slot = j;
    }
    if (slot == signature.size() || spec.dtype == DType::kString || DTypeSize(spec.dtype) == 0) {
      usable_ = false;
      slot = 0;
    } else {
      taken[slot] = true;
    }
    to_signature_.push_back(slot);
  }
}

void RequestSampler::Record(const InferenceRequest& request) {
  if (!usable_) return;
  const uint64_t n = seen_.fetch_add(1, std::memory_order_relaxed);
  if (n % options_.every != 0 || request.inputs.size() != dtypes_.size()) return;
  size_t bytes = 0;
  for (const InputView& in : request.inputs) bytes += in.byte_size;
  if (bytes > options_.max_bytes / options_.capacity) return;
  std::vector<HostTensor> set(dtypes_.size());
  for (size_t i = 0; i < request.inputs.size(); ++i) {
    const InputView& in = request.inputs[i];
    HostTensor t(dtypes_[i], in.shape);
    if (t.byte_size() != in.byte_size) return;  // Not what the executable validated: skip.
    if (in.byte_size > 0) std::memcpy(t.data(), in.data, in.byte_size);
    set[to_signature_[i]] = std::move(t);
  }
  absl::MutexLock lock(&mu_);
  kept_.push_back(std::move(set));
  kept_bytes_ += bytes;
  while (kept_.size() > options_.capacity) {
    for (const HostTensor& t : kept_.front()) kept_bytes_ -= t.byte_size();
    kept_.pop_front();
  }
}

std::vector<std::vector<HostTensor>> RequestSampler::Recent() const {
  absl::MutexLock lock(&mu_);
  return {kept_.begin(), kept_.end()};
}

}  // namespace cuvil
