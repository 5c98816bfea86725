// Priority levels with Triton's queue policies, and the dynamic batcher's choice of the next
// batch from their front.
#ifndef CUVIL_SCHEDULER_REQUEST_QUEUE_H_
#define CUVIL_SCHEDULER_REQUEST_QUEUE_H_

#include <deque>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cuvil/scheduler/scheduler.h"
#include "model_layout.h"
#include "queued_request.h"

namespace cuvil {

// Thread-compatible: the scheduler guards it with its mutex.
class RequestQueue {
 public:
  // `options` must have been validated (ValidateQueueOptions).
  RequestQueue(const SchedulerOptions& options, const ModelLayout* layout);

  static absl::Status ValidateOptions(const SchedulerOptions& options);

  // Files `r` under its priority level and sets its timeout. Unavailable when the level is
  // full; `r` is left untouched then.
  absl::Status Enqueue(QueuedRequest& r);
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }

  struct Decision {
    size_t taken = 0;                                      // Requests moved into the batch.
    Clock::time_point wake_at = Clock::time_point::max();  // When nothing was taken.
  };
  // Chooses the next batch at `now`, moving it into `batch` (cleared first). Requests whose
  // queue timeout (REJECT) or client deadline passed move to `dropped`. `flush` executes what
  // is there instead of waiting for the batch to fill (draining).
  Decision NextBatch(Clock::time_point now, bool flush, std::vector<QueuedRequest>* batch,
                     std::vector<Completion>* dropped);
  // Moves every queued request out, highest priority level first, oldest first within one.
  std::vector<QueuedRequest> TakeAll();

 private:
  struct Level {
    QueuePolicy policy;
    std::deque<QueuedRequest> fresh;
    std::deque<QueuedRequest> delayed;  // Timed out under DELAY: after every fresh one.
    size_t size() const { return fresh.size() + delayed.size(); }
  };

  // Moves the `chosen` requests (queue and index, in service order) into `batch`.
  void Take(const std::vector<std::pair<std::deque<QueuedRequest>*, size_t>>& chosen,
            std::vector<QueuedRequest>* batch);

  // Requests of other shape classes one batch decision passes over at most (bounds its walk).
  static constexpr size_t kMaxPassedOver = 256;

  const ModelLayout* layout_;
  bool dynamic_;
  int64_t max_rows_;
  std::vector<int64_t> preferred_;  // Sorted ascending.
  int64_t max_preferred_ = 0;
  Clock::duration max_delay_;
  uint32_t default_level_;  // 0-based.
  std::vector<Level> levels_;
  size_t size_ = 0;
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_REQUEST_QUEUE_H_
