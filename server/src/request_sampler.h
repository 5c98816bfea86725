// Private: a bounded sample of the requests a version served, kept as validation inputs for hot
// patches (docs/hot_patching.md): real traffic reaches code paths generated inputs miss.
#ifndef CUVIL_SERVER_SRC_REQUEST_SAMPLER_H_
#define CUVIL_SERVER_SRC_REQUEST_SAMPLER_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/runtime/host_tensor.h"
#include "cuvil/scheduler/executable.h"
#include "cuvil/scheduler/inference_request.h"

namespace cuvil {

struct RequestSamplerOptions {
  size_t capacity = 4;                  // Input sets kept (the newest); 0: sample nothing.
  size_t max_bytes = size_t{16} << 20;  // Bytes of all kept sets together.
  uint64_t every = 16;                  // Keeps request 1, 1 + every, 1 + 2 * every, ...
};

// Thread-safe. Record is on the request path: a relaxed atomic increment for requests it does
// not keep, one copy of the inputs for those it does.
class RequestSampler {
 public:
  // `inputs`: the executable's inputs (request order); `signature`: the names of the compiled
  // model's inputs in its own order, which Recent's sets follow.
  RequestSampler(const std::vector<TensorSpec>& inputs, const std::vector<std::string>& signature,
                 RequestSamplerOptions options);

  // Keeps a copy of `request`'s inputs when its turn has come and it fits the byte bound (a
  // request larger than max_bytes / capacity is never kept; neither are string inputs).
  void Record(const InferenceRequest& request);

  // The kept sets, oldest first, each in the compiled model's input order.
  std::vector<std::vector<HostTensor>> Recent() const;

 private:
  RequestSamplerOptions options_;
  std::vector<DType> dtypes_;         // Request order.
  std::vector<size_t> to_signature_;  // Request input i goes to signature slot to_signature_[i].
  bool usable_ = false;               // Every input maps to one slot, no strings.
  std::atomic<uint64_t> seen_{0};
  mutable absl::Mutex mu_;
  std::deque<std::vector<HostTensor>> kept_ ABSL_GUARDED_BY(mu_);
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_REQUEST_SAMPLER_H_
