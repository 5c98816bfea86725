// Private: the HTTP front end's connection stage (plaintext or TLS). One epoll thread accepts
// connections, enforces the connection caps, reads each request's header block under a deadline and
// waits out keep-alive idle time, so that no handler thread is held by a client that has not yet
// sent a complete request; health probes are answered on that thread, without a handler thread at
// all. A request whose header block is complete goes to a handler thread as an httplib::Stream that
// replays the buffered bytes and reads the body under a minimum transfer rate.
#ifndef CUVIL_SERVER_SRC_HTTP_CONNECTION_REACTOR_H_
#define CUVIL_SERVER_SRC_HTTP_CONNECTION_REACTOR_H_

#include <httplib.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace cuvil {

// What one client connection may cost the server. Zero disables a cap or a rate.
struct HttpConnectionLimits {
  // A request's whole header block (request line and headers) must arrive within this, counted
  // from the accept or from the request's first byte on a kept-alive connection. Also the grace
  // before the body's minimum rate applies and the longest a response write may make no progress.
  int64_t header_timeout_ms = 10'000;
  // A kept-alive connection waiting for its next request is closed after this.
  int64_t idle_timeout_ms = 30'000;
  // After header_timeout_ms, a request body must have arrived at this average rate.
  int64_t body_min_bytes_per_second = 16 << 10;
  // Open connections in all; at the cap the connection idle or in its headers longest is closed
  // to admit the new one (a new health probe always gets in unless every connection is in a
  // handler). Clamped below the process's open-file limit.
  int max_connections = 4096;
  // Open connections from one client address; more are refused with 503.
  int max_connections_per_address = 512;
  // A larger header block is refused with 431.
  int64_t max_header_bytes = 64 << 10;
};

// PEM files for TLS: a certificate chain and its key; with client_ca_file, clients must present
// a certificate that CA signed (mutual TLS).
struct HttpTlsFiles {
  std::string cert_file;
  std::string key_file;
  std::string client_ca_file;
};

class HttpConnectionReactor {
 public:
  // Serves one request from `stream` (its header block is buffered) on a handler thread; true
  // when the connection may be kept alive for another request. Must not throw.
  using ServeFn = std::function<bool(httplib::Stream& stream)>;
  // The status for a GET of `path` (no query) answered on the connection thread itself — health
  // and readiness — or nullopt to hand the request to a handler. Must be cheap, non-blocking and
  // must not throw.
  using ProbeFn = std::function<std::optional<int>(std::string_view path)>;

  // Binds `bind_address`:`port` (0: any free port) and starts the connection thread and
  // `threads` handler threads; with `tls`, connections are TLS (the handshake counts against the
  // header deadline). Unavailable when the address cannot be bound; InvalidArgument when the TLS
  // files cannot be used.
  static absl::StatusOr<std::unique_ptr<HttpConnectionReactor>> Start(
      const std::string& bind_address, int port, const HttpConnectionLimits& limits, int threads,
      ServeFn serve, ProbeFn probe, const HttpTlsFiles* tls = nullptr);

  HttpConnectionReactor(const HttpConnectionReactor&) = delete;
  HttpConnectionReactor& operator=(const HttpConnectionReactor&) = delete;
  // Stops (see Stop()).
  ~HttpConnectionReactor();

  // The bound port. Thread-safe.
  int port() const { return port_; }
  // Stops accepting, lets requests in handlers finish (a body still arriving is cut) and closes
  // every connection. Idempotent; thread-safe.
  void Stop();

  class Impl;

 private:
  HttpConnectionReactor() = default;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_HTTP_CONNECTION_REACTOR_H_
