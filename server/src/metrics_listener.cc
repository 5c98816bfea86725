#include "metrics_listener.h"

#include <httplib.h>

#include <utility>

namespace cuvil {

// httplib's parsing and routing over a stream the connection reactor hands it (its own accept
// loop would hold a thread per connection, which slow clients exhaust).
class MetricsListener::Server final : public httplib::Server {
 public:
  explicit Server(RenderFn render) : render_(std::move(render)) {
    set_keep_alive_max_count(100000);
    Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
      observability::RenderedMetrics rendered = render_(req.get_header_value("Accept"));
      res.set_content(rendered.body, rendered.content_type);
    });
    // Only GET reads no body; anything else is refused before httplib would read one.
    set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
      if (req.method == "GET" || req.method == "HEAD") return HandlerResponse::Unhandled;
      res.status = 405;
      res.set_header("Allow", "GET");
      res.set_content("only GET /metrics is served here\n", "text/plain");
      return HandlerResponse::Handled;
    });
    set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      res.status = 500;
      res.set_content("internal error\n", "text/plain");
    });
  }

  // Serves one request; true when the connection may carry another.
  bool ServeOne(httplib::Stream& stream) {
    bool closed = false;
    const bool ok = process_request(stream, /*close_connection=*/false, closed, nullptr);
    return ok && !closed;
  }

 private:
  RenderFn render_;
};

absl::StatusOr<std::unique_ptr<MetricsListener>> MetricsListener::Start(
    const std::string& bind_address, int port, const HttpConnectionLimits& limits, int threads,
    RenderFn render) {
  std::unique_ptr<MetricsListener> listener(new MetricsListener());
  listener->server_ = std::make_unique<Server>(std::move(render));
  // Advertised in the Keep-Alive header; the reactor enforces it.
  listener->server_->set_keep_alive_timeout(std::max<time_t>(1, limits.idle_timeout_ms / 1000));
  Server* server = listener->server_.get();
  auto reactor = HttpConnectionReactor::Start(
      bind_address, port, limits, threads,
      [server](httplib::Stream& stream) { return server->ServeOne(stream); },
      [](std::string_view) { return std::nullopt; });
  if (!reactor.ok()) return reactor.status();
  listener->reactor_ = *std::move(reactor);
  return listener;
}

MetricsListener::~MetricsListener() {
  if (reactor_ != nullptr) reactor_->Stop();
}

}  // namespace cuvil
