#include "front_end_security.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cuvil {
namespace {

constexpr absl::string_view kJsonMediaType = "application/json";

// A host and port taken from a Host header or an Origin.
struct Authority {
  std::string host;  // Lower case; IPv6 without brackets.
  int port = 0;
};

// Header values are client text: escape and shorten them before they go into a message.
std::string Shown(absl::string_view value) {
  constexpr size_t kShown = 100;
  std::string shown = absl::CHexEscape(value.substr(0, kShown));
  if (value.size() > kShown) shown += "...";
  return shown;
}

// Parses "host", "host:port", "[v6]" or "[v6]:port"; `default_port` when no port is given.
std::optional<Authority> ParseAuthority(absl::string_view text, int default_port) {
  Authority a;
  absl::string_view port;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find(']');
    if (close == absl::string_view::npos) return std::nullopt;
    a.host = std::string(text.substr(1, close - 1));
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::nullopt;
      port = rest.substr(1);
    }
  } else {
    const size_t colon = text.find(':');
    a.host = std::string(text.substr(0, colon));
    if (colon != absl::string_view::npos) port = text.substr(colon + 1);
  }
  if (a.host.empty()) return std::nullopt;
  absl::AsciiStrToLower(&a.host);
  // A fully qualified name may end in a dot; "localhost." is "localhost".
  if (a.host.size() > 1 && a.host.back() == '.') a.host.pop_back();
  a.port = default_port;
  if (!port.empty()) {
    if (!std::all_of(port.begin(), port.end(), [](char c) { return absl::ascii_isdigit(c); }) ||
        !absl::SimpleAtoi(port, &a.port) || a.port <= 0 || a.port > 65535) {
      return std::nullopt;
    }
  }
  return a;
}

// Parses a serialized origin "scheme://host[:port]" (what browsers send).
std::optional<Authority> ParseOrigin(absl::string_view origin) {
  const size_t sep = origin.find("://");
  if (sep == absl::string_view::npos) return std::nullopt;
  std::string scheme = absl::AsciiStrToLower(origin.substr(0, sep));
  int default_port = scheme == "https" ? 443 : scheme == "http" ? 80 : 0;
  if (default_port == 0) return std::nullopt;
  absl::string_view rest = origin.substr(sep + 3);
  if (absl::EndsWith(rest, "/")) rest.remove_suffix(1);
  if (rest.find_first_of("/?#@") != absl::string_view::npos) return std::nullopt;
  return ParseAuthority(rest, default_port);
}

absl::string_view MediaType(absl::string_view content_type) {
  return absl::StripAsciiWhitespace(content_type.substr(0, content_type.find(';')));
}

}  // namespace

bool IsLoopbackHost(absl::string_view host) {
  std::string h = absl::AsciiStrToLower(host);
  if (h.size() > 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (h.size() > 1 && h.back() == '.') h.pop_back();
  if (h == "localhost") return true;
  in_addr v4{};
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, h.c_str(), &v6) == 1) {
    if (IN6_IS_ADDR_LOOPBACK(&v6)) return true;
    return IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127;
  }
  return false;
}

bool IsLoopbackBindAddress(absl::string_view address) { return IsLoopbackHost(address); }

absl::Status CheckAdminExposure(absl::string_view bind_address, bool has_admin_token,
                                bool insecure_admin) {
  if (has_admin_token || insecure_admin || IsLoopbackBindAddress(bind_address)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to bind ", bind_address,
      " without an admin token: anyone who can reach it could load and unload models. Pass "
      "--admin-token-file FILE, or --insecure-admin to serve admin calls without a token "
      "anyway"));
}

std::optional<RouteRejection> CheckAdminRoute(const AdminRouteRequest& request,
                                              bool loopback_bound) {
  std::optional<Authority> host;
  if (request.host != nullptr) {
    host = ParseAuthority(*request.host, 80);
    if (!host.has_value()) {
      return RouteRejection{403,
                            absl::StrCat("malformed Host header '", Shown(*request.host), "'")};
    }
    if (loopback_bound && !IsLoopbackHost(host->host)) {
      return RouteRejection{
          403,
          absl::StrCat("Host '", Shown(*request.host),
                       "' is not a loopback name; this server is bound to loopback and "
                       "answers admin, repository and shared-memory calls for localhost only")};
    }
  }
  if (request.origin != nullptr) {
    std::optional<Authority> origin = ParseOrigin(*request.origin);
    if (!origin.has_value() || !host.has_value() || origin->host != host->host ||
        origin->port != host->port) {
      return RouteRejection{
          403, absl::StrCat(
                   "cross-origin admin, repository and shared-memory calls are refused (Origin '",
                   Shown(*request.origin), "')")};
    }
  }
  // Browsers send Origin with every POST, so a POST with neither Origin nor Content-Type comes
  // from a plain client (tritonclient sends no Content-Type on repository calls) and passes.
  const bool plain_client = request.origin == nullptr && request.content_type == nullptr;
  if (request.is_post && !plain_client) {
    if (request.content_type == nullptr ||
        !absl::EqualsIgnoreCase(MediaType(*request.content_type), kJsonMediaType)) {
      return RouteRejection{
          415, absl::StrCat("admin, repository and shared-memory calls need 'Content-Type: "
                            "application/json' (got ",
                            request.content_type == nullptr
                                ? std::string("none")
                                : absl::StrCat("'", Shown(*request.content_type), "'"),
                            ")")};
    }
  }
  return std::nullopt;
}

}  // namespace cuvil
