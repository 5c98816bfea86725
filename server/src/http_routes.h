// Private: the HTTP front end's one route table. Every route names its class, and the class alone
// decides what a request must pass before its handler runs (the browser defences of
// front_end_security.h and the admin token), so a new route cannot be added without deciding its
// trust policy, and the policy of a class is written in one place.
#ifndef CUVIL_SERVER_SRC_HTTP_ROUTES_H_
#define CUVIL_SERVER_SRC_HTTP_ROUTES_H_

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

namespace cuvil {

enum class RouteClass {
  kUnclassified = 0,  // Never valid in the table: the route table test fails on it.
  kInference,
  kMetadata,
  kHealth,
  kAdmin,
  kRepository,
  kSharedMemory,
};

// The checks a class of routes gets before its handler runs.
struct TrustPolicy {
  // Host must be a loopback name when bound to loopback, and Origin must match Host (403).
  bool host_and_origin = false;
  // A POST that looks like a browser's must be Content-Type: application/json (415).
  bool json_content_type = false;
  // The admin token, when one is configured (401).
  bool admin_token = false;
};

// The policy of `route_class`: inference, metadata and health get none; admin, repository and
// shared memory get all three (shared memory registration makes the server open and write
// objects the caller names). kUnclassified gets every check. Thread-safe.
TrustPolicy PolicyFor(RouteClass route_class);

// The checks an inference request gets when it names a shared-memory region: the browser
// defences of the shared-memory routes (Host and Origin), since it reads and writes the region
// (binary requests carry other content types, so not the Content-Type rule). Thread-safe.
TrustPolicy SharedMemoryInferencePolicy();

// "inference", "metadata", ... for messages and tests. Thread-safe.
const char* RouteClassName(RouteClass route_class);

enum class HttpRouteId {
  kServerMetadata,
  kHealthLive,
  kHealthReady,
  kModelReady,
  kAllStats,
  kModelMetadata,
  kModelStats,
  kModelConfig,
  kInfer,
  kSharedMemoryStatus,
  kSharedMemoryRegister,
  kSharedMemoryUnregister,
  kCudaSharedMemory,
  kRepositoryIndex,
  kRepositoryLoad,
  kRepositoryUnload,
  kAdminGet,
  kAdminPost,
};

struct HttpRoute {
  std::string_view method;  // "GET" or "POST".
  // The path after "/v2/", segments separated by '/': a literal, "{name}" (any one segment,
  // captured as `name`) or a final "**" (any number of further segments, handled by the route).
  std::string_view pattern;
  HttpRouteId id;
  RouteClass route_class;
};

// Every route, in match order (the first match wins). Thread-safe.
absl::Span<const HttpRoute> HttpRoutes();

struct HttpRouteMatch {
  const HttpRoute* route = nullptr;
  // The "{name}" segments, by name; "model", "version", "region", "repo".
  std::vector<std::pair<std::string_view, std::string>> captures;

  // The captured segment `name`, or "" when the pattern has none.
  std::string Capture(std::string_view name) const;
};

// The first route of `method` whose pattern matches `segments` (the path's segments after "v2"),
// or nullopt. Thread-safe.
std::optional<HttpRouteMatch> MatchHttpRoute(std::string_view method,
                                             const std::vector<std::string>& segments);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_HTTP_ROUTES_H_
