// cuvil-server: serves compiled ONNX models over KServe v2 gRPC and HTTP.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "allocator_policy.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/jitcache/snapshot.h"
#include "cuvil/observability/logging.h"
#include "cuvil/server/server.h"
#include "model_name.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace {

constexpr char kHelp[] =
    "usage: cuvil-server [flags]\n"
    "  --model-repository DIR      model repository (repeatable)\n"
    "  --model-name NAME           the model of a repository folder that holds model.onnx\n"
    "                              itself, as KServe's storage initializer leaves /mnt/models\n"
    "                              (default model)\n"
    "  --grpc-port N               gRPC port (default 8001; 0 picks a free port)\n"
    "  --http-port N               HTTP port (default 8000)\n"
    "  --metrics-port N            Prometheus metrics port (default 8002)\n"
    "  --bind ADDRESS              address to listen on (default 127.0.0.1)\n"
    "  --fill-jit-cache            compile the startup models into --jit-cache-dir and exit\n"
    "                              (0 when every one loaded, 1 otherwise) without listening:\n"
    "                              an init container or image build step for replicas that\n"
    "                              then start warm (entries fit this cuvil-server build only)\n"
    "  --model-control-mode MODE   none | explicit | poll (default none)\n"
    "  --load-model NAME           model to load at start in explicit mode (repeatable)\n"
    "  --repository-poll-secs N    poll interval in poll mode (default 15)\n"
    "  --admin-token-file FILE     require 'authorization: Bearer <token>' for admin calls\n"
    "  --insecure-admin            allow a non-loopback --bind without --admin-token-file, and\n"
    "                              IR patches, snapshots and restores without a token\n"
    "  --tls-cert FILE             serve gRPC and HTTP over TLS with this PEM certificate\n"
    "  --tls-key FILE              the certificate's PEM private key (with --tls-cert)\n"
    "  --tls-client-ca FILE        require client certificates signed by this CA (mutual TLS)\n"
    "                              (admin and repository calls then need no token)\n"
    "  --max-request-bytes N       largest HTTP body or gRPC message, also the largest gRPC\n"
    "                              response (default 67108864)\n"
    "  --max-snapshot-bytes N      largest snapshot artifact the admin API or --snapshot-dir\n"
    "                              restores; it travels in 1 MiB chunks (default 1073741824,\n"
    "                              at most 2147483647)\n"
    "  --grpc-max-concurrent-calls N  gRPC calls in progress at once; more get\n"
    "                              RESOURCE_EXHAUSTED (default 512)\n"
    "  --grpc-max-streams-per-connection N  streams one gRPC connection may have open at\n"
    "                              once (its client's further calls wait); more lets one\n"
    "                              client make gRPC buffer more messages (default: see\n"
    "                              --max-inflight-bytes)\n"
    "  --max-inflight-bytes N      bytes all requests in flight may hold together, gRPC's\n"
    "                              receive buffers included: half of N is set aside for those\n"
    "                              (a resource quota of N/5, which bursts overshoot), the rest\n"
    "                              is reserved by requests (a gRPC ModelInfer or stream\n"
    "                              message its bytes, an HTTP request its body and parsed\n"
    "                              JSON, each its response's outputs, until answered); a\n"
    "                              request past it gets RESOURCE_EXHAUSTED / HTTP 503 +\n"
    "                              Retry-After at once. gRPC messages above N/10 are refused\n"
    "                              (keep N at least 10 x --max-request-bytes), and a gRPC\n"
    "                              connection may open N/4 / --max-request-bytes streams at\n"
    "                              once (4 to 128) (default a quarter of physical memory;\n"
    "                              0: unlimited)\n"
    "  --exit-timeout-secs N       drain time on SIGTERM/SIGINT (default 30)\n"
    "  --http-threads N            HTTP handler threads; a request holds one while its body\n"
    "                              is read and it is served (idle and slow connections hold\n"
    "                              none) (default 32). Thread sizes are logged at start\n"
    "                              (docs/serving.md, \"Thread budget\"): every gRPC method\n"
    "                              runs on one completion-queue thread per core (loads,\n"
    "                              unloads, patches and snapshots on 4 threads of their own),\n"
    "                              a model's execution uses instances x intra-op threads <=\n"
    "                              cores by default\n"
    "  --http-header-timeout-secs N  an HTTP request's whole header block must arrive\n"
    "                              within N seconds, else the connection is closed; also the\n"
    "                              grace before the body rate applies (default 10)\n"
    "  --http-idle-timeout-secs N  close kept-alive HTTP connections idle this long (default 30)\n"
    "  --http-body-min-rate N      after the grace, HTTP bodies must arrive at N bytes/s on\n"
    "                              average (default 16384; 0: only N idle seconds per read)\n"
    "  --http-max-connections N    open HTTP connections in all; at the cap the longest idle\n"
    "                              or slowest one is closed for the new one (default 4096,\n"
    "                              lowered to fit `ulimit -n`)\n"
    "  --http-max-connections-per-address N  open HTTP connections from one client address;\n"
    "                              more are refused with 503 (default 512; 0: no cap)\n"
    "  --log-level LEVEL           trace | debug | info | warn | error (default info)\n"
    "  --log-format FORMAT         text | json (default text; one line per event on stderr)\n"
    "  --jit-cache-dir DIR         persistent JIT cache (default $XDG_CACHE_HOME/cuvil or\n"
    "                              ~/.cache/cuvil); several servers may share it\n"
    "  --jit-cache-max-bytes N     evict least recently used cache entries above N bytes\n"
    "                              (default 4 GiB; 0: unlimited)\n"
    "  --no-jit-cache              compile every model (no disk or in-memory cache)\n"
    "  --insecure-cache-dir        use a --jit-cache-dir or --snapshot-dir that another user\n"
    "                              owns or group/others may write (refused by default: their\n"
    "                              files run as native code); files there are written 0600\n"
    "  --compile-tier TIER         full (default): one compile at full optimisation; fast: one\n"
    "                              quick compile; tiered: READY after the quick compile, the\n"
    "                              full tier compiled in the background and swapped in at a\n"
    "                              safe point (a cached full tier is loaded directly)\n"
    "  --snapshot-dir DIR          snapshot every version there after each load, patch and\n"
    "                              rollback, and restore them on start (restarts come back\n"
    "                              patched)\n"
    "  --metrics-compat triton     also export Triton's nv_inference_* metric names\n"
    "  --metrics-window-secs N     sliding window of the latency summary (default 60)\n";

int Usage(const std::string& why) {
  std::fprintf(stderr, "error: %s\n%s", why.c_str(), kHelp);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  cuvil::PinAllocatorThresholds();  // Before any thread: unloaded models' memory is returned.
  // Debian's Abseil is built with its debug checks, so every Mutex lock and destruction would
  // update the global deadlock graph (about 4% of the server's CPU under load, bench/serving.md).
  // The tests keep the detection; the server does not pay for it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  cuvil::ServerOptions options;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string log_level = "info";
  std::string log_format = "text";
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", kHelp);
      return 0;
    }
    if (flag == "--insecure-admin") {  // A switch: takes no value.
      options.insecure_admin = true;
      continue;
    }
    if (flag == "--no-jit-cache") {
      options.jit_cache = false;
      continue;
    }
    if (flag == "--insecure-cache-dir") {  // A switch: takes no value.
      options.insecure_cache_dir = true;
      continue;
    }
    if (flag == "--fill-jit-cache") {  // A switch: takes no value.
      options.fill_jit_cache = true;
      continue;
    }
    std::string value;
    if (auto eq = flag.find('='); eq != std::string::npos) {
      value = flag.substr(eq + 1);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return Usage(absl::StrCat(flag, " needs a value"));
    }
    std::string name = flag.substr(0, flag.find('='));
    auto int_flag = [&](auto* out) {
      int64_t v = 0;
      using T = std::remove_pointer_t<decltype(out)>;
      if (!absl::SimpleAtoi(value, &v) || v < 0 || !std::in_range<T>(v)) return false;
      *out = static_cast<T>(v);
      return true;
    };
    bool ok = true;
    if (name == "--model-repository") {
      options.model_repositories.push_back(value);
    } else if (name == "--model-name") {
      options.model_name = value;
      ok = !value.empty();
    } else if (name == "--jit-cache-dir") {
      options.jit_cache_dir = value;
      ok = !value.empty();
    } else if (name == "--snapshot-dir") {
      options.snapshot_dir = value;
      ok = !value.empty();
    } else if (name == "--jit-cache-max-bytes") {
      ok = int_flag(&options.jit_cache_max_bytes);
    } else if (name == "--compile-tier") {
      auto tier = cuvil::ParseCompileTier(value);
      ok = tier.ok();
      if (ok) options.compile_tier = *tier;
    } else if (name == "--grpc-port") {
      ok = int_flag(&options.grpc_port);
    } else if (name == "--http-port") {
      ok = int_flag(&options.http_port);
    } else if (name == "--metrics-port") {
      ok = int_flag(&options.metrics_port);
    } else if (name == "--bind") {
      options.bind_address = value;
    } else if (name == "--model-control-mode") {
      if (value == "none")
        options.control_mode = cuvil::ServerOptions::ControlMode::kNone;
      else if (value == "explicit")
        options.control_mode = cuvil::ServerOptions::ControlMode::kExplicit;
      else if (value == "poll")
        options.control_mode = cuvil::ServerOptions::ControlMode::kPoll;
      else
        ok = false;
    } else if (name == "--load-model") {
      if (absl::Status s = cuvil::ValidateModelName(value); !s.ok()) {
        return Usage(std::string(s.message()));
      }
      options.load_models.push_back(value);
    } else if (name == "--repository-poll-secs") {
      ok = int_flag(&options.poll_interval_secs) && options.poll_interval_secs > 0;
    } else if (name == "--admin-token-file") {
      std::ifstream f(value);
      if (!f) return Usage(absl::StrCat("cannot read admin token file ", value));
      std::getline(f, options.admin_token);
      if (options.admin_token.empty())
        return Usage(absl::StrCat("admin token file ", value, " is empty"));
    } else if (name == "--tls-cert") {
      options.tls_cert_file = value;
    } else if (name == "--tls-key") {
      options.tls_key_file = value;
    } else if (name == "--tls-client-ca") {
      options.tls_client_ca_file = value;
    } else if (name == "--max-request-bytes") {
      ok = int_flag(&options.max_request_bytes) && options.max_request_bytes > 0;
    } else if (name == "--max-snapshot-bytes") {
      ok = int_flag(&options.max_snapshot_bytes) && options.max_snapshot_bytes > 0 &&
           static_cast<uint64_t>(options.max_snapshot_bytes) <= cuvil::kMaxSnapshotBytesLimit;
    } else if (name == "--exit-timeout-secs") {
      ok = int_flag(&options.exit_timeout_secs);
    } else if (name == "--max-inflight-bytes") {
      ok = int_flag(&options.max_inflight_bytes);
    } else if (name == "--grpc-max-concurrent-calls") {
      ok = int_flag(&options.grpc_max_concurrent_calls) && options.grpc_max_concurrent_calls > 0;
    } else if (name == "--grpc-max-streams-per-connection") {
      ok = int_flag(&options.grpc_max_streams_per_connection) &&
           options.grpc_max_streams_per_connection > 0;
    } else if (name == "--http-threads") {
      ok = int_flag(&options.http_threads) && options.http_threads > 0;
    } else if (name == "--http-header-timeout-secs") {
      ok = int_flag(&options.http_header_timeout_secs) && options.http_header_timeout_secs > 0;
    } else if (name == "--http-idle-timeout-secs") {
      ok = int_flag(&options.http_idle_timeout_secs) && options.http_idle_timeout_secs > 0;
    } else if (name == "--http-body-min-rate") {
      ok = int_flag(&options.http_body_min_bytes_per_sec) &&
           options.http_body_min_bytes_per_sec >= 0;
    } else if (name == "--http-max-connections") {
      ok = int_flag(&options.http_max_connections) && options.http_max_connections > 0;
    } else if (name == "--http-max-connections-per-address") {
      ok = int_flag(&options.http_max_connections_per_address) &&
           options.http_max_connections_per_address >= 0;
    } else if (name == "--log-level") {
      log_level = value;
    } else if (name == "--log-format") {
      log_format = value;
    } else if (name == "--metrics-compat") {
      ok = value == "triton";
      options.metrics_triton_compat = ok;
    } else if (name == "--metrics-window-secs") {
      ok = int_flag(&options.metrics_window_secs) && options.metrics_window_secs > 0;
    } else {
      return Usage(absl::StrCat("unknown flag ", name));
    }
    if (!ok) return Usage(absl::StrCat("bad value '", value, "' for ", name));
  }
  if (options.model_repositories.empty() &&
      options.control_mode != cuvil::ServerOptions::ControlMode::kExplicit) {
    return Usage("--model-repository is required");
  }
  // Logs go to stderr so stdout stays free; tests parse the "listening ..." line there.
  spdlog::set_default_logger(spdlog::stderr_logger_mt("cuvil"));
  if (auto s = cuvil::observability::ConfigureLogging(log_level, log_format); !s.ok()) {
    return Usage(std::string(s.message()));
  }

  if (options.jit_cache && options.jit_cache_dir.empty()) {
    // The default folder is a convenience: when it cannot be used, cache in memory only.
    auto dir = cuvil::DefaultJitCacheDir();
    std::error_code ec;
    if (dir.ok() && (std::filesystem::create_directories(*dir, ec), !ec) &&
        access(dir->c_str(), W_OK) == 0) {
      options.jit_cache_dir = *dir;
    } else {
      spdlog::warn("no usable default JIT cache folder ({}); caching in memory only",
                   dir.ok() ? *dir + ": " + (ec ? ec.message() : "not writable")
                            : std::string(dir.status().message()));
    }
  }

  // Signals are taken synchronously by the main thread; every other thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  if (options.fill_jit_cache && (!options.jit_cache || options.jit_cache_dir.empty())) {
    return Usage("--fill-jit-cache needs a usable --jit-cache-dir");
  }
  auto server = cuvil::CuvilServer::Start(options);
  if (!server.ok()) {
    spdlog::error("cannot start: {}", std::string(server.status().message()));
    return 1;
  }
  if (options.fill_jit_cache) {
    (*server)->Shutdown();
    return 0;
  }
  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("received signal {}, draining (up to {} s)", sig, options.exit_timeout_secs);
  // Shutdown waits for requests, connections and versions with the exit timeout each; a thread
  // stuck in a kernel that never returns must not keep the process from exiting.
  const int watchdog_secs = 2 * std::max(1, options.exit_timeout_secs) + 10;
  std::thread([watchdog_secs] {
    std::this_thread::sleep_for(std::chrono::seconds(watchdog_secs));
    spdlog::error(
        "shutdown still not finished after {} s (an execution that never returns?); "
        "exiting now",
        watchdog_secs);
    // Flush only: spdlog::shutdown() drops the default logger under threads still logging.
    spdlog::default_logger_raw()->flush();
    _exit(1);
  }).detach();
  (*server)->Shutdown();
  if (const size_t stuck = (*server)->models()->StuckVersions(); stuck > 0) {
    // Their threads may still run generated code, which destructors would unmap under them.
    spdlog::warn("{} model version(s) still have requests running; exiting without unloading them",
                 stuck);
    spdlog::default_logger_raw()->flush();
    _exit(0);
  }
  return 0;
}
