#include "http_routes.h"

#include <array>

#include "absl/strings/str_split.h"

namespace cuvil {
namespace {

using C = RouteClass;
using R = HttpRouteId;

constexpr std::array kRoutes = {
    HttpRoute{"GET", "", R::kServerMetadata, C::kMetadata},
    HttpRoute{"GET", "health/live", R::kHealthLive, C::kHealth},
    HttpRoute{"GET", "health/ready", R::kHealthReady, C::kHealth},
    HttpRoute{"GET", "models/stats", R::kAllStats, C::kMetadata},
    HttpRoute{"GET", "models/{model}", R::kModelMetadata, C::kMetadata},
    HttpRoute{"GET", "models/{model}/versions/{version}", R::kModelMetadata, C::kMetadata},
    HttpRoute{"GET", "models/{model}/ready", R::kModelReady, C::kHealth},
    HttpRoute{"GET", "models/{model}/versions/{version}/ready", R::kModelReady, C::kHealth},
    HttpRoute{"GET", "models/{model}/stats", R::kModelStats, C::kMetadata},
    HttpRoute{"GET", "models/{model}/versions/{version}/stats", R::kModelStats, C::kMetadata},
    HttpRoute{"GET", "models/{model}/config", R::kModelConfig, C::kMetadata},
    HttpRoute{"GET", "models/{model}/versions/{version}/config", R::kModelConfig, C::kMetadata},
    HttpRoute{"POST", "models/{model}/infer", R::kInfer, C::kInference},
    HttpRoute{"POST", "models/{model}/versions/{version}/infer", R::kInfer, C::kInference},
    HttpRoute{"GET", "systemsharedmemory/status", R::kSharedMemoryStatus, C::kSharedMemory},
    HttpRoute{"GET", "systemsharedmemory/region/{region}/status", R::kSharedMemoryStatus,
              C::kSharedMemory},
    HttpRoute{"POST", "systemsharedmemory/region/{region}/register", R::kSharedMemoryRegister,
              C::kSharedMemory},
    HttpRoute{"POST", "systemsharedmemory/unregister", R::kSharedMemoryUnregister,
              C::kSharedMemory},
    HttpRoute{"POST", "systemsharedmemory/region/{region}/unregister", R::kSharedMemoryUnregister,
              C::kSharedMemory},
    HttpRoute{"GET", "cudasharedmemory/status", R::kCudaSharedMemory, C::kSharedMemory},
    HttpRoute{"GET", "cudasharedmemory/region/{region}/status", R::kCudaSharedMemory,
              C::kSharedMemory},
    HttpRoute{"POST", "cudasharedmemory/region/{region}/register", R::kCudaSharedMemory,
              C::kSharedMemory},
    HttpRoute{"POST", "cudasharedmemory/unregister", R::kCudaSharedMemory, C::kSharedMemory},
    HttpRoute{"POST", "cudasharedmemory/region/{region}/unregister", R::kCudaSharedMemory,
              C::kSharedMemory},
    HttpRoute{"POST", "repository/index", R::kRepositoryIndex, C::kRepository},
    HttpRoute{"POST", "repository/{repo}/index", R::kRepositoryIndex, C::kRepository},
    HttpRoute{"POST", "repository/models/{model}/load", R::kRepositoryLoad, C::kRepository},
    HttpRoute{"POST", "repository/{repo}/models/{model}/load", R::kRepositoryLoad, C::kRepository},
    HttpRoute{"POST", "repository/models/{model}/unload", R::kRepositoryUnload, C::kRepository},
    HttpRoute{"POST", "repository/{repo}/models/{model}/unload", R::kRepositoryUnload,
              C::kRepository},
    HttpRoute{"GET", "admin/models/**", R::kAdminGet, C::kAdmin},
    HttpRoute{"GET", "admin/sequences", R::kAdminGet, C::kAdmin},
    HttpRoute{"POST", "admin/**", R::kAdminPost, C::kAdmin},
};

}  // namespace

TrustPolicy PolicyFor(RouteClass route_class) {
  switch (route_class) {
    case RouteClass::kInference:
    case RouteClass::kMetadata:
    case RouteClass::kHealth:
      return TrustPolicy{};
    case RouteClass::kAdmin:
    case RouteClass::kRepository:
    case RouteClass::kSharedMemory:
    case RouteClass::kUnclassified:
      break;
  }
  return TrustPolicy{.host_and_origin = true, .json_content_type = true, .admin_token = true};
}

TrustPolicy SharedMemoryInferencePolicy() {
  return TrustPolicy{.host_and_origin = true, .json_content_type = false, .admin_token = false};
}

const char* RouteClassName(RouteClass route_class) {
  switch (route_class) {
    case RouteClass::kInference:
      return "inference";
    case RouteClass::kMetadata:
      return "metadata";
    case RouteClass::kHealth:
      return "health";
    case RouteClass::kAdmin:
      return "admin";
    case RouteClass::kRepository:
      return "repository";
    case RouteClass::kSharedMemory:
      return "shared memory";
    case RouteClass::kUnclassified:
      break;
  }
  return "unclassified";
}

absl::Span<const HttpRoute> HttpRoutes() { return kRoutes; }

std::string HttpRouteMatch::Capture(std::string_view name) const {
  for (const auto& [key, value] : captures) {
    if (key == name) return value;
  }
  return "";
}

std::optional<HttpRouteMatch> MatchHttpRoute(std::string_view method,
                                             const std::vector<std::string>& segments) {
  for (const HttpRoute& route : kRoutes) {
    if (route.method != method) continue;
    std::vector<std::string_view> pattern;
    if (!route.pattern.empty()) {
      for (absl::string_view part :
           absl::StrSplit(absl::string_view(route.pattern.data(), route.pattern.size()), '/')) {
        pattern.emplace_back(part.data(), part.size());
      }
    }
    HttpRouteMatch match;
    match.route = &route;
    bool ok = true;
    size_t i = 0;
    for (; i < pattern.size() && ok; ++i) {
      std::string_view want = pattern[i];
      if (want == "**") {
        i = pattern.size() + 1;  // Matches whatever follows.
        break;
      }
      if (i >= segments.size()) {
        ok = false;
      } else if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
        match.captures.emplace_back(want.substr(1, want.size() - 2), segments[i]);
      } else {
        ok = want == segments[i];
      }
    }
    const bool rest = i > pattern.size();
    if (ok && (rest || segments.size() == pattern.size())) return match;
  }
  return std::nullopt;
}

}  // namespace cuvil
