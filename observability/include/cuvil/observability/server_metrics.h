// Cuvil's metric families and the per-model-version recording handle the request path uses.
//
//   ServerMetricsOptions options;  // (GCC 12 -Wextra warns on partial designated initializers)
//   options.version = "0.1.0"; options.llvm = "19.1.7"; options.triton_compat = true;
//   ServerMetrics metrics(options);
//   std::shared_ptr<ModelMetrics> m = metrics.ForModel("resnet", "1");   // at load; keep it
//   m->RecordSuccess(batch, request_ns, queue_ns, in_ns, infer_ns, out_ns);  // lock-free
//   RenderedMetrics r = metrics.Render(http_accept_header);               // GET /metrics
//
// Families (labels model, version unless noted):
//   cuvil_inference_requests_total{status="success|failure",reason}   counter
//   cuvil_inference_samples_total, cuvil_inference_executions_total   counters
//   cuvil_request_duration_seconds, cuvil_queue_duration_seconds,
//   cuvil_compute_duration_seconds                                    histograms, 25us .. 10s
//   cuvil_batch_size                                                  histogram, 1,2,4..max
//   cuvil_request_latency_seconds{quantile=0.5|0.9|0.99}              summary, sliding window
//   cuvil_pending_requests, cuvil_model_ready, cuvil_model_memory_bytes   gauges
//   cuvil_jit_compile_duration_seconds{model}                         histogram
//   cuvil_jit_cache_hits_total{model}, cuvil_jit_cache_misses_total{model},
//   cuvil_jit_cache_corrupt_entries_total{model},
//   cuvil_jit_cache_store_failures_total{model}                        counters
//   cuvil_model_load_duration_seconds                                 histogram
//   cuvil_patches_total{model,version,kind,result}                    counter (events.h names)
//   cuvil_patch_switch_duration_seconds{kind}                         histogram, 10us .. 10s
//   cuvil_requests_rejected_total{model,reason}                       counter ("" model: unknown)
//   process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds,
//   process_start_time_seconds                                        read from /proc at scrape
//   cuvil_build_info{version,llvm} 1                                   gauge
// With triton_compat, also Triton's names (see docs/protocol.md "Triton metric names"):
//   nv_inference_request_success, nv_inference_request_failure{reason=REJECTED|CANCELED|BACKEND|
//   OTHER}, nv_inference_count, nv_inference_exec_count, nv_inference_pending_request_count,
//   nv_inference_{request,queue,compute_input,compute_infer,compute_output}_duration_us.
// Durations, latency and Triton's duration counters describe successful requests (as Triton's).
#ifndef CUVIL_OBSERVABILITY_SERVER_METRICS_H_
#define CUVIL_OBSERVABILITY_SERVER_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cuvil/observability/events.h"
#include "cuvil/observability/exposition.h"
#include "cuvil/observability/metrics.h"

namespace cuvil::observability {

enum class FailureReason {
  kInvalidArgument,
  kNotFound,
  kUnavailable,
  kRejected,
  kCanceled,
  kTimeout,
  kInternal,
};
inline constexpr int kFailureReasonCount = 7;
// "invalid_argument", "not_found", ... (the `reason` label value).
std::string_view FailureReasonName(FailureReason reason);

struct ServerMetricsOptions {
  std::string version;             // cuvil_build_info{version}
  std::string llvm;                // cuvil_build_info{llvm}
  bool triton_compat = false;      // --metrics-compat triton
  int64_t max_batch_size = 128;    // cuvil_batch_size buckets: powers of two up to >= this
  SummaryOptions latency_summary;  // window (default 60 s in 6 sub-windows), clock
};

class ServerMetrics;

// Recording handle for one model version. Thread-safe and lock-free: every method is a handful
// of relaxed atomic operations on children cached at creation.
class ModelMetrics {
 public:
  // One successful request of `samples` samples (the request's batch dimension). Durations in
  // nanoseconds: end to end, queued, and the three compute phases (the histogram
  // cuvil_compute_duration_seconds observes their sum).
  void RecordSuccess(int64_t samples, uint64_t request_ns, uint64_t queue_ns,
                     uint64_t compute_input_ns, uint64_t compute_infer_ns,
                     uint64_t compute_output_ns);
  void RecordFailure(FailureReason reason);
  // One execution of the compiled model on a batch of `batch_size` samples.
  void RecordExecution(int64_t batch_size);
  void SetPending(int64_t n);
  void SetReady(bool ready);
  void SetMemoryBytes(int64_t bytes);
  // Sequence batching: the open sequences and the bytes of state they hold.
  void SetSequences(int64_t active, int64_t state_bytes);
  // One checkpoint write that took `seconds`.
  void RecordSequenceCheckpoint(double seconds);
  // Sequences restored from checkpoints at load, and those dropped (damaged, or the model's
  // states changed, or over the limit).
  void RecordSequencesRestored(int64_t restored, int64_t dropped);

 private:
  friend class ServerMetrics;
  ModelMetrics() = default;

  std::shared_ptr<Counter> success_, samples_, executions_;
  std::shared_ptr<Counter> failure_[kFailureReasonCount];
  std::shared_ptr<Histogram> request_duration_, queue_duration_, compute_duration_, batch_size_;
  std::shared_ptr<Summary> latency_;
  std::shared_ptr<Gauge> pending_, ready_, memory_;
  std::shared_ptr<Gauge> sequences_active_, sequence_state_bytes_;
  std::shared_ptr<Histogram> sequence_checkpoint_;
  std::shared_ptr<Counter> sequences_restored_, sequences_dropped_;
  // Triton compatibility (null unless enabled).
  std::shared_ptr<Counter> nv_success_, nv_count_, nv_exec_count_;
  std::shared_ptr<Counter> nv_failure_[kFailureReasonCount];
  std::shared_ptr<Gauge> nv_pending_;
  std::shared_ptr<Counter> nv_request_us_, nv_queue_us_, nv_input_us_, nv_infer_us_, nv_output_us_;
};

// Owns the registry with Cuvil's families. Thread-safe: ForModel/Remove/Record* for compile,
// cache, load and patch events look children up under per-family mutexes (cold paths); Render
// may run concurrently with everything.
class ServerMetrics {
 public:
  explicit ServerMetrics(ServerMetricsOptions options);
  ServerMetrics(const ServerMetrics&) = delete;
  ServerMetrics& operator=(const ServerMetrics&) = delete;

  // The recording handle for (model, version), created on first call; later calls return the
  // same object (a reload of a version keeps counting where it was). Each call is a lease: once
  // every copy of every handle returned for (model, version) is gone (the versions were unloaded
  // or replaced), its series stop being exported, so loads and unloads of ever new versions do
  // not grow the exposition. The ServerMetrics must outlive the handles. A handle stays valid
  // (recording into nothing exported) after Remove.
  std::shared_ptr<ModelMetrics> ForModel(std::string_view model, std::string_view version);
  // Stops exporting every series of (model, version) now, leases or not. Cache and compile series
  // are per model and kept.
  void Remove(std::string_view model, std::string_view version);

  void RecordCompile(std::string_view model, double seconds);
  void RecordCacheHit(std::string_view model);
  void RecordCacheMiss(std::string_view model);
  // A disk cache entry was refused (corrupt, truncated or foreign) and the model recompiled.
  void RecordCacheCorrupt(std::string_view model);
  // A compiled model's disk cache entry could not be written (the model serves all the same).
  void RecordCacheStoreFailure(std::string_view model);
  void RecordLoad(std::string_view model, std::string_view version, double seconds);
  // One patch event (an admin call that changed, or tried to change, a version's code). With
  // switch_seconds >= 0 (the change took effect), the switch-latency histogram observes it.
  void RecordPatch(std::string_view model, std::string_view version, PatchKind kind,
                   PatchResult result, double switch_seconds = -1);
  // One request refused before a version served it. `model` is "" when the name is unknown
  // (request-supplied names must not create unbounded series).
  void RecordRejection(std::string_view model, RejectionReason reason);

  // The exposition for an HTTP Accept header (see exposition.h).
  RenderedMetrics Render(std::string_view accept_header) const;

  Registry& registry() { return registry_; }
  const ServerMetricsOptions& options() const { return options_; }

  // Bucket bounds used (exposed for tests).
  static std::vector<double> DurationBuckets();
  static std::vector<double> BatchSizeBuckets(int64_t max_batch_size);

 private:
  ServerMetricsOptions options_;
  Registry registry_;
  Family<Counter>* requests_;
  Family<Counter>* samples_;
  Family<Counter>* executions_;
  Family<Histogram>* request_duration_;
  Family<Histogram>* queue_duration_;
  Family<Histogram>* compute_duration_;
  Family<Histogram>* batch_size_;
  Family<Summary>* latency_;
  Family<Gauge>* pending_;
  Family<Gauge>* ready_;
  Family<Gauge>* memory_;
  Family<Gauge>* sequences_active_;
  Family<Gauge>* sequence_state_bytes_;
  Family<Histogram>* sequence_checkpoint_;
  Family<Counter>* sequences_restored_;
  Family<Counter>* sequences_dropped_;
  Family<Histogram>* jit_compile_;
  Family<Counter>* cache_hits_;
  Family<Counter>* cache_misses_;
  Family<Counter>* cache_corrupt_;
  Family<Counter>* cache_store_failures_;
  Family<Histogram>* load_duration_;
  Family<Counter>* patches_;
  Family<Histogram>* patch_switch_;
  Family<Counter>* rejected_;
  Family<Gauge>* build_info_;
  // Triton compatibility (null unless enabled).
  Family<Counter>* nv_success_ = nullptr;
  Family<Counter>* nv_failure_ = nullptr;
  Family<Counter>* nv_count_ = nullptr;
  Family<Counter>* nv_exec_count_ = nullptr;
  Family<Gauge>* nv_pending_ = nullptr;
  Family<Counter>* nv_request_us_ = nullptr;
  Family<Counter>* nv_queue_us_ = nullptr;
  Family<Counter>* nv_input_us_ = nullptr;
  Family<Counter>* nv_infer_us_ = nullptr;
  Family<Counter>* nv_output_us_ = nullptr;

  // Gives back one lease of ForModel; the last one removes the series (if `metrics` is still
  // the handle registered for them).
  void Release(const std::string& model, const std::string& version, const ModelMetrics* metrics);
  void RemoveSeriesLocked(std::string_view model, std::string_view version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<ModelMetrics> NewModelMetricsLocked(std::string_view model,
                                                      std::string_view version)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  struct Leased {
    std::shared_ptr<ModelMetrics> metrics;
    int64_t leases = 0;
  };
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, std::string>, Leased> models_ ABSL_GUARDED_BY(mu_);
};

// Collector of process_cpu_seconds_total, process_resident_memory_bytes, process_open_fds and
// process_start_time_seconds from /proc/self. Thread-safe (reads /proc at each Collect).
class ProcessCollector final : public Collector {
 public:
  void Collect(std::vector<MetricFamilySnapshot>* out) const override;
  static std::vector<std::string> FamilyNames();
};

}  // namespace cuvil::observability

#endif  // CUVIL_OBSERVABILITY_SERVER_METRICS_H_
