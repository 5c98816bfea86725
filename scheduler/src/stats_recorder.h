// Lock-free scheduler statistics: relaxed atomic counters, read as a (not atomic) snapshot.
#ifndef CUVIL_SCHEDULER_STATS_RECORDER_H_
#define CUVIL_SCHEDULER_STATS_RECORDER_H_

#include <atomic>
#include <memory>

#include "cuvil/scheduler/scheduler.h"

namespace cuvil {

// Thread-safe.
class StatsRecorder {
 public:
  explicit StatsRecorder(int64_t max_rows);

  // One successful execution of `rows` rows.
  void RecordExecution(int64_t rows, uint64_t input_ns, uint64_t infer_ns, uint64_t output_ns);
  // One request that succeeded, `total_ns` after it was queued.
  void RecordSuccess(const RequestTimings& timings, uint64_t total_ns);
  void RecordFailure(uint64_t total_ns);
  // One request refused at admission (call RecordFailure too): queue full, else draining.
  void RecordRejection(bool queue_full);

  // Everything but `pending`, which the scheduler fills.
  SchedulerStats Snapshot() const;

 private:
  struct Duration {
    std::atomic<uint64_t> count{0}, ns{0};
    void Add(uint64_t n) {
      count.fetch_add(1, std::memory_order_relaxed);
      ns.fetch_add(n, std::memory_order_relaxed);
    }
    DurationStat Load() const {
      return {count.load(std::memory_order_relaxed), ns.load(std::memory_order_relaxed)};
    }
  };
  struct Batch {
    Duration input, infer, output;
  };

  std::atomic<uint64_t> inference_count_{0};
  std::atomic<uint64_t> execution_count_{0};
  std::atomic<uint64_t> last_inference_ms_{0};
  std::atomic<uint64_t> rejected_queue_full_{0}, rejected_draining_{0};
  Duration success_, fail_, queue_, input_, infer_, output_;
  int64_t max_rows_;
  std::unique_ptr<Batch[]> batches_;  // Indexed by executed rows, 1..max_rows.
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_STATS_RECORDER_H_
