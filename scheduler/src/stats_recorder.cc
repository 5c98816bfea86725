#include "stats_recorder.h"

#include <chrono>

namespace cuvil {

StatsRecorder::StatsRecorder(int64_t max_rows)
    : max_rows_(max_rows), batches_(new Batch[static_cast<size_t>(max_rows) + 1]) {}

void StatsRecorder::RecordExecution(int64_t rows, uint64_t input_ns, uint64_t infer_ns,
                                    uint64_t output_ns) {
  execution_count_.fetch_add(1, std::memory_order_relaxed);
  inference_count_.fetch_add(static_cast<uint64_t>(rows), std::memory_order_relaxed);
  uint64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                    std::chrono::system_clock::now().time_since_epoch())
                    .count();
  last_inference_ms_.store(ms, std::memory_order_relaxed);
  if (rows >= 1 && rows <= max_rows_) {
    Batch& b = batches_[static_cast<size_t>(rows)];
    b.input.Add(input_ns);
    b.infer.Add(infer_ns);
    b.output.Add(output_ns);
  }
}

void StatsRecorder::RecordSuccess(const RequestTimings& t, uint64_t total_ns) {
  success_.Add(total_ns);
  queue_.Add(t.queue_ns);
  input_.Add(t.compute_input_ns);
  infer_.Add(t.compute_infer_ns);
  output_.Add(t.compute_output_ns);
}

void StatsRecorder::RecordFailure(uint64_t total_ns) { fail_.Add(total_ns); }

void StatsRecorder::RecordRejection(bool queue_full) {
  (queue_full ? rejected_queue_full_ : rejected_draining_).fetch_add(1, std::memory_order_relaxed);
}

SchedulerStats StatsRecorder::Snapshot() const {
  SchedulerStats s;
  s.inference_count = inference_count_.load(std::memory_order_relaxed);
  s.execution_count = execution_count_.load(std::memory_order_relaxed);
  s.last_inference_ms = last_inference_ms_.load(std::memory_order_relaxed);
  s.success = success_.Load();
  s.fail = fail_.Load();
  s.rejected_queue_full = rejected_queue_full_.load(std::memory_order_relaxed);
  s.rejected_draining = rejected_draining_.load(std::memory_order_relaxed);
  s.queue = queue_.Load();
  s.compute_input = input_.Load();
  s.compute_infer = infer_.Load();
  s.compute_output = output_.Load();
  for (int64_t rows = 1; rows <= max_rows_; ++rows) {
    const Batch& b = batches_[static_cast<size_t>(rows)];
    BatchStat stat{b.input.Load(), b.infer.Load(), b.output.Load()};
    if (stat.compute_infer.count > 0) s.batch_stats[rows] = stat;
  }
  return s;
}

}  // namespace cuvil
