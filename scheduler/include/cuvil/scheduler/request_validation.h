// The one check of a request's tensors against a model version's signature. Every front end (gRPC,
// HTTP, warm-up) and the scheduler call it, so the rules and their messages cannot drift apart.
#ifndef CUVIL_SCHEDULER_REQUEST_VALIDATION_H_
#define CUVIL_SCHEDULER_REQUEST_VALIDATION_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "cuvil/scheduler/executable.h"

namespace cuvil {

// Checks one input tensor against `spec`: rank, every fixed dim, no negative dim, the batch dim
// (shape[0] when `batched`) within 1..max_batch_size, and `byte_size` equal to the shape's
// overflow-checked size. Returns the batch (1 when not batched). InvalidArgument names the input
// and says what was expected and what arrived.
absl::StatusOr<int64_t> ValidateInputTensor(const TensorSpec& spec, bool batched,
                                            int64_t max_batch_size, absl::Span<const int64_t> shape,
                                            uint64_t byte_size);

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_REQUEST_VALIDATION_H_
