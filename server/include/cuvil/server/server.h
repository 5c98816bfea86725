// cuvil-server: the model registry behind gRPC, HTTP and metrics listeners.
#ifndef CUVIL_SERVER_SERVER_H_
#define CUVIL_SERVER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

struct ServerOptions {
  enum class ControlMode { kNone, kExplicit, kPoll };
  std::vector<std::string> model_repositories;
  // The name of the model in a repository folder that holds model.onnx itself (KServe's storage
  // initializer layout in /mnt/models; its ServingRuntime passes --model-name={{.Name}}).
  std::string model_name = "model";
  std::string bind_address = "127.0.0.1";
  int grpc_port = 8001;  // 0: pick a free port (as for the others).
  int http_port = 8000;
  int metrics_port = 8002;
  ControlMode control_mode = ControlMode::kNone;
  std::vector<std::string> load_models;  // Explicit mode: models loaded at start.
  std::string admin_token;               // Empty: admin calls need no token.
  // Allows a non-loopback bind_address without an admin token (admin calls open to the network),
  // and, without a token, the admin calls that run or reveal native code (IR patches, snapshots,
  // restores), which are otherwise refused even on loopback: any local user could make them.
  bool insecure_admin = false;
  // Largest HTTP body or gRPC message accepted (HTTP 413 / RESOURCE_EXHAUSTED above it); also
  // the largest gRPC response.
  int64_t max_request_bytes = 64 << 20;
  // Largest snapshot artifact the admin API restores (gRPC RestoreSnapshotStream, in chunks that
  // each obey max_request_bytes); bounds the memory one restore call may take. Also the largest
  // file snapshot_dir restores. At most 2^31-1 (protobuf's limit): larger artifacts are refused.
  int64_t max_snapshot_bytes = int64_t{1} << 30;
  // gRPC calls in progress at once (an open stream counts as one); more get RESOURCE_EXHAUSTED.
  int grpc_max_concurrent_calls = 512;
  // Streams one gRPC connection may have open at once; further calls of its client wait. 0: as
  // many as fill a quarter of max_inflight_bytes with messages of max_request_bytes, 4 to 128
  // (InflightBudgetSplit). More streams a connection means more messages gRPC may buffer for it.
  int grpc_max_streams_per_connection = 0;
  // Bytes all requests in flight may hold together, gRPC's own receive buffers included: half of
  // it is set aside for those (a resource quota of a fifth, which bursts overshoot up to 2.5
  // times), gRPC messages above a tenth are refused and a gRPC connection may have a quarter of it
  // divided by max_request_bytes streams open (4 to 128; InflightBudgetSplit). Against the rest,
  // a gRPC ModelInfer (or ModelStreamInfer message) reserves its message's bytes once gRPC has
  // read it, an HTTP request its body before buffering it (a chunked one as it arrives) and what
  // its JSON may take once parsed, and each what its response's outputs will take before it
  // runs, and holds them until its response has gone out; past the budget a call gets
  // RESOURCE_EXHAUSTED, an HTTP request 503 with Retry-After, at once (413 when it alone is
  // larger than the budget). -1: a quarter of physical memory; 0: unlimited.
  int64_t max_inflight_bytes = -1;
  // TLS for gRPC and HTTP (PEM files): both cert and key, or neither. With tls_client_ca, clients
  // must present a certificate that CA signed (mutual TLS). The metrics port stays plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  int exit_timeout_secs = 30;
  int poll_interval_secs = 15;
  int loader_threads = 1;
  // HTTP handler threads; a request holds one while its body is read and it is served (idle and
  // slow connections hold none).
  int http_threads = 32;
  // HTTP slow- and idle-client limits (see HttpConnectionLimits): the whole header block within
  // http_header_timeout_secs, bodies at http_body_min_bytes_per_sec after that, kept-alive
  // connections closed after http_idle_timeout_secs, and caps on open connections in all and per
  // client address (0: no cap).
  int http_header_timeout_secs = 10;
  int http_idle_timeout_secs = 30;
  int64_t http_body_min_bytes_per_sec = 16 << 10;
  int http_max_connections = 4096;
  int http_max_connections_per_address = 512;
  // Persistent JIT cache folder; empty keeps compiled models in memory only (cuvil-server's
  // --jit-cache-dir defaults to $XDG_CACHE_HOME/cuvil). jit_cache false turns the cache off.
  std::string jit_cache_dir;
  bool jit_cache = true;
  // Use jit_cache_dir and snapshot_dir even when another user owns them or group/others may write
  // them (by default the server refuses to start: their files are run as native code).
  bool insecure_cache_dir = false;
  // LRU eviction above it (0: unlimited). Bounded by default: every rebuild of the compiler keys
  // new entries, so an unbounded directory would only grow.
  uint64_t jit_cache_max_bytes = uint64_t{4} << 30;
  // --compile-tier: full (default), fast, or tiered (quick compile first, full tier swapped in).
  CompileTier compile_tier = CompileTier::kFull;
  // Context snapshots: every version is snapshotted here after each change (load, patch,
  // rollback) and restored from here on start. Empty: off.
  std::string snapshot_dir;
  bool metrics_triton_compat = false;  // Also export Triton's nv_inference_* names.
  int metrics_window_secs = 60;        // Sliding window of the latency summary.
  // --fill-jit-cache: compile the startup models into jit_cache_dir and serve nothing (an init
  // container or image build step, so replicas start on a warm cache). See CuvilServer::Start.
  bool fill_jit_cache = false;
};

// Thread-safe.
class CuvilServer {
 public:
  // Binds every listener, then loads the startup models (per control mode). Fails if a port
  // cannot be bound, and with FailedPrecondition if bind_address is not loopback while there is
  // neither an admin token nor insecure_admin; a model that fails to load is reported in the
  // index, not fatal.
  // With fill_jit_cache it binds nothing and restores no snapshot: it loads the startup models at
  // the full tier (storing their code in jit_cache_dir) and returns a server that serves nothing,
  // or FailedPrecondition naming every model version that did not load (NotFound when the
  // repository selects none, InvalidArgument without a cache folder). The stored entries are
  // keyed by this binary's build, so only the same cuvil-server build hits them.
  static absl::StatusOr<std::unique_ptr<CuvilServer>> Start(const ServerOptions& options);
  ~CuvilServer();

  int grpc_port() const;
  int http_port() const;
  int metrics_port() const;
  ModelManager* models();

  // Marks the server not ready, stops accepting, drains in-flight requests for up to
  // exit_timeout_secs and unloads every model. Idempotent.
  void Shutdown();

 private:
  CuvilServer();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SERVER_H_
