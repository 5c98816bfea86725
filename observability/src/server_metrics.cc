#include "cuvil/observability/server_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace cuvil::observability {
namespace {

// Registration of fixed, valid names cannot fail; a failure is a programming error.
template <typename T>
T* Must(absl::StatusOr<T*> family) {
  if (!family.ok()) {
    std::fprintf(stderr, "cuvil metrics: %s\n", family.status().ToString().c_str());
    std::abort();
  }
  return *family;
}

constexpr FailureReason kAllReasons[kFailureReasonCount] = {
    FailureReason::kInvalidArgument, FailureReason::kNotFound, FailureReason::kUnavailable,
    FailureReason::kRejected,        FailureReason::kCanceled, FailureReason::kTimeout,
    FailureReason::kInternal,
};

// Triton's failure reasons: REJECTED (queue full / timed out), CANCELED, BACKEND (the model
// failed), OTHER.
std::string_view TritonReason(FailureReason reason) {
  switch (reason) {
    case FailureReason::kRejected:
    case FailureReason::kTimeout:
      return "REJECTED";
    case FailureReason::kCanceled:
      return "CANCELED";
    case FailureReason::kInternal:
      return "BACKEND";
    default:
      return "OTHER";
  }
}

// Switching a kernel table is microseconds; validation and snapshots take longer.
const std::vector<double> kSwitchBuckets = {1e-5,   2.5e-5, 5e-5, 1e-4,  2.5e-4, 5e-4, 1e-3,
                                            2.5e-3, 5e-3,   0.01, 0.025, 0.05,   0.1,  0.25,
                                            0.5,    1,      2.5,  5,     10};

const std::vector<double> kCompileBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    25,   50,  100};
const std::vector<double> kLoadBuckets = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,  2.5,
                                          5,    10,    25,   50,  100,  250, 600};

constexpr double kNanos = 1e-9;

}  // namespace

std::string_view FailureReasonName(FailureReason reason) {
  switch (reason) {
    case FailureReason::kInvalidArgument:
      return "invalid_argument";
    case FailureReason::kNotFound:
      return "not_found";
    case FailureReason::kUnavailable:
      return "unavailable";
    case FailureReason::kRejected:
      return "rejected";
    case FailureReason::kCanceled:
      return "canceled";
    case FailureReason::kTimeout:
      return "timeout";
    case FailureReason::kInternal:
      return "internal";
  }
  return "internal";
}

std::vector<double> ServerMetrics::DurationBuckets() {
  return {25e-6, 50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3,
          25e-3, 50e-3, 100e-3, 250e-3, 500e-3, 1,    2.5,    5,    10};
}

std::vector<double> ServerMetrics::BatchSizeBuckets(int64_t max_batch_size) {
  std::vector<double> bounds;
  for (int64_t b = 1;; b *= 2) {
    bounds.push_back(static_cast<double>(b));
    if (b >= max_batch_size || b >= (int64_t{1} << 40)) break;
  }
  return bounds;
}

// ---------------------------------------------------------------------------------------------
// ModelMetrics

void ModelMetrics::RecordSuccess(int64_t samples, uint64_t request_ns, uint64_t queue_ns,
                                 uint64_t compute_input_ns, uint64_t compute_infer_ns,
                                 uint64_t compute_output_ns) {
  const uint64_t n = samples > 0 ? static_cast<uint64_t>(samples) : 0;
  const uint64_t compute_ns = compute_input_ns + compute_infer_ns + compute_output_ns;
  success_->Increment();
  samples_->Increment(n);
  const double request_s = static_cast<double>(request_ns) * kNanos;
  request_duration_->Observe(request_s);
  queue_duration_->Observe(static_cast<double>(queue_ns) * kNanos);
  compute_duration_->Observe(static_cast<double>(compute_ns) * kNanos);
  latency_->Observe(request_s);
  if (nv_success_ != nullptr) {
    nv_success_->Increment();
    nv_count_->Increment(n);
    nv_request_us_->Increment(request_ns);
    nv_queue_us_->Increment(queue_ns);
    nv_input_us_->Increment(compute_input_ns);
    nv_infer_us_->Increment(compute_infer_ns);
    nv_output_us_->Increment(compute_output_ns);
  }
}

void ModelMetrics::RecordFailure(FailureReason reason) {
  const int i = static_cast<int>(reason);
  if (i < 0 || i >= kFailureReasonCount) return;
  failure_[i]->Increment();
  if (nv_failure_[i] != nullptr) nv_failure_[i]->Increment();
}

void ModelMetrics::RecordExecution(int64_t batch_size) {
  executions_->Increment();
  batch_size_->Observe(static_cast<double>(batch_size));
  if (nv_exec_count_ != nullptr) nv_exec_count_->Increment();
}

void ModelMetrics::SetPending(int64_t n) {
  pending_->Set(static_cast<double>(n));
  if (nv_pending_ != nullptr) nv_pending_->Set(static_cast<double>(n));
}

void ModelMetrics::SetReady(bool ready) { ready_->Set(ready ? 1 : 0); }

void ModelMetrics::SetMemoryBytes(int64_t bytes) { memory_->Set(static_cast<double>(bytes)); }

void ModelMetrics::SetSequences(int64_t active, int64_t state_bytes) {
  sequences_active_->Set(static_cast<double>(active));
  sequence_state_bytes_->Set(static_cast<double>(state_bytes));
}

void ModelMetrics::RecordSequenceCheckpoint(double seconds) {
  sequence_checkpoint_->Observe(seconds);
}

void ModelMetrics::RecordSequencesRestored(int64_t restored, int64_t dropped) {
  sequences_restored_->Increment(static_cast<uint64_t>(std::max<int64_t>(restored, 0)));
  sequences_dropped_->Increment(static_cast<uint64_t>(std::max<int64_t>(dropped, 0)));
}

// ---------------------------------------------------------------------------------------------
// ServerMetrics

ServerMetrics::ServerMetrics(ServerMetricsOptions options) : options_(std::move(options)) {
  const std::vector<std::string> mv = {"model", "version"};
  Registry& r = registry_;
  requests_ = Must(r.AddCounter("cuvil_inference_requests", "Inference requests by outcome.",
                                {"model", "version", "status", "reason"}));
  samples_ = Must(r.AddCounter("cuvil_inference_samples",
                               "Samples (batch elements) in successful requests.", mv));
  executions_ =
      Must(r.AddCounter("cuvil_inference_executions", "Executions of the compiled model.", mv));
  request_duration_ = Must(r.AddHistogram("cuvil_request_duration_seconds",
                                          "End-to-end duration of successful requests.", mv,
                                          DurationBuckets(), "seconds"));
  queue_duration_ = Must(r.AddHistogram("cuvil_queue_duration_seconds",
                                        "Time successful requests waited in the queue.", mv,
                                        DurationBuckets(), "seconds"));
  compute_duration_ =
      Must(r.AddHistogram("cuvil_compute_duration_seconds",
                          "Compute time (input, infer, output) of successful requests.", mv,
                          DurationBuckets(), "seconds"));
  batch_size_ = Must(r.AddHistogram("cuvil_batch_size", "Samples per model execution.", mv,
                                    BatchSizeBuckets(options_.max_batch_size)));
  latency_ = Must(r.AddSummary("cuvil_request_latency_seconds",
                               "End-to-end latency of successful requests over a sliding window.",
                               mv, options_.latency_summary, "seconds"));
  pending_ = Must(r.AddGauge("cuvil_pending_requests", "Requests queued or executing.", mv));
  ready_ = Must(r.AddGauge("cuvil_model_ready", "1 if the model version is ready.", mv));
  memory_ =
      Must(r.AddGauge("cuvil_model_memory_bytes",
                      "Memory held by the model version (code, weights, arenas).", mv, "bytes"));
  sequences_active_ = Must(r.AddGauge("cuvil_sequences_active",
                                      "Open sequences of a model with sequence batching.", mv));
  sequence_state_bytes_ =
      Must(r.AddGauge("cuvil_sequence_state_bytes",
                      "Bytes of implicit state the open sequences hold.", mv, "bytes"));
  sequence_checkpoint_ = Must(r.AddHistogram("cuvil_sequence_checkpoint_seconds",
                                             "Time to write a sequence checkpoint record.", mv,
                                             DurationBuckets(), "seconds"));
  sequences_restored_ =
      Must(r.AddCounter("cuvil_sequences_restored",
                        "Sequences restored from checkpoints when a version loaded.", mv));
  sequences_dropped_ = Must(r.AddCounter(
      "cuvil_sequences_dropped",
      "Checkpointed sequences not restored (damaged, states changed, over the limit).", mv));
  jit_compile_ =
      Must(r.AddHistogram("cuvil_jit_compile_duration_seconds", "Time to JIT-compile a model.",
                          {"model"}, kCompileBuckets, "seconds"));
  cache_hits_ =
      Must(r.AddCounter("cuvil_jit_cache_hits", "Compiled-object cache hits.", {"model"}));
  cache_misses_ =
      Must(r.AddCounter("cuvil_jit_cache_misses", "Compiled-object cache misses.", {"model"}));
  cache_corrupt_ =
      Must(r.AddCounter("cuvil_jit_cache_corrupt_entries",
                        "Cache entries refused as corrupt, truncated or foreign.", {"model"}));
  cache_store_failures_ =
      Must(r.AddCounter("cuvil_jit_cache_store_failures",
                        "Compiled models whose cache entry could not be written.", {"model"}));
  load_duration_ = Must(r.AddHistogram("cuvil_model_load_duration_seconds",
                                       "Time to load a model version until ready.", mv,
                                       kLoadBuckets, "seconds"));
  patches_ = Must(r.AddCounter("cuvil_patches",
                               "Code changes of a version by kind (ir, recompile, profile, "
                               "rollback, snapshot, restore, tier_swap) and result.",
                               {"model", "version", "kind", "result"}));
  patch_switch_ = Must(
      r.AddHistogram("cuvil_patch_switch_duration_seconds",
                     "Admin call received to the change in effect, excluding compiling the patch.",
                     {"kind"}, kSwitchBuckets, "seconds"));
  rejected_ = Must(r.AddCounter("cuvil_requests_rejected",
                                "Requests refused before a model version served them.",
                                {"model", "reason"}));
  if (absl::Status s =
          r.AddCollector(std::make_unique<ProcessCollector>(), ProcessCollector::FamilyNames());
      !s.ok()) {
    std::fprintf(stderr, "cuvil metrics: %s\n", s.ToString().c_str());
    std::abort();
  }
  build_info_ =
      Must(r.AddGauge("cuvil_build_info", "Build information; always 1.", {"version", "llvm"}));
  build_info_->WithLabels({options_.version, options_.llvm})->Set(1);

  if (options_.triton_compat) {
    auto nv_counter = [&](const char* name, const char* help,
                          std::vector<std::string> labels) -> Family<Counter>* {
      Family<Counter>* f = Must(r.AddCounter(name, help, std::move(labels), "", false));
      return f;
    };
    auto nv_us = [&](const char* name, const char* help) {
      Family<Counter>* f = nv_counter(name, help, mv);
      f->set_counter_divisor(1000);  // recorded in ns, exported in us
      return f;
    };
    nv_success_ = nv_counter("nv_inference_request_success",
                             "Number of successful inference requests, all batch sizes", mv);
    nv_failure_ = nv_counter("nv_inference_request_failure",
                             "Number of failed inference requests, all batch sizes",
                             {"model", "version", "reason"});
    nv_count_ = nv_counter("nv_inference_count",
                           "Number of inferences performed (does not include cached requests)", mv);
    nv_exec_count_ =
        nv_counter("nv_inference_exec_count",
                   "Number of model executions performed (does not include cached requests)", mv);
    nv_pending_ = Must(r.AddGauge("nv_inference_pending_request_count",
                                  "Instantaneous number of pending requests awaiting execution "
                                  "per-model.",
                                  mv));
    nv_request_us_ = nv_us("nv_inference_request_duration_us",
                           "Cumulative inference request duration in microseconds");
    nv_queue_us_ = nv_us("nv_inference_queue_duration_us",
                         "Cumulative inference queuing duration in microseconds");
    nv_input_us_ = nv_us("nv_inference_compute_input_duration_us",
                         "Cumulative compute input duration in microseconds");
    nv_infer_us_ = nv_us("nv_inference_compute_infer_duration_us",
                         "Cumulative compute inference duration in microseconds");
    nv_output_us_ = nv_us("nv_inference_compute_output_duration_us",
                          "Cumulative inference compute output duration in microseconds");
  }
}

std::shared_ptr<ModelMetrics> ServerMetrics::ForModel(std::string_view model,
                                                      std::string_view version) {
  absl::MutexLock lock(&mu_);
  Leased& entry = models_[std::make_pair(std::string(model), std::string(version))];
  if (entry.metrics == nullptr) entry.metrics = NewModelMetricsLocked(model, version);
  ++entry.leases;
  // The handle keeps the metrics alive; its last copy gives the lease back.
  struct Lease {
    ServerMetrics* owner;
    std::string model, version;
    std::shared_ptr<ModelMetrics> metrics;
    ~Lease() { owner->Release(model, version, metrics.get()); }
  };
  // Built in place: a moved-from temporary's destructor would give a lease back under mu_.
  std::shared_ptr<Lease> lease(
      new Lease{this, std::string(model), std::string(version), entry.metrics});
  ModelMetrics* raw = lease->metrics.get();
  return std::shared_ptr<ModelMetrics>(std::move(lease), raw);
}

void ServerMetrics::Release(const std::string& model, const std::string& version,
                            const ModelMetrics* metrics) {
  absl::MutexLock lock(&mu_);
  auto it = models_.find(std::make_pair(model, version));
  if (it == models_.end() || it->second.metrics.get() != metrics) return;  // Removed meanwhile.
  if (--it->second.leases > 0) return;
  models_.erase(it);
  RemoveSeriesLocked(model, version);
}

std::shared_ptr<ModelMetrics> ServerMetrics::NewModelMetricsLocked(std::string_view model,
                                                                   std::string_view version) {
  auto m = std::shared_ptr<ModelMetrics>(new ModelMetrics());
  m->success_ = requests_->WithLabels({model, version, "success", ""});
  for (FailureReason reason : kAllReasons) {
    m->failure_[static_cast<int>(reason)] =
        requests_->WithLabels({model, version, "failure", FailureReasonName(reason)});
  }
  m->samples_ = samples_->WithLabels({model, version});
  m->executions_ = executions_->WithLabels({model, version});
  m->request_duration_ = request_duration_->WithLabels({model, version});
  m->queue_duration_ = queue_duration_->WithLabels({model, version});
  m->compute_duration_ = compute_duration_->WithLabels({model, version});
  m->batch_size_ = batch_size_->WithLabels({model, version});
  m->latency_ = latency_->WithLabels({model, version});
  m->pending_ = pending_->WithLabels({model, version});
  m->ready_ = ready_->WithLabels({model, version});
  m->memory_ = memory_->WithLabels({model, version});
  m->sequences_active_ = sequences_active_->WithLabels({model, version});
  m->sequence_state_bytes_ = sequence_state_bytes_->WithLabels({model, version});
  m->sequence_checkpoint_ = sequence_checkpoint_->WithLabels({model, version});
  m->sequences_restored_ = sequences_restored_->WithLabels({model, version});
  m->sequences_dropped_ = sequences_dropped_->WithLabels({model, version});
  if (options_.triton_compat) {
    m->nv_success_ = nv_success_->WithLabels({model, version});
    // Several of our reasons map to one Triton reason: they share the child.
    for (FailureReason reason : kAllReasons) {
      m->nv_failure_[static_cast<int>(reason)] =
          nv_failure_->WithLabels({model, version, TritonReason(reason)});
    }
    m->nv_count_ = nv_count_->WithLabels({model, version});
    m->nv_exec_count_ = nv_exec_count_->WithLabels({model, version});
    m->nv_pending_ = nv_pending_->WithLabels({model, version});
    m->nv_request_us_ = nv_request_us_->WithLabels({model, version});
    m->nv_queue_us_ = nv_queue_us_->WithLabels({model, version});
    m->nv_input_us_ = nv_input_us_->WithLabels({model, version});
    m->nv_infer_us_ = nv_infer_us_->WithLabels({model, version});
    m->nv_output_us_ = nv_output_us_->WithLabels({model, version});
  }
  return m;
}

void ServerMetrics::Remove(std::string_view model, std::string_view version) {
  absl::MutexLock lock(&mu_);
  models_.erase(std::make_pair(std::string(model), std::string(version)));
  RemoveSeriesLocked(model, version);
}

// Under mu_, so that a ForModel of the same (model, version) cannot pick up a series this is
// about to remove.
void ServerMetrics::RemoveSeriesLocked(std::string_view model, std::string_view version) {
  requests_->Remove({model, version, "success", ""});
  for (FailureReason reason : kAllReasons) {
    requests_->Remove({model, version, "failure", FailureReasonName(reason)});
  }
  for (Family<Counter>* f : {samples_, executions_}) f->Remove({model, version});
  for (Family<Histogram>* f :
       {request_duration_, queue_duration_, compute_duration_, batch_size_, load_duration_}) {
    f->Remove({model, version});
  }
  latency_->Remove({model, version});
  for (Family<Gauge>* f : {pending_, ready_, memory_, sequences_active_, sequence_state_bytes_}) {
    f->Remove({model, version});
  }
  sequence_checkpoint_->Remove({model, version});
  for (Family<Counter>* f : {sequences_restored_, sequences_dropped_}) f->Remove({model, version});
  for (int k = 0; k < kPatchKindCount; ++k) {
    for (int r = 0; r < kPatchResultCount; ++r) {
      patches_->Remove({model, version, PatchKindName(static_cast<PatchKind>(k)),
                        PatchResultName(static_cast<PatchResult>(r))});
    }
  }
  if (options_.triton_compat) {
    for (Family<Counter>* f : {nv_success_, nv_count_, nv_exec_count_, nv_request_us_, nv_queue_us_,
                               nv_input_us_, nv_infer_us_, nv_output_us_}) {
      f->Remove({model, version});
    }
    for (FailureReason reason : kAllReasons) {
      nv_failure_->Remove({model, version, TritonReason(reason)});
    }
    nv_pending_->Remove({model, version});
  }
}

void ServerMetrics::RecordCompile(std::string_view model, double seconds) {
  jit_compile_->WithLabels({model})->Observe(seconds);
}

void ServerMetrics::RecordCacheHit(std::string_view model) {
  cache_hits_->WithLabels({model})->Increment();
}

void ServerMetrics::RecordCacheMiss(std::string_view model) {
  cache_misses_->WithLabels({model})->Increment();
}

void ServerMetrics::RecordCacheCorrupt(std::string_view model) {
  cache_corrupt_->WithLabels({model})->Increment();
}

void ServerMetrics::RecordCacheStoreFailure(std::string_view model) {
  cache_store_failures_->WithLabels({model})->Increment();
}

void ServerMetrics::RecordLoad(std::string_view model, std::string_view version, double seconds) {
  load_duration_->WithLabels({model, version})->Observe(seconds);
}

void ServerMetrics::RecordPatch(std::string_view model, std::string_view version, PatchKind kind,
                                PatchResult result, double switch_seconds) {
  patches_->WithLabels({model, version, PatchKindName(kind), PatchResultName(result)})->Increment();
  if (switch_seconds >= 0)
    patch_switch_->WithLabels({PatchKindName(kind)})->Observe(switch_seconds);
}

void ServerMetrics::RecordRejection(std::string_view model, RejectionReason reason) {
  rejected_->WithLabels({model, RejectionReasonName(reason)})->Increment();
}

RenderedMetrics ServerMetrics::Render(std::string_view accept_header) const {
  return RenderMetrics(registry_, accept_header);
}

// ---------------------------------------------------------------------------------------------
// ProcessCollector

std::vector<std::string> ProcessCollector::FamilyNames() {
  return {"process_cpu_seconds", "process_resident_memory_bytes", "process_open_fds",
          "process_start_time_seconds"};
}

namespace {
bool ReadFile(const char* path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

MetricFamilySnapshot Single(std::string name, std::string help, std::string unit, MetricType type,
                            double value) {
  MetricFamilySnapshot f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.unit = std::move(unit);
  f.type = type;
  MetricPoint p;
  p.value = value;
  f.points.push_back(std::move(p));
  return f;
}
}  // namespace

void ProcessCollector::Collect(std::vector<MetricFamilySnapshot>* out) const {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  std::string stat;
  double cpu_seconds = 0, start_time = 0, resident = 0, open_fds = 0;
  if (ReadFile("/proc/self/stat", &stat)) {
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15,
    // starttime 22 (clock ticks since boot).
    const size_t close = stat.rfind(')');
    if (close != std::string::npos) {
      std::istringstream fields(stat.substr(close + 1));
      std::vector<std::string> tok;
      for (std::string t; fields >> t;) tok.push_back(t);
      if (tok.size() > 19 && ticks > 0) {
        cpu_seconds =
            (std::strtod(tok[11].c_str(), nullptr) + std::strtod(tok[12].c_str(), nullptr)) / ticks;
        const double start_ticks = std::strtod(tok[19].c_str(), nullptr);
        std::string proc_stat;
        if (ReadFile("/proc/stat", &proc_stat)) {
          const size_t pos = proc_stat.find("\nbtime ");
          if (pos != std::string::npos) {
            start_time = std::strtod(proc_stat.c_str() + pos + 7, nullptr) + start_ticks / ticks;
          }
        }
      }
    }
  }
  std::string statm;
  if (ReadFile("/proc/self/statm", &statm)) {
    std::istringstream fields(statm);
    double size_pages = 0, resident_pages = 0;
    if (fields >> size_pages >> resident_pages) resident = resident_pages * page;
  }
  if (DIR* dir = opendir("/proc/self/fd")) {
    const int own = dirfd(dir);
    while (dirent* e = readdir(dir)) {
      if (e->d_name[0] == '.') continue;
      if (std::atoi(e->d_name) == own) continue;
      open_fds += 1;
    }
    closedir(dir);
  }
  out->push_back(Single("process_cpu_seconds", "Total user and system CPU time spent in seconds.",
                        "seconds", MetricType::kCounter, cpu_seconds));
  out->push_back(Single("process_resident_memory_bytes", "Resident memory size in bytes.", "bytes",
                        MetricType::kGauge, resident));
  out->push_back(Single("process_open_fds", "Number of open file descriptors.", "",
                        MetricType::kGauge, open_fds));
  out->push_back(Single("process_start_time_seconds",
                        "Start time of the process since unix epoch in seconds.", "seconds",
                        MetricType::kGauge, start_time));
}

}  // namespace cuvil::observability
