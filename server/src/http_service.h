// Private: the HTTP/REST front end (KServe v2 routes, Triton extensions, /v2/admin/...).
#ifndef CUVIL_SERVER_SRC_HTTP_SERVICE_H_
#define CUVIL_SERVER_SRC_HTTP_SERVICE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "admin_operations.h"
#include "cuvil/server/model_manager.h"
#include "http_connection_reactor.h"
#include "server_info.h"

namespace cuvil {

class InflightBudget;
class SharedMemoryRegistry;

struct HttpServiceOptions {
  std::string bind_address = "127.0.0.1";
  int port = 8000;  // 0: pick a free port.
  int64_t max_request_bytes = 64 << 20;
  // The server-wide budget of request bytes in flight, shared with gRPC (outliving the service;
  // null: unlimited). A request reserves its body (the declared Content-Length before a byte of
  // it is read, a chunked body as its chunks arrive) and what parsing its JSON may take, and
  // holds them until its response has gone out; past the budget it gets 503 with Retry-After at
  // once (413 when it alone is larger than the budget), as gRPC gets RESOURCE_EXHAUSTED.
  InflightBudget* inflight_budget = nullptr;
  int threads = 8;
  // Deadlines and connection caps for slow, idle and numerous clients.
  HttpConnectionLimits limits;
  // PEM file paths; empty cert: plaintext HTTP. With client_ca_file, clients must present a
  // certificate that CA signed (mutual TLS).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
};

// Thread-safe. Serves until Stop() or destruction.
class HttpService {
 public:
  // Binds and starts serving on background threads; `shared_memory` (outliving the service)
  // holds the system shared memory regions. Unavailable if the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpService>> Start(const HttpServiceOptions& options,
                                                            ModelManager* models,
                                                            AdminOperations* admin,
                                                            const ServerInfo* info,
                                                            SharedMemoryRegistry* shared_memory);
  virtual ~HttpService() = default;
  // The bound port (resolved when 0 was asked for).
  virtual int port() const = 0;
  // Stops accepting and waits for handlers in progress.
  virtual void Stop() = 0;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_HTTP_SERVICE_H_
