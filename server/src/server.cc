#include "cuvil/server/server.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "admin_operations.h"
#include "cuvil/jitcache/private_dir.h"
#include "cuvil/observability/server_metrics.h"
#include "cuvil/server/model_config.h"
#include "front_end_security.h"
#include "grpc_service.h"
#include "http_service.h"
#include "inflight_budget.h"
#include "metrics_listener.h"
#include "model_name.h"
#include "server_info.h"
#include "shared_memory_registry.h"
#include "snapshot_store.h"
#include "spdlog/spdlog.h"
#include "thread_budget.h"

namespace cuvil {

struct CuvilServer::Impl {
  ServerOptions options;
  ServerInfo info;
  std::unique_ptr<observability::ServerMetrics> metrics_registry;
  std::unique_ptr<JitEngine> engine;
  std::unique_ptr<ObjectCache> cache;  // Outlives the model manager (declared before it).
  std::unique_ptr<ModelRepository> repository;
  // Requests' bytes in flight, shared by the front ends and the executions' scratch memory.
  // Declared before the model manager and the services so it outlives their calls.
  std::unique_ptr<InflightBudget> inflight_budget;
  std::unique_ptr<ModelManager> models;
  std::unique_ptr<AdminOperations> admin;
  std::unique_ptr<SnapshotStore> snapshots;  // --snapshot-dir; stopped before the models unload.
  // Outlives the front ends (declared before them); made when the options are known.
  std::unique_ptr<SharedMemoryRegistry> shared_memory;
  std::unique_ptr<GrpcService> grpc;
  std::unique_ptr<HttpService> http;
  // The scrape port, on the HTTP front end's connection limits. Stopped before the models unload.
  std::unique_ptr<MetricsListener> metrics;
  int metrics_port = 0;
  absl::Notification stop_polling;
  std::thread poll_thread;
  bool shut_down = false;

  // Gauges that are cheaper to read at scrape time than to keep current on every request.
  observability::RenderedMetrics RenderMetrics(const std::string& accept) {
    for (const VersionStatus& v : models->Index()) {
      if (!v.model || !v.model->metrics()) continue;
      v.model->metrics()->SetPending(static_cast<int64_t>(v.model->Stats().pending));
    }
    return metrics_registry->Render(accept);
  }

  // Poll mode: load models that appeared, unload repository models that disappeared.
  void PollRepository() {
    while (
        !stop_polling.WaitForNotificationWithTimeout(absl::Seconds(options.poll_interval_secs))) {
      models->SyncWithRepository();
    }
  }
};

CuvilServer::CuvilServer() : impl_(std::make_unique<Impl>()) {}

CuvilServer::~CuvilServer() { Shutdown(); }

namespace {

// The startup loads --model-control-mode selects (every repository model, or the --load-model
// ones); a model that fails is logged and left in the index as failed. Returns the messages of
// the --load-model loads that failed (a name the repository lacks is in no index).
std::vector<std::string> LoadStartupModels(ModelManager& models, const ServerOptions& options) {
  std::vector<std::string> failed;
  switch (options.control_mode) {
    case ServerOptions::ControlMode::kNone:
    case ServerOptions::ControlMode::kPoll:
      models.LoadAll();
      break;
    case ServerOptions::ControlMode::kExplicit:
      for (const std::string& name : options.load_models) {
        LoadRequest r;
        r.name = name;
        if (auto st = models.Load(r); !st.ok()) {
          spdlog::error("{}", std::string(st.message()));
          failed.emplace_back(st.message());
        }
      }
      break;
  }
  return failed;
}

// --fill-jit-cache: OK when every selected model version loaded (so its code is in the cache).
// `failed` holds the loads that failed before reaching the index.
absl::Status CheckFilled(const ModelManager& models, const ServerOptions& options,
                         std::vector<std::string> failed) {
  int ready = 0;
  for (const VersionStatus& v : models.Index()) {
    if (v.state == ModelState::kReady) {
      ++ready;
    } else {
      failed.push_back(absl::StrCat(v.name, " version ", v.version, " (", ModelStateName(v.state),
                                    v.reason.empty() ? "" : ": ", v.reason, ")"));
    }
  }
  if (!failed.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--fill-jit-cache: ", failed.size(),
                     " model version(s) did not load: ", absl::StrJoin(failed, "; ")));
  }
  if (ready == 0) {
    return absl::NotFoundError("--fill-jit-cache: the repository selects no model to compile");
  }
  spdlog::info("JIT cache {} filled: {} model version(s) compiled or already there",
               options.jit_cache_dir, ready);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CuvilServer>> CuvilServer::Start(const ServerOptions& given) {
  ServerOptions options = given;
  if (options.fill_jit_cache) {
    if (!options.jit_cache || options.jit_cache_dir.empty()) {
      return absl::InvalidArgumentError(
          "--fill-jit-cache needs a JIT cache folder (--jit-cache-dir)");
    }
    // The cache keeps the full tier; a tiered replica loads a cached full tier directly. Nothing
    // is served, so nothing is snapshotted or restored.
    options.compile_tier = CompileTier::kFull;
    options.snapshot_dir.clear();
  }
  // Before anything starts: admin calls must not be open to the network by accident (a cache
  // fill listens nowhere).
  if (absl::Status exposed = CheckAdminExposure(options.bind_address, !options.admin_token.empty(),
                                                options.insecure_admin);
      !exposed.ok() && !options.fill_jit_cache) {
    return exposed;
  }
  if (options.insecure_admin && !IsLoopbackBindAddress(options.bind_address) &&
      options.admin_token.empty()) {
    spdlog::warn("admin and repository calls on {} need no token (--insecure-admin)",
                 options.bind_address);
  }
  // TLS material is read up front so a bad path fails the start with a message, not a listener.
  std::string tls_cert, tls_key, tls_client_ca;
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError("TLS needs both --tls-cert and --tls-key");
  }
  if (options.tls_cert_file.empty() && !options.tls_client_ca_file.empty()) {
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  for (auto [path, pem] :
       {std::pair{&options.tls_cert_file, &tls_cert}, std::pair{&options.tls_key_file, &tls_key},
        std::pair{&options.tls_client_ca_file, &tls_client_ca}}) {
    if (path->empty()) continue;
    std::ifstream f(*path, std::ios::binary);
    std::ostringstream text;
    text << f.rdbuf();
    if (!f || text.str().find("-----BEGIN") == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read PEM file ", *path));
    }
    *pem = text.str();
  }
  std::unique_ptr<CuvilServer> server(new CuvilServer());
  Impl& s = *server->impl_;
  s.options = options;
  s.info.admin_token = options.admin_token;
  observability::ServerMetricsOptions metrics_options;
  metrics_options.version = s.info.version;
  metrics_options.llvm = "19.1";
  metrics_options.triton_compat = options.metrics_triton_compat;
  metrics_options.latency_summary.window_ns = int64_t{options.metrics_window_secs} * 1'000'000'000;
  s.metrics_registry = std::make_unique<observability::ServerMetrics>(metrics_options);
  auto engine = JitEngine::Create();
  if (!engine.ok()) return engine.status();
  s.engine = std::move(*engine);
  if (options.jit_cache) {
    ObjectCacheOptions cache_options;
    cache_options.dir = options.jit_cache_dir;
    cache_options.max_bytes = options.jit_cache_max_bytes;
    cache_options.insecure_dir = options.insecure_cache_dir;
    auto cache = ObjectCache::Create(cache_options);
    if (!cache.ok()) return cache.status();
    s.cache = std::move(*cache);
    spdlog::info("JIT cache: {}", options.jit_cache_dir.empty() ? std::string("in memory only")
                                                                : options.jit_cache_dir);
  }
  // --max-inflight-bytes is one total: gRPC's receive buffers get a share of it as their
  // resource quota, the requests' own bytes the rest (InflightBudgetSplit says why).
  const InflightBudgetSplit split = SplitInflightBudget(
      options.max_inflight_bytes < 0 ? InflightBudget::DefaultLimit()
                                     : static_cast<uint64_t>(options.max_inflight_bytes),
      static_cast<uint64_t>(options.max_request_bytes));
  s.inflight_budget = std::make_unique<InflightBudget>(
      split.requests, split.total == 0 ? std::string("--max-inflight-bytes")
                                       : absl::StrCat("--max-inflight-bytes ", split.total,
                                                      " less ", split.grpc_set_aside,
                                                      " set aside for gRPC's receive buffers"));
  if (absl::Status named = ValidateModelName(options.model_name); !named.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-name \"", options.model_name, "\": ", named.message()));
  }
  s.repository = std::make_unique<ModelRepository>(options.model_repositories, options.model_name);
  ModelManagerOptions manager_options;
  manager_options.loader_threads = options.loader_threads;
  manager_options.metrics = s.metrics_registry.get();
  manager_options.max_request_bytes = static_cast<uint64_t>(options.max_request_bytes);
  // A version still running after the exit timeout is retired without waiting (see
  // drain_timeout): an unload, a reload or SIGTERM never waits for ever on a stuck kernel.
  manager_options.drain_timeout = absl::Seconds(std::max(1, options.exit_timeout_secs));
  manager_options.cache = s.cache.get();
  manager_options.compile_tier = options.compile_tier;
  manager_options.inflight_budget = s.inflight_budget.get();
  if (!options.snapshot_dir.empty()) {
    // Open sequences are checkpointed beside the snapshots, as private as they are.
    // (created when a model with sequence batching first loads)
    manager_options.sequence_checkpoint_dir = options.snapshot_dir + "/sequences";
    if (auto st = EnsurePrivateDir(options.snapshot_dir, options.insecure_cache_dir,
                                   "snapshot directory", "--insecure-cache-dir");
        !st.ok()) {
      return st;
    }
  }
  s.models = std::make_unique<ModelManager>(s.engine.get(), s.repository.get(), manager_options);
  s.admin = std::make_unique<AdminOperations>(s.models.get(), options.admin_token,
                                              s.metrics_registry.get(), options.insecure_admin);
  const uint64_t max_snapshot_bytes =
      std::min<uint64_t>(static_cast<uint64_t>(std::max<int64_t>(options.max_snapshot_bytes, 0)),
                         kMaxSnapshotBytesLimit);
  s.admin->set_max_snapshot_bytes(max_snapshot_bytes);
  if (!options.snapshot_dir.empty()) {
    auto store = SnapshotStore::Create(options.snapshot_dir, s.models.get(),
                                       options.insecure_cache_dir, max_snapshot_bytes);
    if (!store.ok()) return store.status();
    s.snapshots = std::move(*store);
    s.admin->set_snapshot_store(s.snapshots.get());
    spdlog::info("snapshots: {}", options.snapshot_dir);
  }

  if (options.fill_jit_cache) {
    if (absl::Status filled =
            CheckFilled(*s.models, options, LoadStartupModels(*s.models, options));
        !filled.ok()) {
      return filled;
    }
    return server;
  }
  // The start-up loads run beside the listeners' start (issue 41): a load from a warm JIT cache
  // takes about as long as starting gRPC, HTTP and their threads, so the replica is ready sooner.
  // Health checks answer "not ready" until they are done, as when the loads followed the
  // listeners. A listener that fails to start returns only after the loads end (the guard joins).
  std::thread startup_loads;
  try {
    startup_loads = std::thread([&s, &options] { LoadStartupModels(*s.models, options); });
  } catch (const std::system_error& e) {  // No thread to spare: load here, before the listeners.
    spdlog::warn("cannot start the start-up load thread ({}); loading first", e.what());
    LoadStartupModels(*s.models, options);
  }
  absl::Cleanup join_startup_loads = [&startup_loads] {
    if (startup_loads.joinable()) startup_loads.join();
  };

  GrpcServiceOptions grpc_options;
  grpc_options.bind_address = options.bind_address;
  grpc_options.port = options.grpc_port;
  grpc_options.max_request_bytes = options.max_request_bytes;
  grpc_options.max_snapshot_bytes = options.max_snapshot_bytes;
  grpc_options.max_concurrent_calls = options.grpc_max_concurrent_calls;
  grpc_options.inflight_budget = s.inflight_budget.get();
  grpc_options.resource_quota_bytes = split.grpc_quota;
  grpc_options.max_streams_per_connection = options.grpc_max_streams_per_connection > 0
                                                ? options.grpc_max_streams_per_connection
                                                : split.grpc_streams_per_connection;
  if (split.total == 0) {
    spdlog::info("requests in flight may hold any number of bytes (--max-inflight-bytes 0)");
  } else {
    spdlog::info(
        "requests in flight may hold {} bytes (--max-inflight-bytes): {} for requests and their "
        "responses, {} set aside for gRPC's receive buffers (a resource quota of {}, which a "
        "burst overshoots; {} streams per connection)",
        split.total, split.requests, split.grpc_set_aside, split.grpc_quota,
        grpc_options.max_streams_per_connection);
  }
  if (split.grpc_message_lowered) {
    grpc_options.max_receive_bytes = static_cast<int64_t>(split.grpc_max_message);
    spdlog::warn(
        "gRPC messages are limited to {} bytes, not --max-request-bytes {}: gRPC's receive "
        "buffers get a quota of {} (a fifth of --max-inflight-bytes {}), and a message above "
        "half of it may be reset by the transport; give --max-inflight-bytes at least 10 times "
        "--max-request-bytes to take messages of that size",
        split.grpc_max_message, options.max_request_bytes, split.grpc_quota, split.total);
  }
  if (split.requests_below_max_request) {
    spdlog::warn(
        "requests above {} bytes will be refused (HTTP 413, RESOURCE_EXHAUSTED) although "
        "--max-request-bytes is {}: that is all --max-inflight-bytes {} leaves requests beside "
        "gRPC's receive buffers",
        split.requests, options.max_request_bytes, split.total);
  }
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const ThreadBudget budget = ComputeThreadBudget(cores, options.http_threads);
  grpc_options.threads = budget.grpc_threads;
  grpc_options.blocking_threads = budget.grpc_blocking_threads;
  spdlog::info("{}", DescribeThreadBudget(budget));
  grpc_options.tls_cert_pem = tls_cert;
  grpc_options.tls_key_pem = tls_key;
  grpc_options.tls_client_ca_pem = tls_client_ca;
  SharedMemoryLimits shm_limits;
  shm_limits.max_request_input_bytes = static_cast<uint64_t>(options.max_request_bytes);
  s.shared_memory = std::make_unique<SharedMemoryRegistry>(shm_limits);
  auto grpc = GrpcService::Start(grpc_options, s.models.get(), s.admin.get(), &s.info,
                                 s.shared_memory.get());
  if (!grpc.ok()) return grpc.status();
  s.grpc = std::move(*grpc);
  HttpServiceOptions http_options;
  http_options.bind_address = options.bind_address;
  http_options.port = options.http_port;
  http_options.max_request_bytes = options.max_request_bytes;
  http_options.inflight_budget = s.inflight_budget.get();
  http_options.threads = budget.http_threads;
  http_options.limits.header_timeout_ms = int64_t{options.http_header_timeout_secs} * 1000;
  http_options.limits.idle_timeout_ms = int64_t{options.http_idle_timeout_secs} * 1000;
  http_options.limits.body_min_bytes_per_second = options.http_body_min_bytes_per_sec;
  http_options.limits.max_connections = options.http_max_connections;
  http_options.limits.max_connections_per_address = options.http_max_connections_per_address;
  http_options.tls_cert_file = options.tls_cert_file;
  http_options.tls_key_file = options.tls_key_file;
  http_options.tls_client_ca_file = options.tls_client_ca_file;
  auto http = HttpService::Start(http_options, s.models.get(), s.admin.get(), &s.info,
                                 s.shared_memory.get());
  if (!http.ok()) return http.status();
  s.http = std::move(*http);
  // One handler thread: a scrape is short and Prometheus scrapes one at a time.
  auto metrics = MetricsListener::Start(
      options.bind_address, options.metrics_port, http_options.limits, /*threads=*/1,
      [&s](const std::string& accept) { return s.RenderMetrics(accept); });
  if (!metrics.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot bind metrics to ", options.bind_address, ":",
                                               options.metrics_port, ": ",
                                               metrics.status().message()));
  }
  s.metrics = *std::move(metrics);
  s.metrics_port = s.metrics->port();

  spdlog::info("listening grpc={}:{} http={}:{} metrics={}:{}", options.bind_address,
               s.grpc->port(), options.bind_address, s.http->port(), options.bind_address,
               s.metrics_port);

  // The listeners answer health checks (not ready yet) while the start-up loads finish.
  std::move(join_startup_loads).Invoke();
  if (s.snapshots != nullptr) {
    // After the startup loads: a snapshot replaces the unpatched version they loaded.
    s.snapshots->RestoreAll();
    s.snapshots->SyncAll();
    s.snapshots->StartWatching(absl::Milliseconds(500));
  }
  if (options.control_mode == ServerOptions::ControlMode::kPoll) {
    s.poll_thread = std::thread([&s] { s.PollRepository(); });
  }
  for (const VersionStatus& v : s.models->Index()) {
    if (v.model == nullptr) continue;
    spdlog::info("{}", DescribeModelThreads(v.name, v.version,
                                            SchedulerOptionsFromConfig(v.model->config()), cores));
  }
  s.info.ready = true;
  spdlog::info("server ready");
  return server;
}

int CuvilServer::grpc_port() const { return impl_->grpc->port(); }
int CuvilServer::http_port() const { return impl_->http->port(); }
int CuvilServer::metrics_port() const { return impl_->metrics_port; }
ModelManager* CuvilServer::models() { return impl_->models.get(); }

void CuvilServer::Shutdown() {
  Impl& s = *impl_;
  if (s.shut_down) return;
  s.shut_down = true;
  s.info.ready = false;
  if (s.poll_thread.joinable()) {
    s.stop_polling.Notify();
    s.poll_thread.join();
  }
  int64_t deadline_ms = int64_t{s.options.exit_timeout_secs} * 1000;
  // The front ends wait for their calls in progress. A call whose execution never returns (a
  // kernel stuck in a loop) is answered only when its version is retired, so if they have not
  // stopped by the exit timeout, the models are retired under them.
  absl::Notification front_ends_stopped;
  auto rescue = [&s, &front_ends_stopped, deadline_ms] {
    if (front_ends_stopped.WaitForNotificationWithTimeout(absl::Milliseconds(deadline_ms) +
                                                          absl::Seconds(1))) {
      return;
    }
    spdlog::warn("requests still in progress after the exit timeout: retiring the models");
    // Unloading at exit is not an unload an operator asked for: the snapshots stay.
    if (s.snapshots) s.snapshots->StopWatching();
    if (s.models) s.models->Shutdown();
  };
  std::thread rescuer;
  try {
    rescuer = std::thread(rescue);
  } catch (const std::system_error& e) {
    spdlog::error("cannot start the shutdown watchdog: {}", e.what());
  }
  if (s.grpc) s.grpc->Stop(deadline_ms);
  if (s.http) s.http->Stop();
  front_ends_stopped.Notify();
  if (rescuer.joinable()) rescuer.join();
  if (s.metrics) s.metrics->Stop();
  if (s.snapshots) {
    // Unloading at exit is not an unload an operator asked for: the snapshots stay.
    if (s.admin) s.admin->set_snapshot_store(nullptr);
    s.snapshots.reset();
  }
  if (s.models) s.models->Shutdown();
  spdlog::info("server stopped");
}

}  // namespace cuvil
