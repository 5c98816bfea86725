#include "cuvil/server/model_manager.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <optional>
#include <set>
#include <system_error>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/code_source.h"
#include "cuvil/jitcache/private_dir.h"
#include "cuvil/jitcache/tiered_start.h"
#include "cuvil/observability/probes.h"
#include "cuvil/runtime/tensor_size.h"
#include "cuvil/runtime/thread_pool.h"
#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/model_config.h"
#include "inflight_budget.h"
#include "jit_executable.h"
#include "model_name.h"
#include "model_warmup.h"
#include "patch_event.h"
#include "patch_validation.h"
#include "sequence_batcher.h"
#include "spdlog/spdlog.h"

namespace cuvil {

namespace {

// What a sequence checkpoint log must have been written for besides the states
// (SequenceLog::Identity): the XXH3-128 of the version's ONNX source (`bytes`, else the file at
// `path`) and the identity of the code generator (what snapshots record). A log of another
// model file or build is dropped: its states need not mean the same to this build.
absl::StatusOr<std::string> SequenceBuildIdentity(const std::string& path,
                                                  const std::string& bytes) {
  XXH3_state_t* h = XXH3_createState();
  absl::Cleanup free_state = [h] { XXH3_freeState(h); };
  XXH3_128bits_reset(h);
  if (!bytes.empty() || path.empty()) {
    XXH3_128bits_update(h, bytes.data(), bytes.size());
  } else {
    std::ifstream f(path, std::ios::binary);
    if (!f) return absl::InternalError(absl::StrCat("cannot read ", path, " to identify it"));
    std::vector<char> buf(1 << 16);
    while (f.read(buf.data(), static_cast<std::streamsize>(buf.size())) || f.gcount() > 0) {
      XXH3_128bits_update(h, buf.data(), static_cast<size_t>(f.gcount()));
    }
  }
  const XXH128_hash_t d = XXH3_128bits_digest(h);
  return absl::StrCat("model=xxh3:", absl::Hex(d.high64, absl::kZeroPad16),
                      absl::Hex(d.low64, absl::kZeroPad16), ";code=", CodeBuildIdentity());
}

struct Slot {
  ModelState state = ModelState::kUnavailable;
  std::string reason;
  std::shared_ptr<ModelVersion> model;
  uint64_t generation = 0;  // Identifies the newest load; older loads' results are dropped.
  uint64_t loads = 0;       // Loads started; reloads get distinct JIT namespace names.
};

}  // namespace

struct ModelManager::Impl {
  JitEngine* engine;
  const ModelRepository* repository;
  mutable absl::Mutex mu;
  std::map<std::string, std::map<int64_t, Slot>> models ABSL_GUARDED_BY(mu);
  uint64_t next_generation ABSL_GUARDED_BY(mu) = 1;
  bool shutting_down ABSL_GUARDED_BY(mu) = false;
  ThreadPool loaders;  // Joined before the state above is destroyed (declared after it).

  // Models loaded from ONNX bytes rather than a repository folder: poll mode leaves them alone.
  std::set<std::string> inline_models ABSL_GUARDED_BY(mu);
  // Models an operator unloaded: poll mode does not bring them back until an operator loads them.
  std::set<std::string> operator_unloaded ABSL_GUARDED_BY(mu);

  ServerMetrics* metrics;
  uint64_t max_request_bytes;
  InflightBudget* inflight_budget;      // Executions reserve their scratch here; may be null.
  std::string sequence_checkpoint_dir;  // Empty: sequences are not checkpointed.
  ObjectCache* cache;
  CompileTier compile_tier;

  // Route's refusals by model, then reason. Its own lock: counted on the request path, after
  // the routing lookup released `mu`.
  mutable absl::Mutex rejections_mu;
  mutable std::map<std::string, std::map<std::string, uint64_t>> rejections
      ABSL_GUARDED_BY(rejections_mu);

  // Get's lookup; on failure also says why, for counting.
  absl::StatusOr<std::shared_ptr<ModelVersion>> Lookup(const std::string& name,
                                                       const std::string& version,
                                                       observability::RejectionReason* why,
                                                       bool* known) const;

  Impl(JitEngine* e, const ModelRepository* r, const ModelManagerOptions& options)
      : engine(e),
        repository(r),
        loaders(options.loader_threads),
        metrics(options.metrics),
        max_request_bytes(options.max_request_bytes),
        inflight_budget(options.inflight_budget),
        sequence_checkpoint_dir(options.sequence_checkpoint_dir),
        cache(options.cache),
        compile_tier(options.compile_tier),
        drain_timeout(options.drain_timeout) {}

  absl::Status UnloadModel(const std::string& name, bool by_operator);

  // Retires `m` (to `successor`, null for an unload) waiting at most `timeout` (default
  // drain_timeout); a version whose requests still run then is parked: its stuck requests are
  // answered, it is kept alive and drained again by the reaper.
  void Retire(const std::shared_ptr<ModelVersion>& m,
              const std::shared_ptr<ModelVersion>& successor,
              std::optional<absl::Duration> timeout = std::nullopt);
  void Park(const std::shared_ptr<ModelVersion>& m, absl::Duration stuck_after);
  void ReaperLoop();
  void StopReaper();

  absl::Duration drain_timeout;
  mutable absl::Mutex parked_mu;
  // Retired versions with requests still running, and how long an execution of each may run
  // before the reaper answers its requests (a request that got stuck during the drain).
  struct Parked {
    std::shared_ptr<ModelVersion> version;
    absl::Duration stuck_after;
  };
  std::vector<Parked> parked ABSL_GUARDED_BY(parked_mu);
  bool stop_reaper ABSL_GUARDED_BY(parked_mu) = false;
  std::thread reaper;  // Started by the first Park.

  // BuildVersion, with anything thrown (bad_alloc from a size a model controls, a library
  // throwing) turned into a failed load of this version instead of std::terminate.
  absl::StatusOr<std::shared_ptr<ModelVersion>> BuildVersionNoThrow(
      const std::string& name, int64_t version, inference::ModelConfig config,
      const std::string& path, const std::string& bytes, uint64_t load_index,
      const std::string& model_dir, const VersionSeed* seed,
      const std::shared_ptr<ModelVersion>& predecessor) {
    try {
      return BuildVersion(name, version, std::move(config), path, bytes, load_index, model_dir,
                          seed, predecessor);
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("load failed: ", e.what()));
    } catch (...) {
      return absl::InternalError("load failed: unknown exception");
    }
  }

  // What the first step of a build produced: the version's code and how it was obtained.
  struct CompileStep {
    CompiledModel compiled;
    CompileOptions full_options;  // The config's options: the full tier's.
    CompileOptions options;       // What `compiled` was built with.
    CacheLookup lookup;
    // The tiered start, kept for the tier-up (or, on a full-tier hit, until a quick compile that
    // lost the race has finished).
    std::shared_ptr<TieredStart> start;
    bool seeded = false;          // A restored snapshot brought the code.
    bool used_cache = false;      // The JIT cache was consulted.
    bool tier_up = false;         // `compiled` is the quick tier; the full tier follows.
    bool lookup_pending = false;  // The full tier's lookup was still running at READY.
    double compile_ms = 0;
    uint64_t compilations = 0;  // 1 when the compiler ran for this load.
  };

  // Step 1: the version's code — the seed's, the JIT cache's, or a compile at the configured
  // tier (tiered: the quick tier serves first unless the full tier is cached).
  absl::StatusOr<CompileStep> CompileVersion(const std::string& name,
                                             const inference::ModelConfig& config,
                                             const std::string& path, const std::string& bytes,
                                             const VersionSeed* seed) {
    auto t0 = std::chrono::steady_clock::now();
    CUVIL_PROBE_JIT_COMPILE_START(name.c_str());
    absl::StatusOr<CompileOptions> from_config = CompileOptionsFromConfig(config);
    if (!from_config.ok()) return from_config.status();
    CompileStep step;
    step.full_options = *std::move(from_config);
    step.seeded = seed != nullptr && seed->compiled != nullptr;
    // Config dims that fix nothing the model leaves free are dropped: the code and its JIT cache
    // key stay those of the model compiled without a config (a cache filled by cuvilc hits). A
    // seed brings its code, so its model is not read for this.
    if (auto& shapes = step.full_options.import.input_shapes; !shapes.empty() && !step.seeded) {
      auto trimmed = WithoutDeclaredDims(std::move(shapes), path, bytes);
      if (!trimmed.ok()) return trimmed.status();
      shapes = *std::move(trimmed);
    }
    step.options = step.full_options;
    ObjectCache* const cache = step.seeded ? nullptr : this->cache;
    step.used_cache = cache != nullptr;
    absl::StatusOr<CompiledModel> compiled = absl::NotFoundError("not compiled");
    if (step.seeded) {
      compiled = *seed->compiled;
    } else if (compile_tier == CompileTier::kTiered) {
      CompileOptions quick_options = step.full_options;
      quick_options.opt_level = kFastTierOptLevel;
      step.start = TieredStart::Begin(cache, {path, bytes, step.full_options, quick_options, {}});
      step.tier_up = !step.start->full_tier();
      if (step.tier_up) step.options = quick_options;
      // Still running: the tier-up reports the lookup (hit, miss, refused entry) once known.
      step.lookup_pending = cache != nullptr && step.start->ready_lookup() == nullptr;
      if (!step.lookup_pending && cache != nullptr) step.lookup = *step.start->ready_lookup();
      compiled = step.start->TakeReady();
    } else {
      if (compile_tier == CompileTier::kFast) step.options.opt_level = kFastTierOptLevel;
      compiled = cache != nullptr ? cache->Compile(path, bytes, step.options, &step.lookup)
                 : bytes.empty()  ? CompileOnnxFile(path, step.options)
                                  : CompileOnnxBytes(bytes, step.options);
    }
    if (!compiled.ok()) return compiled.status();
    step.compiled = *std::move(compiled);
    step.compilations = !step.seeded && step.lookup.outcome == CacheOutcome::kMiss ? 1 : 0;
    step.compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    CUVIL_PROBE_JIT_COMPILE_DONE(name.c_str(), static_cast<int64_t>(step.compile_ms * 1e6));
    return step;
  }

  // Step 2: the compile's outcome in the log, the probes and the metrics.
  void ReportCompile(const std::string& name, int64_t version, const CompileStep& step) {
    const CacheLookup& lookup = step.lookup;
    if (step.lookup_pending) {
      spdlog::info(
          "model '{}' version {}: quick tier ready ({:.1f} ms); the full tier's JIT cache "
          "outcome comes with the tier-up",
          name, version, step.compile_ms);
    } else if (step.used_cache) {
      if (lookup.outcome == CacheOutcome::kMiss) {
        CUVIL_PROBE_CACHE_MISS(name.c_str());
      } else {
        CUVIL_PROBE_CACHE_HIT(name.c_str());
      }
      spdlog::info("model '{}' version {}: JIT cache {} (key {}, {:.1f} ms)", name, version,
                   CacheOutcomeName(lookup.outcome), lookup.key, step.compile_ms);
    }
    if (metrics == nullptr) return;
    if (step.compilations > 0) metrics->RecordCompile(name, step.compile_ms / 1000);
    if (step.used_cache && !step.lookup_pending) {
      if (lookup.outcome == CacheOutcome::kMiss) {
        metrics->RecordCacheMiss(name);
      } else {
        metrics->RecordCacheHit(name);
      }
      if (lookup.refused_entry) metrics->RecordCacheCorrupt(name);
      if (lookup.store_failed) metrics->RecordCacheStoreFailure(name);
    }
  }

  // Step 3: every instance allocates, at the largest batch, its scratch plus gather buffers for
  // inputs and outputs: refuse what cannot be served rather than fail (or abort) on the first
  // full batch. All in overflow-checked arithmetic, since the config and the model set the
  // factors.
  static absl::Status CheckInstanceFits(const CompiledModel& compiled,
                                        const inference::ModelConfig& config) {
    constexpr int64_t kMaxInstanceBytes = int64_t{16} << 30;
    const int64_t max_rows = std::max<int64_t>(config.max_batch_size(), 1);
    // The arena as executions size it (batch-split parts included); with free dimensions beyond
    // the batch, at 1 for each (executions size it for their own shapes).
    std::vector<int64_t> load_syms(std::max<size_t>(compiled.symbols.size(), 1), 1);
    load_syms[0] = max_rows;
    const std::optional<int64_t> arena_bytes = compiled.arena.CheckedBytesForSymbols(load_syms);
    int64_t instance_bytes = arena_bytes.value_or(0);
    bool fits = arena_bytes.has_value();
    for (const auto& specs : {InputSpecs(config), OutputSpecs(config)}) {
      for (const TensorSpec& spec : specs) {
        std::vector<int64_t> shape;
        if (spec.batched) shape.push_back(max_rows);
        for (int64_t d : spec.dims) shape.push_back(d < 0 ? 1 : d);
        auto bytes = CheckedTensorBytes(spec.dtype, shape);
        fits = fits && bytes.ok() &&
               CheckedAdd(instance_bytes, static_cast<int64_t>(*bytes), &instance_bytes);
      }
    }
    if (!fits || instance_bytes > kMaxInstanceBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "one instance needs ", fits ? absl::StrCat(instance_bytes) : "more than 2^63",
          " bytes of buffers at batch ", max_rows, "; the limit is ", kMaxInstanceBytes,
          " (lower max_batch_size)"));
    }
    return absl::OkStatus();
  }

  // Step 4: links the code into a JIT namespace of its own and carries the version's patches
  // over: the seed's, or (a reload) the predecessor's active stack, which is frozen first so no
  // patch can land on the old build after this copy (a racing one fails with Aborted).
  absl::StatusOr<std::unique_ptr<LoadedModel>> LinkVersion(
      const std::string& name, int64_t version, uint64_t load_index,
      const inference::ModelConfig& config, CompileStep& step, const std::string& path,
      const std::string& bytes, const VersionSeed* seed,
      const std::shared_ptr<ModelVersion>& predecessor) {
    std::string ns = absl::StrCat(name, "/", version);
    if (load_index > 1) absl::StrAppend(&ns, "#", load_index);
    auto loaded = engine->Load(ns, std::move(step.compiled));
    if (!loaded.ok()) return loaded.status();
    // Recompile patches and snapshots rebuild from the source with the same options.
    (*loaded)->set_source(
        std::make_shared<const CodeSource>(CodeSource{path, bytes, step.options}));
    // A profile patch's automatic rollback is a patch event like a rollback by hand.
    (*loaded)->patches().set_auto_rollback_listener(
        [metrics = metrics, name, version, model = loaded->get()](
            uint64_t id, const absl::Status& status, std::chrono::steady_clock::time_point start) {
          PatchEvent event(metrics, observability::PatchKind::kRollback, name, start);
          event.set_version(absl::StrCat(version));
          event.set_detail(
              absl::StrCat("patch ", id, " (profile), automatic at the end of its window"));
          if (!status.ok()) {
            event.Fail(status);
            return;
          }
          event.Done(PatchFunctions(*model, id));
        });
    if (seed != nullptr && seed->before_serving) {
      if (auto s = seed->before_serving(**loaded); !s.ok()) return s;
    } else if (predecessor != nullptr) {
      const std::vector<PatchRecord> stack =
          predecessor->mutable_loaded().patches().Freeze("the version is being reloaded");
      if (!stack.empty()) {
        PatchValidationOptions validation;
        validation.intra_op_threads = SchedulerOptionsFromConfig(config).intra_op_threads;
        for (const std::string& refused :
             ReapplyPatches(**loaded, stack, PatchValidationInputs(**loaded, config), validation)) {
          spdlog::warn("model '{}' version {}: {}", name, version, refused);
        }
      }
    }
    return loaded;
  }

  // Step 5: the executable and its scheduler, with the probes and metrics of every batch
  // (counted only once `live` is set: warm-up executions are not client traffic).
  absl::StatusOr<std::shared_ptr<ModelVersion>> ScheduleVersion(
      const std::string& name, int64_t version, const inference::ModelConfig& config,
      std::unique_ptr<LoadedModel> loaded, const CompileStep& step,
      std::shared_ptr<ModelMetrics> model_metrics, std::shared_ptr<std::atomic<bool>> live) {
    auto created = JitExecutable::Create(loaded.get(), InputSpecs(config), OutputSpecs(config),
                                         inflight_budget);
    if (!created.ok()) return created.status();
    std::shared_ptr<JitExecutable> executable = *std::move(created);
    SchedulerOptions scheduler_options = SchedulerOptionsFromConfig(config);
    auto probe_name = std::make_shared<const std::string>(name);
    scheduler_options.on_batch_start = [probe_name](int64_t rows) {
      CUVIL_PROBE_BATCH_START(probe_name->c_str(), rows);
    };
    scheduler_options.on_batch_done = [probe_name, model_metrics, live](int64_t rows, uint64_t ns,
                                                                        bool ok) {
      CUVIL_PROBE_BATCH_DONE(probe_name->c_str(), rows, ns);
      if (ok && model_metrics && live->load(std::memory_order_relaxed))
        model_metrics->RecordExecution(rows);
    };
    if (metrics != nullptr) {
      scheduler_options.on_reject = [server_metrics = metrics, probe_name](bool queue_full) {
        server_metrics->RecordRejection(*probe_name,
                                        queue_full ? observability::RejectionReason::kQueueFull
                                                   : observability::RejectionReason::kDraining);
      };
    }
    auto scheduler = CreateScheduler(scheduler_options, executable);
    if (!scheduler.ok()) return scheduler.status();
    return std::make_shared<ModelVersion>(name, version, config, std::move(loaded), executable,
                                          std::move(*scheduler), step.compile_ms,
                                          step.compilations);
  }

  // Step 6 (sequence_batching models): the sequence batcher, checkpointing into the snapshot
  // folder's sequence logs when the server has one.
  absl::Status AttachSequences(ModelVersion& model, const std::string& name, int64_t version,
                               const inference::ModelConfig& config, const std::string& model_dir,
                               const std::string& path, const std::string& bytes) {
    auto sequences = SequenceBatcher::Create(config, model_dir);
    if (!sequences.ok()) return sequences.status();
    if (!sequence_checkpoint_dir.empty()) {
      // Inside the snapshot folder, which the server checked is its own (so a failed check
      // here is only logged).
      if (auto s = EnsurePrivateDir(sequence_checkpoint_dir, /*allow_insecure=*/true,
                                    "sequence checkpoint directory", "--insecure-cache-dir");
          !s.ok()) {
        return s;
      }
      // One log per model version: a new build of the version resumes its sequences.
      const std::string log =
          absl::StrCat(sequence_checkpoint_dir, "/", name, ".v", version, ".seqlog");
      auto build = SequenceBuildIdentity(path, bytes);
      if (!build.ok()) return build.status();
      if (auto s = (*sequences)->EnableCheckpoints(log, *build); !s.ok()) return s;
    }
    model.set_sequences(*std::move(sequences));
    return absl::OkStatus();
  }

  // Step 7: the configured warm-up requests (one generated request when there are none).
  absl::Status WarmUpVersion(ModelVersion& model, const inference::ModelConfig& config,
                             const std::string& model_dir) {
    if (config.model_warmup_size() == 0) {
      return RunWarmup(model, nullptr, model_dir, max_request_bytes);
    }
    for (const auto& w : config.model_warmup()) {
      for (uint32_t i = 0; i < std::max<uint32_t>(w.count(), 1); ++i) {
        if (auto s = RunWarmup(model, &w, model_dir, max_request_bytes); !s.ok()) return s;
      }
    }
    return absl::OkStatus();
  }

  // Step 8: the full tier, off the ready path — the tier-up of a quick tier, the join of a quick
  // compile that lost the race to a cached full tier, or the tier-up of a restored quick tier.
  void ScheduleTierUp(const std::shared_ptr<ModelVersion>& model, const std::string& name,
                      int64_t version, CompileStep& step, const std::string& bytes,
                      const VersionSeed* seed) {
    if (step.tier_up) {
      std::weak_ptr<ModelVersion> weak = model;
      tier_ups.Schedule([this, weak, name, version, start = std::move(step.start),
                         lookup_pending = step.lookup_pending] {
        NoThrowTierUp(name, version,
                      [&] { TierUp(weak, name, version, start.get(), lookup_pending); });
      });
    } else if (step.start != nullptr) {
      tier_ups.Schedule([start = std::move(step.start)] {});
    } else if (step.seeded && seed->tier_up && compile_tier != CompileTier::kFast) {
      std::weak_ptr<ModelVersion> weak = model;
      tier_ups.Schedule([this, weak, name, version, bytes, full_options = step.full_options] {
        NoThrowTierUp(name, version,
                      [&] { TierUpRestored(weak, name, version, bytes, full_options); });
      });
    }
  }

  // Compiles, links, schedules and warms up one version, in the steps above. Runs on a loader
  // thread. A `predecessor` (the build of this version serving now: a reload) is frozen once the
  // new code is linked and its active patches are re-applied to the new build, so patches belong
  // to the version, not to one build of it; the caller unfreezes it when this build does not
  // replace it.
  absl::StatusOr<std::shared_ptr<ModelVersion>> BuildVersion(
      const std::string& name, int64_t version, inference::ModelConfig config,
      const std::string& path, const std::string& bytes, uint64_t load_index,
      const std::string& model_dir, const VersionSeed* seed,
      const std::shared_ptr<ModelVersion>& predecessor) {
    absl::StatusOr<CompileStep> step = CompileVersion(name, config, path, bytes, seed);
    if (!step.ok()) return step.status();
    ReportCompile(name, version, *step);
    if (config.name().empty()) config.set_name(name);
    if (auto s = CompleteModelConfig(step->compiled, &config); !s.ok()) return s;
    if (auto s = CheckInstanceFits(step->compiled, config); !s.ok()) return s;
    auto loaded =
        LinkVersion(name, version, load_index, config, *step, path, bytes, seed, predecessor);
    if (!loaded.ok()) return loaded.status();
    std::shared_ptr<ModelMetrics> model_metrics =
        metrics != nullptr ? metrics->ForModel(name, absl::StrCat(version)) : nullptr;
    auto live = std::make_shared<std::atomic<bool>>(false);
    auto model =
        ScheduleVersion(name, version, config, *std::move(loaded), *step, model_metrics, live);
    if (!model.ok()) return model.status();
    if (config.has_sequence_batching()) {
      if (auto s = AttachSequences(**model, name, version, config, model_dir, path, bytes);
          !s.ok()) {
        return s;
      }
    }
    if (auto s = WarmUpVersion(**model, config, model_dir); !s.ok()) return s;
    (*model)->ResetStatsBaseline();
    (*model)->set_metrics(std::move(model_metrics));  // After warmup: not client traffic.
    if ((*model)->sequences() != nullptr) (*model)->sequences()->set_metrics((*model)->metrics());
    live->store(true, std::memory_order_relaxed);
    ScheduleTierUp(*model, name, version, *step, bytes, seed);
    return model;
  }

  // Runs a tier-up task on the tier-up thread: nothing may escape it, and on a throw the quick
  // tier keeps serving (logged).
  static void NoThrowTierUp(const std::string& name, int64_t version,
                            const std::function<void()>& task) {
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("model '{}' version {}: tier-up failed: {}; the quick tier serves", name,
                    version, e.what());
    } catch (...) {
      spdlog::error("model '{}' version {}: tier-up failed; the quick tier serves", name, version);
    }
  }

  // Compiles the full tier of a version serving its quick tier and swaps its kernels in at a safe
  // point (a recompile patch committed as the stack's base: every execution runs entirely on one
  // tier, and patches committed meanwhile keep overriding it). Skipped once the
  // version is gone or the server shuts down; on failure the quick tier keeps serving (logged).
  // `start` is the version's tiered start: a full tier its lookup found is swapped in as cached,
  // else the quick tier's preparation is lowered again (and stored in the JIT cache).
  // `report_lookup`: the lookup was still running at READY, so its outcome is counted here.
  void TierUp(const std::weak_ptr<ModelVersion>& weak, const std::string& name, int64_t version,
              TieredStart* start, bool report_lookup) {
    {
      absl::MutexLock lock(&mu);
      if (shutting_down) return;
    }
    if (weak.expired()) return;
    auto t0 = std::chrono::steady_clock::now();
    CacheLookup lookup, start_lookup;
    auto full = start->TierUp(&lookup, &start_lookup);
    const double compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    // `lookup` is the start's lookup on its hit, else the tier-up's own (which compiled or found
    // an entry another process had written meanwhile).
    if (report_lookup && full.ok()) {
      if (lookup.outcome == CacheOutcome::kMiss) {
        CUVIL_PROBE_CACHE_MISS(name.c_str());
      } else {
        CUVIL_PROBE_CACHE_HIT(name.c_str());
      }
      spdlog::info("model '{}' version {}: JIT cache {} for the full tier (key {})", name, version,
                   CacheOutcomeName(lookup.outcome), lookup.key);
      if (metrics != nullptr) {
        if (lookup.outcome == CacheOutcome::kMiss) {
          metrics->RecordCacheMiss(name);
        } else {
          metrics->RecordCacheHit(name);
        }
      }
    }
    if (report_lookup && metrics != nullptr &&
        (start_lookup.refused_entry || lookup.refused_entry)) {
      metrics->RecordCacheCorrupt(name);
    }
    // The full tier is swapped in even when its entry could not be written (logged by the cache).
    if (lookup.store_failed && metrics != nullptr) metrics->RecordCacheStoreFailure(name);
    SwapInFullTier(weak, name, version, std::move(full), compile_ms, lookup);
  }

  // A restored snapshot taken while its version served the quick tier: compiles the full tier
  // from the snapshot's ONNX source and swaps it in like a tier-up.
  void TierUpRestored(const std::weak_ptr<ModelVersion>& weak, const std::string& name,
                      int64_t version, const std::string& onnx_bytes,
                      const CompileOptions& full_options) {
    {
      absl::MutexLock lock(&mu);
      if (shutting_down) return;
    }
    if (weak.expired()) return;
    auto t0 = std::chrono::steady_clock::now();
    CacheLookup lookup;
    absl::StatusOr<CompiledModel> full = cache != nullptr
                                             ? cache->Compile("", onnx_bytes, full_options, &lookup)
                                             : CompileOnnxBytes(onnx_bytes, full_options);
    const double compile_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    SwapInFullTier(weak, name, version, std::move(full), compile_ms, lookup);
  }

  // Commits `full` beneath the patch stack of the version `weak` names (see TierUp).
  void SwapInFullTier(const std::weak_ptr<ModelVersion>& weak, const std::string& name,
                      int64_t version, absl::StatusOr<CompiledModel> full, double compile_ms,
                      const CacheLookup& lookup) {
    std::shared_ptr<ModelVersion> model = weak.lock();
    if (model == nullptr) return;
    // Observed as a patch event of kind tier_swap; its clock starts after the full-tier compile.
    PatchEvent event(metrics, observability::PatchKind::kTierSwap, name);
    event.set_version(absl::StrCat(version));
    absl::Status status = full.status();
    double switch_us = 0;
    // An admin patch committed meanwhile moves the table on: prepare against the new one.
    for (int attempt = 0; status.ok() && attempt < 3; ++attempt) {
      LoadedModel& loaded = model->mutable_loaded();
      RecompileOptions recompile;
      recompile.opt_level = CompileOptions().opt_level;  // The full tier's.
      const auto prepare_start = std::chrono::steady_clock::now();
      auto patch =
          loaded.patches().PrepareRecompilePatch(*full, {}, RecompileOptionsText(recompile));
      event.ExcludeMs(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                                prepare_start)
                          .count());
      if (!patch.ok()) {
        status = patch.status();
        break;
      }
      auto t1 = std::chrono::steady_clock::now();
      // The full tier replaces the base only: patches committed on the quick tier stay on top.
      auto id = loaded.patches().CommitBasePatch(*std::move(patch), kTierSwapAuthor);
      switch_us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t1).count();
      status = id.status();
      if (!absl::IsAborted(status)) break;
    }
    if (!status.ok()) {
      event.set_detail("full tier not swapped in; the quick tier serves");
      event.Fail(status);
      return;
    }
    if (lookup.outcome == CacheOutcome::kMiss && metrics != nullptr) {
      metrics->RecordCompile(name, compile_ms / 1000);
    }
    event.set_detail(
        absl::StrFormat("full tier swapped in: compile %.1f ms, JIT cache %s, "
                        "table publish %.1f us",
                        compile_ms, CacheOutcomeName(lookup.outcome), switch_us));
    event.Done("");
  }

  // Background full-tier compiles (kTiered). Declared last: joined before anything it uses is
  // destroyed; tasks still queued then see shutting_down and return at once.
  ThreadPool tier_ups{1};
};

namespace {

// A zero drain wait (a forced retire) still lets executions that are merely in flight finish:
// only one running this long is taken for stuck.
constexpr absl::Duration kMinStuckAfter = absl::Seconds(1);

absl::Status StuckStatus(const ModelVersion& m, absl::Duration stuck_after) {
  return absl::UnavailableError(absl::StrFormat(
      "model '%s' version %s was retired while this request's execution had run for over %g s "
      "(a kernel that does not return?); its result will not come",
      m.name(), m.version_string(), absl::ToDoubleSeconds(stuck_after)));
}

}  // namespace

void ModelManager::Impl::Retire(const std::shared_ptr<ModelVersion>& m,
                                const std::shared_ptr<ModelVersion>& successor,
                                std::optional<absl::Duration> timeout) {
  const absl::Duration waited = timeout.value_or(drain_timeout);
  if (m->RetireTo(successor, waited)) return;
  // An execution running this long is stuck (with a zero wait, the operator said so). Their
  // clients are answered now; the threads stay in the kernel (nothing can stop them safely),
  // so the version's code and memory stay until they return.
  const absl::Duration stuck_after = std::max(waited, kMinStuckAfter);
  const int failed = m->AbandonStuck(StuckStatus(*m, stuck_after), stuck_after);
  spdlog::error(
      "model '{}' version {}: requests still running after {} s (a kernel that does not "
      "return?); the version is retired without waiting for them: {} stuck request(s) answered "
      "UNAVAILABLE, queued ones handed on, its code and memory kept until they return",
      m->name(), m->version_string(), absl::ToDoubleSeconds(waited), failed);
  Park(m, stuck_after);
}

void ModelManager::Impl::Park(const std::shared_ptr<ModelVersion>& m, absl::Duration stuck_after) {
  absl::MutexLock lock(&parked_mu);
  parked.push_back({m, stuck_after});
  if (!reaper.joinable() && !stop_reaper) {
    try {
      reaper = std::thread([this] { ReaperLoop(); });
    } catch (const std::system_error& e) {  // No thread now: the next Park tries again.
      spdlog::error("cannot start the thread that frees retired versions: {}", e.what());
    }
  }
}

void ModelManager::Impl::ReaperLoop() {
  for (;;) {
    std::vector<Parked> check;
    {
      absl::MutexLock lock(&parked_mu);
      parked_mu.AwaitWithTimeout(absl::Condition(&stop_reaper), absl::Seconds(1));
      if (stop_reaper) return;
      check = parked;
    }
    std::vector<ModelVersion*> done;
    for (const Parked& p : check) {
      ModelVersion& m = *p.version;
      if (m.Drain(absl::ZeroDuration())) {
        spdlog::info("model '{}' version {}: its last stuck request returned; its memory is freed",
                     m.name(), m.version_string());
        done.push_back(&m);
      } else if (int failed = m.AbandonStuck(StuckStatus(m, p.stuck_after), p.stuck_after)) {
        spdlog::error(
            "model '{}' version {}: {} more request(s) stuck past {} s answered UNAVAILABLE",
            m.name(), m.version_string(), failed, absl::ToDoubleSeconds(p.stuck_after));
      }
    }
    absl::MutexLock lock(&parked_mu);
    // The last reference goes here, on the reaper's thread, never on a worker of the version.
    std::erase_if(parked, [&](const Parked& p) {
      return std::find(done.begin(), done.end(), p.version.get()) != done.end();
    });
  }
}

void ModelManager::Impl::StopReaper() {
  {
    absl::MutexLock lock(&parked_mu);
    stop_reaper = true;
  }
  if (reaper.joinable()) reaper.join();
  absl::MutexLock lock(&parked_mu);
  if (parked.empty()) return;
  // Their threads may still run generated code: never destroy them (the process exits soon).
  static auto* const kept = new std::vector<std::shared_ptr<ModelVersion>>();
  for (const Parked& p : parked) kept->push_back(p.version);
}

size_t ModelManager::StuckVersions() const {
  absl::MutexLock lock(&impl_->parked_mu);
  return impl_->parked.size();
}

ModelManager::ModelManager(JitEngine* engine, const ModelRepository* repository,
                           ModelManagerOptions options)
    : impl_(std::make_unique<Impl>(engine, repository, options)) {}

ModelManager::~ModelManager() { Shutdown(); }

absl::Status ModelManager::Load(const LoadRequest& request) {
  if (auto s = ValidateModelName(request.name); !s.ok()) return s;
  ModelSource source;
  if (request.model_bytes.empty()) {
    if (impl_->repository == nullptr) return absl::NotFoundError("no model repository configured");
    auto found = impl_->repository->Find(request.name);
    if (!found.ok()) return found.status();
    source = std::move(*found);
  } else {
    source.name = request.name;
    for (const auto& [v, bytes] : request.model_bytes) source.version_paths[v] = "";
  }
  inference::ModelConfig config = source.config;
  if (!request.config_pbtxt.empty()) {
    auto parsed = ParseModelConfigText(request.config_pbtxt);
    if (!parsed.ok()) return parsed.status();
    config = std::move(*parsed);
  } else if (!request.config_json.empty()) {
    auto parsed = ParseModelConfigJson(request.config_json);
    if (!parsed.ok()) return parsed.status();
    config = std::move(*parsed);
  }
  if (!config.name().empty() && config.name() != request.name) {
    return absl::InvalidArgumentError(absl::StrCat("config name '", config.name(),
                                                   "' does not match model '", request.name, "'"));
  }
  std::vector<int64_t> available;
  for (const auto& [v, path] : source.version_paths) available.push_back(v);
  std::vector<int64_t> versions =
      request.model_bytes.empty() ? SelectVersions(config.version_policy(), available) : available;
  if (request.only_version != 0) {
    if (std::find(available.begin(), available.end(), request.only_version) == available.end()) {
      return absl::NotFoundError(absl::StrCat("model '", request.name, "' has no version ",
                                              request.only_version, " to load again"));
    }
    versions = {request.only_version};
  }
  if (versions.empty()) {
    return absl::NotFoundError(absl::StrCat("model '", request.name, "' has no loadable version"));
  }

  struct Pending {
    int64_t version;
    uint64_t generation;
    uint64_t load_index;
  };
  std::vector<Pending> pending;
  // Versions the policy no longer selects are unloaded (Triton reload semantics), but only once a
  // selected version is READY, so a reload never leaves the model without a serving version.
  auto retiring = std::make_shared<std::vector<Pending>>();
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->shutting_down) return absl::UnavailableError("server is shutting down");
    if (request.only_version != 0) {
      // One version built again: the model keeps its kind and its other versions.
    } else if (request.model_bytes.empty()) {
      impl_->inline_models.erase(request.name);
    } else {
      impl_->inline_models.insert(request.name);
    }
    impl_->operator_unloaded.erase(request.name);
    auto& slots = impl_->models[request.name];
    for (auto& [v, slot] : slots) {
      if (request.only_version == 0 &&
          std::find(versions.begin(), versions.end(), v) == versions.end() && slot.model) {
        retiring->push_back({v, slot.generation, 0});
      }
    }
    for (int64_t v : versions) {
      Slot& slot = slots[v];
      uint64_t gen = impl_->next_generation++;
      slot.generation = gen;
      if (!slot.model) {
        slot.state = ModelState::kLoading;
        slot.reason.clear();
      }
      pending.push_back({v, gen, ++slot.loads});
    }
  }
  auto remaining = std::make_shared<std::atomic<int>>(static_cast<int>(pending.size()));
  auto done = std::make_shared<absl::Notification>();
  // Runs once, after the last load of this request finished (on whichever thread finished it).
  auto finish = [this, name = request.name, versions, retiring, done] {
    std::vector<std::shared_ptr<ModelVersion>> retired;
    std::shared_ptr<ModelVersion> successor;  // The highest selected version now serving.
    {
      absl::MutexLock lock(&impl_->mu);
      auto& slots = impl_->models[name];
      for (int64_t v : versions) {
        auto it = slots.find(v);
        if (it != slots.end() && it->second.model != nullptr &&
            (successor == nullptr || v > successor->version())) {
          successor = it->second.model;
        }
      }
      const bool serving = successor != nullptr;
      for (const Pending& r : *retiring) {
        Slot& slot = slots[r.version];
        // A later load or unload of this version decides its fate instead.
        if (!serving || slot.generation != r.generation || !slot.model) continue;
        retired.push_back(std::move(slot.model));
        ++slot.generation;
        slot.state = ModelState::kUnavailable;
        slot.reason = "unloaded: not selected by the version policy";
      }
    }
    for (auto& m : retired) {
      impl_->Retire(m, successor);
      if (m->metrics()) m->metrics()->SetReady(false);
    }
    done->Notify();
  };
  auto first_error = std::make_shared<absl::Status>();
  auto error_mu = std::make_shared<absl::Mutex>();
  for (const Pending& p : pending) {
    std::string path = source.version_paths[p.version];
    std::string bytes;
    if (auto it = request.model_bytes.find(p.version); it != request.model_bytes.end())
      bytes = it->second;
    std::string name = request.name;
    std::string model_dir = source.dir;
    std::shared_ptr<const VersionSeed> seed;
    if (auto it = request.seeds.find(p.version); it != request.seeds.end()) {
      seed = std::make_shared<const VersionSeed>(it->second);
    }
    bool scheduled = impl_->loaders.Schedule([this, name, p, config, path, bytes, model_dir, seed,
                                              remaining, finish, first_error, error_mu,
                                              retire_timeout = request.retire_timeout] {
      spdlog::info("loading model {} version {}", name, p.version);
      auto load_start = std::chrono::steady_clock::now();
      std::shared_ptr<ModelVersion> predecessor;
      {
        absl::MutexLock lock(&impl_->mu);
        predecessor = impl_->models[name][p.version].model;
      }
      auto built = impl_->BuildVersionNoThrow(name, p.version, config, path, bytes, p.load_index,
                                              model_dir, seed.get(), predecessor);
      std::shared_ptr<ModelVersion> old;
      {
        absl::MutexLock lock(&impl_->mu);
        Slot& slot = impl_->models[name][p.version];
        if (slot.generation == p.generation) {
          if (built.ok()) {
            old = std::move(slot.model);
            slot.model = *built;
            slot.state = ModelState::kReady;
            slot.reason.clear();
          } else if (!slot.model) {
            slot.state = ModelState::kFailed;
            slot.reason = std::string(built.status().message());
          }
        }
      }
      if (built.ok()) {
        spdlog::info("model {} version {} is READY (compile {:.1f} ms)", name, p.version,
                     (*built)->compile_ms());
        CUVIL_PROBE_MODEL_LOAD(name.c_str(), absl::StrCat(p.version).c_str());
        if (const auto& m = (*built)->metrics()) {
          m->SetReady(true);
          m->SetMemoryBytes(static_cast<int64_t>((*built)->loaded().weights_bytes() +
                                                 (*built)->loaded().model().object_code.size()));
        }
        if (impl_->metrics != nullptr) {
          impl_->metrics->RecordLoad(
              name, absl::StrCat(p.version),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
        }
      } else {
        spdlog::error("model {} version {} failed to load: {}", name, p.version,
                      std::string(built.status().message()));
        absl::MutexLock lock(error_mu.get());
        if (first_error->ok()) *first_error = built.status();
      }
      // A build that did not replace its predecessor leaves it taking patches again.
      if (predecessor != nullptr && predecessor != old)
        predecessor->mutable_loaded().patches().Unfreeze();
      if (old) impl_->Retire(old, built.ok() ? *built : nullptr, retire_timeout);
      old.reset();
      if (--*remaining == 0) finish();
    });
    if (!scheduled) {
      if (--*remaining == 0) finish();
    }
  }
  if (!request.wait) return absl::OkStatus();
  done->WaitForNotification();
  absl::MutexLock lock(error_mu.get());
  if (!first_error->ok()) {
    return absl::Status(first_error->code(), absl::StrCat("failed to load '", request.name,
                                                          "': ", first_error->message()));
  }
  return absl::OkStatus();
}

absl::Status ModelManager::Unload(const std::string& name) {
  return impl_->UnloadModel(name, /*by_operator=*/true);
}

absl::Status ModelManager::Impl::UnloadModel(const std::string& name, bool by_operator) {
  std::vector<std::shared_ptr<ModelVersion>> unloading;
  {
    absl::MutexLock lock(&mu);
    auto it = models.find(name);
    if (it == models.end())
      return absl::NotFoundError(absl::StrCat("model '", name, "' is not known"));
    if (by_operator) operator_unloaded.insert(name);
    for (auto& [v, slot] : it->second) {
      ++slot.generation;  // Cancels a load in progress.
      if (slot.model) unloading.push_back(std::move(slot.model));
      slot.state = ModelState::kUnavailable;
      slot.reason = "unloaded";
    }
  }
  for (auto& m : unloading) {
    Retire(m, nullptr);  // In-flight requests finish; later ones see UNAVAILABLE.
    if (m->metrics()) m->metrics()->SetReady(false);
    CUVIL_PROBE_MODEL_UNLOAD(name.c_str(), absl::StrCat(m->version()).c_str());
  }
  spdlog::info("model {} unloaded", name);
  return absl::OkStatus();
}

void ModelManager::SyncWithRepository() {
  if (impl_->repository == nullptr) return;
  std::set<std::string> on_disk;
  for (const std::string& name : impl_->repository->ListModels()) on_disk.insert(name);
  std::set<std::string> to_load, to_unload;
  {
    absl::ReaderMutexLock lock(&impl_->mu);
    std::set<std::string> known;
    for (const auto& [name, slots] : impl_->models) {
      for (const auto& [v, slot] : slots) {
        if (slot.model || slot.state == ModelState::kLoading || slot.state == ModelState::kFailed) {
          known.insert(name);
        }
      }
    }
    for (const std::string& name : on_disk) {
      if (!known.count(name) && !impl_->operator_unloaded.count(name)) to_load.insert(name);
    }
    for (const std::string& name : known) {
      if (!on_disk.count(name) && !impl_->inline_models.count(name)) to_unload.insert(name);
    }
  }
  for (const std::string& name : to_load) {
    LoadRequest r;
    r.name = name;
    if (auto s = Load(r); !s.ok()) spdlog::error("poll: {}", std::string(s.message()));
  }
  for (const std::string& name : to_unload) {
    spdlog::info("poll: model {} left the repository", name);
    (void)impl_->UnloadModel(name, /*by_operator=*/false);
  }
}

void ModelManager::LoadAll() {
  if (impl_->repository == nullptr) return;
  for (const std::string& name : impl_->repository->ListModels()) {
    LoadRequest request;
    request.name = name;
    if (auto s = Load(request); !s.ok()) {
      absl::MutexLock lock(&impl_->mu);
      auto& slots = impl_->models[name];
      if (slots.empty())
        slots[0] = Slot{ModelState::kFailed, std::string(s.message()), nullptr, 0, 0};
    }
  }
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelManager::Impl::Lookup(
    const std::string& name, const std::string& version, observability::RejectionReason* why,
    bool* known) const {
  using observability::RejectionReason;
  // Every request routes through here: readers share the lock, only loads/unloads take it alone.
  absl::ReaderMutexLock lock(&mu);
  auto it = models.find(name);
  *known = it != models.end();
  if (!*known) {
    *why = RejectionReason::kUnknownModel;
    return absl::NotFoundError(absl::StrCat("unknown model '", name, "'"));
  }
  const auto& slots = it->second;
  if (version.empty() || version == "-1") {
    for (auto s = slots.rbegin(); s != slots.rend(); ++s) {
      if (s->second.model) return s->second.model;
    }
    *why = RejectionReason::kNoReadyVersion;
    return absl::UnavailableError(absl::StrCat("model '", name, "' has no READY version"));
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(version, &v)) {
    *why = RejectionReason::kInvalidVersion;
    return absl::InvalidArgumentError(absl::StrCat("version '", version, "' is not a number"));
  }
  auto s = slots.find(v);
  if (s == slots.end()) {
    *why = RejectionReason::kUnknownVersion;
    return absl::NotFoundError(absl::StrCat("unknown version ", version, " of model '", name, "'"));
  }
  if (!s->second.model) {
    *why = RejectionReason::kVersionUnavailable;
    return absl::UnavailableError(absl::StrCat("model '", name, "' version ", version, " is ",
                                               ModelStateName(s->second.state)));
  }
  return s->second.model;
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelManager::Get(const std::string& name,
                                                                const std::string& version) const {
  observability::RejectionReason why = observability::RejectionReason::kUnknownModel;
  bool known = false;
  return impl_->Lookup(name, version, &why, &known);
}

absl::StatusOr<std::shared_ptr<ModelVersion>> ModelManager::Route(
    const std::string& name, const std::string& version) const {
  observability::RejectionReason why = observability::RejectionReason::kUnknownModel;
  bool known = false;
  auto model = impl_->Lookup(name, version, &why, &known);
  if (model.ok()) return model;
  const std::string key = known ? name : std::string();
  {
    absl::MutexLock lock(&impl_->rejections_mu);
    ++impl_->rejections[key][std::string(observability::RejectionReasonName(why))];
  }
  if (impl_->metrics != nullptr) impl_->metrics->RecordRejection(key, why);
  return model;
}

std::map<std::string, std::map<std::string, uint64_t>> ModelManager::Rejections() const {
  absl::MutexLock lock(&impl_->rejections_mu);
  return impl_->rejections;
}

std::vector<VersionStatus> ModelManager::Index() const {
  absl::ReaderMutexLock lock(&impl_->mu);
  std::vector<VersionStatus> out;
  for (const auto& [name, slots] : impl_->models) {
    for (const auto& [v, slot] : slots) {
      out.push_back(
          {name, v, slot.model ? ModelState::kReady : slot.state, slot.reason, slot.model});
    }
  }
  return out;
}

std::vector<VersionStatus> ModelManager::Versions(const std::string& name) const {
  std::vector<VersionStatus> out;
  for (auto& s : Index()) {
    if (s.name == name) out.push_back(std::move(s));
  }
  return out;
}

void ModelManager::Shutdown() {
  std::vector<std::shared_ptr<ModelVersion>> all;
  {
    absl::MutexLock lock(&impl_->mu);
    impl_->shutting_down = true;
    for (auto& [name, slots] : impl_->models) {
      for (auto& [v, slot] : slots) {
        ++slot.generation;
        if (slot.model) all.push_back(std::move(slot.model));
        slot.state = ModelState::kUnavailable;
      }
    }
  }
  // Every version starts draining at once and they share one deadline: N stuck versions cost
  // one drain timeout, not N.
  const absl::Time deadline = absl::Now() + impl_->drain_timeout;
  for (auto& m : all) m->RetireTo(nullptr, absl::ZeroDuration());
  for (auto& m : all) {
    impl_->Retire(m, nullptr, std::max(deadline - absl::Now(), absl::ZeroDuration()));
  }
  impl_->StopReaper();
}

}  // namespace cuvil
