// A request while the scheduler owns it, and a finished one waiting for delivery.
#ifndef CUVIL_SCHEDULER_QUEUED_REQUEST_H_
#define CUVIL_SCHEDULER_QUEUED_REQUEST_H_

#include <cstdint>
#include <memory>

#include "cuvil/scheduler/inference_request.h"

namespace cuvil {

// Thread-compatible.
struct QueuedRequest {
  std::unique_ptr<InferenceRequest> request;
  int64_t rows = 1;
  Clock::time_point enqueued;  // Scheduler clock, not request->arrival: tests fake it.
  Clock::time_point timeout_at = Clock::time_point::max();  // Queue policy timeout.
  uint32_t level = 0;                                       // 0 is the highest priority.
};

// Thread-compatible.
struct Completion {
  std::unique_ptr<InferenceRequest> request;
  InferenceResponse response;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_QUEUED_REQUEST_H_
