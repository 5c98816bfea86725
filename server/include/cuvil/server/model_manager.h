// The model registry: loads model versions on a loader pool (compile → JIT namespace → warmup →
// READY), routes requests to them, and unloads them once in-flight requests finish.
#ifndef CUVIL_SERVER_MODEL_MANAGER_H_
#define CUVIL_SERVER_MODEL_MANAGER_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/observability/server_metrics.h"
#include "cuvil/scheduler/executable.h"
#include "cuvil/scheduler/scheduler.h"
#include "cuvil/server/model_repository.h"
#include "model_config.pb.h"

namespace cuvil {

class InflightBudget;

using observability::ModelMetrics;
using observability::ServerMetrics;

class RequestSampler;

enum class ModelState { kLoading, kReady, kUnloading, kUnavailable, kFailed };
const char* ModelStateName(ModelState state);  // "READY", "LOADING", ...

// One loaded, servable model version. Reference-counted: requests in flight keep it (and its JIT
// code) alive through an unload. Thread-safe.
class SequenceBatcher;

class ModelVersion {
 public:
  ModelVersion(std::string name, int64_t version, inference::ModelConfig config,
               std::unique_ptr<LoadedModel> loaded, std::shared_ptr<const Executable> executable,
               std::unique_ptr<Scheduler> scheduler, double compile_ms, uint64_t compilations);
  ~ModelVersion();

  const std::string& name() const { return name_; }
  int64_t version() const { return version_; }
  // The version as the wire protocols spell it ("3").
  const std::string& version_string() const { return version_string_; }
  const inference::ModelConfig& config() const { return config_; }
  const Executable& executable() const { return *executable_; }
  const LoadedModel& loaded() const { return *loaded_; }
  // The loaded code for hot patching (LoadedModel's patch operations are thread-safe).
  LoadedModel& mutable_loaded() { return *loaded_; }
  double compile_ms() const { return compile_ms_; }
  // True when an execution may run without bound: the model has Loop or Scan kernels (their
  // trip counts come from the data) or patch layers are active. A front end whose thread must
  // stay free to answer a request that never finishes does not run such requests inline.
  bool MayRunUnbounded() const {
    return has_loops_ || (loaded_ != nullptr && loaded_->patches().has_layers());
  }
  // The sequence batcher of a model configured with sequence_batching (null otherwise): front
  // ends hand such a model's requests to it instead of building them directly.
  SequenceBatcher* sequences() const { return sequences_.get(); }
  // Set once, before the version is published.
  void set_sequences(std::unique_ptr<SequenceBatcher> sequences);
  // Where this version records request metrics (null when metrics are off).
  const std::shared_ptr<ModelMetrics>& metrics() const { return metrics_; }
  void set_metrics(std::shared_ptr<ModelMetrics> metrics) { metrics_ = std::move(metrics); }
  // Times the compiler ran for this version; one compile serves every batch size.
  uint64_t compilations() const { return compilations_; }
  // Queues a validated request on this version's scheduler or, once RetireTo named a successor,
  // on the successor's (a request that looked this version up just before a reload still runs).
  void Submit(std::unique_ptr<InferenceRequest> request);
  // Statistics since warmup finished (warmup requests are not client traffic).
  SchedulerStats Stats() const;
  // Makes the statistics so far the baseline Stats() subtracts. Called once, after warmup.
  void ResetStatsBaseline() { baseline_ = scheduler_->Stats(); }
  // Finishes queued and running requests; later submissions fail with UNAVAILABLE. False when
  // requests still run after `timeout` (a kernel that does not return): the version keeps
  // draining, and must stay alive (its code may be running) until a later Drain returns true.
  bool Drain(absl::Duration timeout = absl::InfiniteDuration()) {
    return scheduler_->Drain(timeout);
  }
  // After a Drain or RetireTo that timed out (a kernel that does not return): requests still
  // queued go to the successor RetireTo named (else fail UNAVAILABLE), and the requests of the
  // executions running for at least `stuck_after` are answered with `status` without waiting
  // for them (their results, if they ever come, are dropped). Returns the number answered.
  int AbandonStuck(const absl::Status& status, absl::Duration stuck_after);
  // Drain, for a version replaced by `successor`: later submissions go to the successor when its
  // tensors and batching match this version's (a reload), else fail as after Drain.
  bool RetireTo(std::shared_ptr<ModelVersion> successor,
                absl::Duration timeout = absl::InfiniteDuration());
  // A few requests this version served (every 16th from the first, the newest 4, 16 MiB at
  // most; none with string inputs), each in the compiled model's input order: hot patches are
  // validated on them too. The config parameter "cuvil.validation_samples" sets how many are
  // kept ("0": none — for data that must not stay in memory).
  std::vector<std::vector<HostTensor>> RecentRequests() const;
  // Held by an admin patch call from preparing its layer to committing it: patches of one
  // version queue behind each other instead of invalidating each other's prepared table (the
  // loser would get Aborted). Rollbacks and tier swaps do not take it.
  absl::Mutex& patch_operation_mu() { return patch_operation_mu_; }

 private:
  std::string name_;
  int64_t version_;
  std::string version_string_;
  inference::ModelConfig config_;
  std::unique_ptr<LoadedModel> loaded_;
  std::shared_ptr<const Executable> executable_;
  std::unique_ptr<Scheduler> scheduler_;
  double compile_ms_;
  uint64_t compilations_;
  bool has_loops_ = false;                 // Set by the constructor (Loop or Scan kernels).
  SchedulerStats baseline_;                // Written once before the version is published.
  std::shared_ptr<ModelMetrics> metrics_;  // Set once before the version is published.
  // Guards successor_, which RetireTo names before the drain starts: a Submit the draining
  // scheduler hands back then finds it, so every request either reaches this scheduler before
  // its drain or goes to the successor. Never held across an execution. Weak: a version kept
  // alive by a stuck execution must not keep every later build alive through the chain.
  std::shared_ptr<ModelVersion> Successor();
  absl::Mutex retire_mu_;
  std::weak_ptr<ModelVersion> successor_ ABSL_GUARDED_BY(retire_mu_);
  std::unique_ptr<RequestSampler> sampler_;     // Set by the constructor.
  std::unique_ptr<SequenceBatcher> sequences_;  // Set once before the version is published.
  absl::Mutex patch_operation_mu_;
};

// What ListModels / RepositoryIndex report for one version.
struct VersionStatus {
  std::string name;
  int64_t version = 0;
  ModelState state = ModelState::kUnavailable;
  std::string reason;
  std::shared_ptr<ModelVersion> model;  // Set when READY.
};

// A version's code given instead of compiled (a restored snapshot), and work done on the loaded
// code before the version serves (re-applying the snapshot's patches; an error fails the load).
struct VersionSeed {
  std::shared_ptr<const CompiledModel> compiled;
  std::function<absl::Status(LoadedModel&)> before_serving;
  // The code is a quick tier that was never swapped for the full one (a snapshot taken before
  // its tier-up): the full tier is compiled from the load's ONNX bytes once it serves.
  bool tier_up = false;
};

// Overrides for a load (Triton's load parameters, or the admin API's inline load).
struct LoadRequest {
  std::string name;
  std::string config_json;                     // Non-empty: replaces config.pbtxt.
  std::string config_pbtxt;                    // Non-empty: replaces config.pbtxt.
  std::map<int64_t, std::string> model_bytes;  // Version -> ONNX bytes (inline models).
  bool wait = true;                            // Return once READY or FAILED.
  std::map<int64_t, VersionSeed> seeds;        // Version -> seed (restored snapshots).
  // Non-zero: build exactly this version again and leave the model's other versions (and
  // whether it is inline) alone, as a forced retire needs; 0: the versions the policy selects
  // (or model_bytes lists), retiring the others.
  int64_t only_version = 0;
  // How long a build this load replaces may drain before it is retired with requests still
  // running (their clients answered UNAVAILABLE); unset: the manager's drain timeout. Zero for
  // a build known to be stuck.
  std::optional<absl::Duration> retire_timeout;
};

struct ModelManagerOptions {
  int loader_threads = 1;
  ServerMetrics* metrics = nullptr;  // Optional; must outlive the manager.
  ObjectCache* cache = nullptr;      // Optional JIT cache; must outlive the manager.
  // kTiered: versions become READY on a quick compile and get the full tier swapped in at a safe
  // point by a background compile (a cached full tier is loaded directly). See CompileTier.
  CompileTier compile_tier = CompileTier::kFull;
  // The server's request limit. A warm-up input larger than it (and than kMinWarmupLimitBytes,
  // so a small limit does not stop ordinary models loading) fails the load instead of being
  // allocated: a model whose smallest request could never arrive is refused, not an abort.
  uint64_t max_request_bytes = uint64_t{1} << 30;
  // How long an unload, a reload's retirement of the old build, or Shutdown waits for a
  // version's running requests. A version still running then (a kernel that does not return) is
  // retired anyway: its code stays alive and it is drained again every second until it finishes.
  absl::Duration drain_timeout = absl::Seconds(30);
  // Optional; must outlive the manager. Each execution reserves the scratch memory (arena) its
  // shapes need here for as long as it runs, and fails with ResourceExhausted when the bytes in
  // flight would cross the limit: a model with free dims cannot be driven into allocating
  // gigabytes by one request of a few megabytes.
  InflightBudget* inflight_budget = nullptr;
  // A private folder (the snapshot folder's "sequences") where models with sequence batching
  // checkpoint their open sequences, one log per model version (docs/serving.md); empty: none.
  std::string sequence_checkpoint_dir;
};

// Thread-safe.
class ModelManager {
 public:
  ModelManager(JitEngine* engine, const ModelRepository* repository, ModelManagerOptions options);
  ~ModelManager();

  // Loads (or reloads) a model's versions per its version policy. With wait, returns the load's
  // outcome (InvalidArgument / NotFound / the compile error); otherwise OK once queued. Versions
  // already READY keep serving until their replacement is READY.
  absl::Status Load(const LoadRequest& request);
  // Unloads every version of `name` (NotFound if none is known); waits for in-flight requests.
  absl::Status Unload(const std::string& name);
  // Loads every model in the repository, waiting for all (errors are recorded as FAILED states).
  void LoadAll();
  // Poll mode's pass over the repository: loads models whose folder appeared and unloads models
  // loaded from a folder that disappeared. Models loaded inline and models an operator unloaded
  // (Unload) are left alone until an operator loads them again.
  void SyncWithRepository();

  // The version that serves `version` ("" or "-1": the highest READY version). NotFound naming
  // the model/version; Unavailable when it exists but is not READY.
  absl::StatusOr<std::shared_ptr<ModelVersion>> Get(const std::string& name,
                                                    const std::string& version) const;
  // Get for a request to be served: a failure is also counted as a rejection of `name` (see
  // Rejections) and in cuvil_requests_rejected_total.
  absl::StatusOr<std::shared_ptr<ModelVersion>> Route(const std::string& name,
                                                      const std::string& version) const;
  // Requests Route refused, by model then reason name ("no_ready_version", ...). Names never
  // loaded are counted together under "" (request-supplied names must not grow the map).
  std::map<std::string, std::map<std::string, uint64_t>> Rejections() const;
  // Every known version, sorted by name then version.
  std::vector<VersionStatus> Index() const;
  // Versions of `name` with their states (empty if unknown).
  std::vector<VersionStatus> Versions(const std::string& name) const;

  // Stops loading, drains and unloads everything (each version for at most drain_timeout).
  void Shutdown();
  // Versions retired or unloaded whose requests have still not returned (see drain_timeout).
  // After Shutdown, nonzero means threads may still run generated code: the process must not
  // unload it (exit without running destructors).
  size_t StuckVersions() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_MODEL_MANAGER_H_
