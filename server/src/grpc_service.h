// Private: the gRPC front end — inference.GRPCInferenceService, grpc.health.v1.Health and
// cuvil.admin.v1.ModelAdmin on one port.
#ifndef CUVIL_SERVER_SRC_GRPC_SERVICE_H_
#define CUVIL_SERVER_SRC_GRPC_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "admin_operations.h"
#include "cuvil/server/model_manager.h"
#include "server_info.h"

namespace cuvil {

class InflightBudget;
class SharedMemoryRegistry;

struct GrpcServiceOptions {
  std::string bind_address = "127.0.0.1";
  int port = 8001;  // 0: pick a free port.
  // Largest message accepted and sent; larger ones get RESOURCE_EXHAUSTED.
  int64_t max_request_bytes = 64 << 20;
  // Largest artifact RestoreSnapshotStream accepts (its chunks each obey max_request_bytes).
  int64_t max_snapshot_bytes = int64_t{4} << 30;
  // Calls in progress at once (a stream counts while open); more get RESOURCE_EXHAUSTED.
  int max_concurrent_calls = 512;
  // Largest message received, when below max_request_bytes (0: max_request_bytes): a message
  // near the resource quota may be reset by the transport (InflightBudgetSplit).
  int64_t max_receive_bytes = 0;
  // The server-wide budget of request bytes in flight (outliving the service; null: unlimited).
  // A ModelInfer reserves its message's bytes once gRPC has read it, and the bytes of its
  // response's outputs before it runs, and holds them until its response has gone out; a call
  // that would cross the budget gets RESOURCE_EXHAUSTED at once.
  InflightBudget* inflight_budget = nullptr;
  // gRPC's own receive buffers obey a resource quota of this many bytes (0: none); the budget
  // above does not count them (InflightBudgetSplit).
  uint64_t resource_quota_bytes = 0;
  // Streams one HTTP/2 connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS; 0:
  // gRPC's default, no limit); a client's further calls wait for one to finish.
  int max_streams_per_connection = 0;
  // Threads polling the completion queue every method is served on (ThreadBudget's
  // grpc_threads); each runs the calls it reads, so no call takes a thread of its own.
  int threads = 2;
  // Threads running the calls that block — model loads and unloads, patches, snapshots —
  // off the polling threads (ThreadBudget's grpc_blocking_threads).
  int blocking_threads = 4;
  // PEM contents; empty cert: plaintext. With client_ca_pem, clients must present a certificate
  // that CA signed (mutual TLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_client_ca_pem;
};

// Thread-safe.
class GrpcService {
 public:
  // Binds and starts serving; `shared_memory` (outliving the service) holds the system shared
  // memory regions. Unavailable if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<GrpcService>> Start(const GrpcServiceOptions& options,
                                                            ModelManager* models,
                                                            AdminOperations* admin,
                                                            const ServerInfo* info,
                                                            SharedMemoryRegistry* shared_memory);
  virtual ~GrpcService() = default;
  virtual int port() const = 0;
  // Stops accepting; calls in progress get until `deadline_ms` from now to finish.
  virtual void Stop(int64_t deadline_ms) = 0;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_SERVICE_H_
