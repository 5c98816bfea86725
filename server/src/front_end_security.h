// Private: the checks that keep admin and repository calls away from browsers and from other
// hosts — the bind/token rule at start-up and the per-request Host / Origin / Content-Type rules
// of the HTTP front end. Pure functions, kept apart so they can be unit-tested without sockets.
#ifndef CUVIL_SERVER_SRC_FRONT_END_SECURITY_H_
#define CUVIL_SERVER_SRC_FRONT_END_SECURITY_H_

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cuvil {

// True when `address` (a --bind value) accepts connections from this host only: "localhost",
// an address in 127.0.0.0/8, or ::1 (bracketed or not). Thread-safe.
bool IsLoopbackBindAddress(absl::string_view address);

// True when `host` (a host name or address, IPv6 in brackets or not, no port) names this host
// over loopback: "localhost", 127.0.0.0/8, ::1 or ::ffff:127.x.y.z. Thread-safe.
bool IsLoopbackHost(absl::string_view host);

// FailedPrecondition, explaining the flags, when admin calls would be reachable from other hosts
// without a token: a non-loopback bind, no admin token and no explicit `insecure_admin`.
// Thread-safe.
absl::Status CheckAdminExposure(absl::string_view bind_address, bool has_admin_token,
                                bool insecure_admin);

// What the browser defences need of one HTTP request to an admin, repository or shared-memory
// route (or an inference naming a shared-memory region). Each pointer is null when the header is
// absent.
struct AdminRouteRequest {
  // A POST whose Content-Type is checked; false skips the Content-Type rule.
  bool is_post = false;
  const std::string* host = nullptr;
  const std::string* origin = nullptr;
  const std::string* content_type = nullptr;
};

// Why a request was refused: the HTTP status (403 or 415) and a message for the client.
struct RouteRejection {
  int http_status = 0;
  std::string message;
};

// Checks, in order: with `loopback_bound`, a Host header must name a loopback host (defeats DNS
// rebinding, 403); an Origin header must name the same host:port the request was sent to, i.e.
// its Host (a cross-origin browser page, 403); a POST must have Content-Type application/json
// (a "simple" cross-origin form or fetch cannot send it without a preflight, 415) unless it
// carries neither Origin nor Content-Type (browsers always send Origin on POST; Triton's clients
// send no Content-Type). Requests without Host or Origin are not from browsers and pass those
// checks. nullopt: allowed.
// Thread-safe.
std::optional<RouteRejection> CheckAdminRoute(const AdminRouteRequest& request,
                                              bool loopback_bound);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_FRONT_END_SECURITY_H_
