#include "request_queue.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "clock.h"

namespace cuvil {

namespace {

// Timeouts beyond this (~35 years) mean "none" and keep time_point arithmetic in range.
constexpr uint64_t kMaxTimeoutUs = uint64_t{1} << 50;

}  // namespace

absl::Status RequestQueue::ValidateOptions(const SchedulerOptions& options) {
  if (options.max_batch_size < 0) {
    return absl::InvalidArgumentError("max_batch_size must not be negative");
  }
  if (!options.dynamic_batching) return absl::OkStatus();
  const DynamicBatchingOptions& b = options.batching;
  int64_t max_rows = std::max<int64_t>(options.max_batch_size, 1);
  for (int32_t size : b.preferred_batch_sizes) {
    if (size < 1 || size > max_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("preferred batch size ", size, " is outside [1, ", max_rows, "]"));
    }
  }
  if (b.priority_levels > 0 &&
      (b.default_priority_level < 1 || b.default_priority_level > b.priority_levels)) {
    return absl::InvalidArgumentError(absl::StrCat("default_priority_level ",
                                                   b.default_priority_level, " is outside [1, ",
                                                   b.priority_levels, "]"));
  }
  for (const auto& [level, policy] : b.priority_queue_policy) {
    if (level < 1 || level > std::max<uint32_t>(b.priority_levels, 1)) {
      return absl::InvalidArgumentError(absl::StrCat("priority_queue_policy names level ", level,
                                                     " of ", b.priority_levels,
                                                     " priority levels"));
    }
  }
  return absl::OkStatus();
}

RequestQueue::RequestQueue(const SchedulerOptions& options, const ModelLayout* layout)
    : layout_(layout),
      dynamic_(options.dynamic_batching),
      max_rows_(layout->max_rows()),
      max_delay_(std::chrono::microseconds(0)),
      default_level_(0) {
  if (!dynamic_) {
    // Without a dynamic_batching block there are no priorities or queue policies.
    levels_ = std::vector<Level>(1);  // Never resized: deque is not nothrow-movable.
    return;
  }
  const DynamicBatchingOptions& b = options.batching;
  for (int32_t size : b.preferred_batch_sizes) preferred_.push_back(size);
  std::sort(preferred_.begin(), preferred_.end());
  if (!preferred_.empty()) max_preferred_ = preferred_.back();
  max_delay_ = std::chrono::microseconds(std::min(b.max_queue_delay_us, kMaxTimeoutUs));
  uint32_t count = std::max<uint32_t>(b.priority_levels, 1);
  if (b.priority_levels > 0) default_level_ = b.default_priority_level - 1;
  levels_ = std::vector<Level>(count);
  for (uint32_t i = 0; i < count; ++i) {
    auto it = b.priority_queue_policy.find(i + 1);
    levels_[i].policy = it != b.priority_queue_policy.end() ? it->second : b.default_queue_policy;
  }
}

absl::Status RequestQueue::Enqueue(QueuedRequest& r) {
  uint32_t priority = r.request->priority;
  // As Triton: 0 or an unknown level means the default level.
  uint32_t level = (priority == 0 || priority > levels_.size()) ? default_level_ : priority - 1;
  Level& queue = levels_[level];
  const QueuePolicy& policy = queue.policy;
  if (policy.max_queue_size > 0 && queue.size() >= policy.max_queue_size) {
    return absl::UnavailableError(absl::StrCat("priority level ", level + 1,
                                               " queue is full (max_queue_size ",
                                               policy.max_queue_size, ")"));
  }
  uint64_t timeout_us = policy.default_timeout_us;
  // Overrides may shorten the timeout, never extend it (0 = no timeout counts as infinite).
  uint64_t requested = r.request->timeout_us;
  if (policy.allow_timeout_override && requested != 0 &&
      (timeout_us == 0 || requested < timeout_us)) {
    timeout_us = requested;
  }
  if (timeout_us != 0 && timeout_us < kMaxTimeoutUs) {
    r.timeout_at = r.enqueued + std::chrono::microseconds(timeout_us);
  }
  r.level = level;
  queue.fresh.push_back(std::move(r));
  ++size_;
  return absl::OkStatus();
}

RequestQueue::Decision RequestQueue::NextBatch(Clock::time_point now, bool flush,
                                               std::vector<QueuedRequest>* batch,
                                               std::vector<Completion>* dropped) {
  batch->clear();
  Decision decision;
  size_t count = 0;
  int64_t rows = 0;
  size_t best_count = 0;  // Requests making the largest preferred batch seen so far.
  bool send_now = false;  // The next request cannot join: the batch cannot grow.
  Clock::time_point oldest = Clock::time_point::max();
  const InferenceRequest* first = nullptr;
  // The requests joining the batch, in service order (queue and index; a queue's indices rise).
  std::vector<std::pair<std::deque<QueuedRequest>*, size_t>> chosen;
  size_t skipped = 0;  // Requests of another shape class passed over.

  auto drop = [&](std::deque<QueuedRequest>& q, size_t i, const char* why) {
    Completion c;
    c.request = std::move(q[i].request);
    c.response.status = absl::DeadlineExceededError(why);
    c.response.timings.queue_ns = NanosBetween(q[i].enqueued, now);
    dropped->push_back(std::move(c));
    q.erase(q.begin() + static_cast<ptrdiff_t>(i));
    --size_;
  };

  // Walks the queue in service order (levels by priority; fresh before delayed). A request whose
  // shapes cannot share the first one's batch (another sequence length or image size) is passed
  // over: its shape class waits for a batch it heads, and since the oldest request always heads
  // the next batch, no class starves. Otherwise the walk stops at the first request that cannot
  // join, so no request is overtaken by a later one of its class.
  for (Level& level : levels_) {
    for (int pass = 0; pass < 2 && !send_now; ++pass) {
      std::deque<QueuedRequest>& q = pass == 0 ? level.fresh : level.delayed;
      size_t i = 0;
      while (i < q.size()) {
        QueuedRequest& r = q[i];
        if (pass == 0 && r.timeout_at <= now) {
          if (level.policy.timeout_action == QueuePolicy::TimeoutAction::kReject) {
            drop(q, i, "request timed out in the scheduler queue");
          } else {
            level.delayed.push_back(std::move(r));
            q.erase(q.begin() + static_cast<ptrdiff_t>(i));
          }
          continue;
        }
        if (r.request->deadline <= now) {
          drop(q, i, "request deadline passed while queued");
          continue;
        }
        if (count > 0) {
          if (!dynamic_) {
            send_now = true;
            break;
          }
          if (!layout_->CanShareBatch(*first, *r.request)) {
            if (++skipped > kMaxPassedOver) {
              send_now = true;
              break;
            }
            ++i;
            continue;
          }
          // Beyond every preferred size: prefer what we have over a non-preferred larger batch.
          if (max_preferred_ > 0 && best_count == 0 && rows + r.rows > max_preferred_) {
            best_count = count;
          }
          if (rows + r.rows > max_rows_) {
            send_now = true;
            break;
          }
        } else {
          first = r.request.get();
        }
        rows += r.rows;
        ++count;
        chosen.emplace_back(&q, i);
        oldest = std::min(oldest, r.enqueued);
        if (std::binary_search(preferred_.begin(), preferred_.end(), rows)) best_count = count;
        ++i;
      }
    }
    if (send_now) break;
  }
  if (count == 0) return decision;

  bool delay_passed = flush || (max_delay_.count() > 0 && now - oldest >= max_delay_);
  if (best_count > 0 && !delay_passed) {
    count = best_count;
  } else if (!(send_now || rows >= max_rows_ || delay_passed || max_delay_.count() == 0)) {
    decision.wake_at = oldest + max_delay_;
    return decision;
  }
  chosen.resize(count);
  Take(chosen, batch);
  decision.taken = count;
  return decision;
}

void RequestQueue::Take(const std::vector<std::pair<std::deque<QueuedRequest>*, size_t>>& chosen,
                        std::vector<QueuedRequest>* batch) {
  for (const auto& [q, i] : chosen) batch->push_back(std::move((*q)[i]));
  // Backwards, so each erase leaves the indices still to erase in place.
  for (auto it = chosen.rbegin(); it != chosen.rend(); ++it) {
    it->first->erase(it->first->begin() + static_cast<ptrdiff_t>(it->second));
    --size_;
  }
}

std::vector<QueuedRequest> RequestQueue::TakeAll() {
  std::vector<QueuedRequest> all;
  all.reserve(size_);
  for (Level& level : levels_) {
    for (auto* q : {&level.fresh, &level.delayed}) {
      for (QueuedRequest& r : *q) all.push_back(std::move(r));
      q->clear();
    }
  }
  size_ = 0;
  return all;
}

}  // namespace cuvil
