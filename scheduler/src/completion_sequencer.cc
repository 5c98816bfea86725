#include "completion_sequencer.h"

namespace cuvil {

void DeliverCompletion(Completion& completion) {
  InferenceRequest& request = *completion.request;
  if (request.on_complete) request.on_complete(std::move(completion.response));
}

void CompletionSequencer::Deliver(uint64_t ticket, std::vector<Completion>& completions) {
  std::vector<Completion> batch;
  {
    absl::MutexLock l(&mu_);
    ready_[ticket].swap(completions);
    if (delivering_) return;  // The delivering thread will pick it up.
    delivering_ = true;
  }
  while (true) {
    {
      absl::MutexLock l(&mu_);
      auto it = ready_.find(next_);
      if (it == ready_.end()) {
        delivering_ = false;
        return;
      }
      batch.swap(it->second);
      ready_.erase(it);
      ++next_;
    }
    for (Completion& c : batch) DeliverCompletion(c);
    batch.clear();
  }
}

}  // namespace cuvil
