// Private: the Prometheus scrape port. GET /metrics over the same connection stage as the HTTP
// front end (HttpConnectionReactor), so slow and idle clients of this port are cut at the same
// deadlines and capped the same way instead of holding its handler threads.
#ifndef CUVIL_SERVER_SRC_METRICS_LISTENER_H_
#define CUVIL_SERVER_SRC_METRICS_LISTENER_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "cuvil/observability/exposition.h"
#include "http_connection_reactor.h"

namespace cuvil {

class MetricsListener {
 public:
  // Renders the scrape for an Accept header value. Called on a handler thread; must not throw.
  using RenderFn = std::function<observability::RenderedMetrics(const std::string& accept)>;

  // Binds `bind_address`:`port` (0: any free port) and serves GET /metrics from `render` on
  // `threads` handler threads, every other path 404 and every other method 405, under `limits`.
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsListener>> Start(const std::string& bind_address,
                                                                int port,
                                                                const HttpConnectionLimits& limits,
                                                                int threads, RenderFn render);

  MetricsListener(const MetricsListener&) = delete;
  MetricsListener& operator=(const MetricsListener&) = delete;
  // Stops (see Stop()).
  ~MetricsListener();

  // The bound port. Thread-safe.
  int port() const { return reactor_->port(); }
  // Stops accepting, lets scrapes in progress finish and closes every connection. Idempotent;
  // thread-safe.
  void Stop() { reactor_->Stop(); }

 private:
  class Server;
  MetricsListener() = default;
  std::unique_ptr<Server> server_;  // Outlives the reactor, whose threads call it.
  std::unique_ptr<HttpConnectionReactor> reactor_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_METRICS_LISTENER_H_
