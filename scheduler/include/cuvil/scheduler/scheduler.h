// Per model-version request scheduling: queues, dynamic batching and execution instances.
#ifndef CUVIL_SCHEDULER_SCHEDULER_H_
#define CUVIL_SCHEDULER_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cuvil/scheduler/executable.h"
#include "cuvil/scheduler/inference_request.h"

namespace cuvil {

struct QueuePolicy {
  enum class TimeoutAction { kReject, kDelay };
  TimeoutAction timeout_action = TimeoutAction::kReject;
  uint64_t default_timeout_us = 0;  // 0: no timeout.
  bool allow_timeout_override = false;
  uint32_t max_queue_size = 0;  // 0: unbounded.
};

// Triton's dynamic_batching block, as plain values.
struct DynamicBatchingOptions {
  std::vector<int32_t> preferred_batch_sizes;
  uint64_t max_queue_delay_us = 0;
  bool preserve_ordering = false;
  uint32_t priority_levels = 0;
  uint32_t default_priority_level = 0;
  QueuePolicy default_queue_policy;
  std::map<uint32_t, QueuePolicy> priority_queue_policy;
  // Cuvil extension: when every instance is idle and at least as many requests are queued as
  // the previous execution served, run them at once instead of waiting max_queue_delay for
  // company that is not coming (a lone client; a closed loop whose clients have all sent).
  // Otherwise batches form as in Triton.
  bool skip_delay_when_idle = false;
};

struct SchedulerOptions {
  int64_t max_batch_size = 0;  // 0: the model has no batch dimension.
  bool dynamic_batching = false;
  DynamicBatchingOptions batching;
  int instance_count = 1;    // Execution contexts (each with its own arena and worker).
  int intra_op_threads = 1;  // Threads one execution may use (see cuvil/runtime/parallel.h).
  // Cuvil extension: a request that arrives while an instance is idle and nothing is queued
  // (and, with dynamic batching, a worker would take it alone at once anyway) runs on the
  // submitting thread, sparing the hand-off to a worker and back (two thread wake-ups, which
  // cost more than a small model's compute). Only while the model's recent executions took at
  // most this long, so a front-end thread is never held for long; 0 turns it off. Not with
  // preserve_ordering.
  uint64_t inline_execution_max_us = 0;
  // Observers of each execution (metrics, tracing); called on worker threads, must not block.
  std::function<void(int64_t rows)> on_batch_start;
  std::function<void(int64_t rows, uint64_t duration_ns, bool ok)> on_batch_done;
  // Observer of admission refusals, on the submitting thread (must not block): `queue_full`
  // when the request's priority level was at max_queue_size, false when the scheduler drains.
  std::function<void(bool queue_full)> on_reject;
};

// Counters a scheduler keeps; read with Scheduler::Stats(). Durations in nanoseconds.
struct DurationStat {
  uint64_t count = 0;
  uint64_t ns = 0;
};
struct BatchStat {
  DurationStat compute_input, compute_infer, compute_output;
};
struct SchedulerStats {
  uint64_t inference_count = 0;  // Rows served successfully.
  uint64_t execution_count = 0;
  uint64_t last_inference_ms = 0;  // Wall clock, ms since the epoch.
  DurationStat success, fail, queue, compute_input, compute_infer, compute_output;
  std::map<int64_t, BatchStat> batch_stats;  // Keyed by executed batch size.
  // Requests refused at admission (also counted in `fail`): queue full, or draining.
  uint64_t rejected_queue_full = 0;
  uint64_t rejected_draining = 0;
  uint64_t pending = 0;
};

// Thread-safe.
class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Queues `request`; its on_complete runs exactly once, possibly inline: on rejection, or after
  // an inline execution (see SchedulerOptions::inline_execution_max_us). The caller must not hold
  // a lock its on_complete takes.
  virtual void Submit(std::unique_ptr<InferenceRequest> request) = 0;
  // Submit, except that a scheduler already draining hands `request` back (its on_complete not
  // run) instead of rejecting it, so the caller can route it elsewhere; null otherwise.
  virtual std::unique_ptr<InferenceRequest> SubmitUnlessDraining(
      std::unique_ptr<InferenceRequest> request) = 0;
  // Stops accepting, waits for queued and running requests, then stops the workers.
  void Drain() { Drain(absl::InfiniteDuration()); }
  // Drain waiting at most `timeout` for running requests: false when some still run then (a
  // kernel that does not return); the scheduler keeps draining, and a later Drain (or the
  // destructor, which waits for ever) finishes the job once they return. Requests still queued
  // run (a worker that finishes picks them up) before the workers stop.
  virtual bool Drain(absl::Duration timeout) = 0;
  // Completes every request of the executions that have been running for at least
  // `running_at_least` with `status` (which must not be OK), at once, without waiting for them:
  // for a version retired while a kernel does not return. When such an execution returns after
  // all, its results are dropped; other executions and queued requests are not touched. Returns
  // the number of requests completed.
  virtual int FailRunning(const absl::Status& status,
                          absl::Duration running_at_least = absl::ZeroDuration()) = 0;
  // Takes the requests still queued (their on_complete not run), for a caller that drained
  // with a timeout and found every instance stuck: it routes them elsewhere or rejects them.
  // Meant for a draining scheduler; empty otherwise.
  virtual std::vector<std::unique_ptr<InferenceRequest>> TakeQueued() = 0;
  virtual SchedulerStats Stats() const = 0;
};

// Creates the scheduler `options` describe for `executable`.
absl::StatusOr<std::unique_ptr<Scheduler>> CreateScheduler(
    const SchedulerOptions& options, std::shared_ptr<const Executable> executable);

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_SCHEDULER_H_
