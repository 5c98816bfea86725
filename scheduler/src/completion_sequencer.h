// Delivers completions in ticket order for preserve_ordering, calling on_complete outside any
// scheduler lock.
#ifndef CUVIL_SCHEDULER_COMPLETION_SEQUENCER_H_
#define CUVIL_SCHEDULER_COMPLETION_SEQUENCER_H_

#include <cstdint>
#include <map>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "queued_request.h"

namespace cuvil {

// Runs `request->on_complete(response)` once.
void DeliverCompletion(Completion& completion);

// Thread-safe. Tickets 0, 1, 2, ... are handed out in the order batches leave the queue; every
// ticket must be delivered exactly once (an empty list is fine).
class CompletionSequencer {
 public:
  // Takes `completions` (leaving it empty). Whichever thread holds the next ticket in line
  // delivers it and everything queued behind it, one thread at a time, so callbacks run in
  // ticket order.
  void Deliver(uint64_t ticket, std::vector<Completion>& completions);

 private:
  absl::Mutex mu_;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  bool delivering_ ABSL_GUARDED_BY(mu_) = false;
  std::map<uint64_t, std::vector<Completion>> ready_ ABSL_GUARDED_BY(mu_);
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_COMPLETION_SEQUENCER_H_
