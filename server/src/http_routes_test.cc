#include "http_routes.h"

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

std::vector<std::string> Segments(std::string_view path) {
  return absl::StrSplit(absl::string_view(path.data(), path.size()), '/', absl::SkipEmpty());
}

RouteClass ClassOf(std::string_view method, std::string_view path) {
  std::optional<HttpRouteMatch> m = MatchHttpRoute(method, Segments(path));
  return m.has_value() ? m->route->route_class : RouteClass::kUnclassified;
}

TEST(HttpRoutesTest, EveryRouteHasAClassAndMatchesItself) {
  ASSERT_FALSE(HttpRoutes().empty());
  std::set<std::pair<std::string_view, std::string_view>> seen;
  for (const HttpRoute& route : HttpRoutes()) {
    SCOPED_TRACE(std::string(route.method) + " " + std::string(route.pattern));
    EXPECT_NE(route.route_class, RouteClass::kUnclassified) << "every route must declare a class";
    EXPECT_STRNE(RouteClassName(route.route_class), "unclassified");
    EXPECT_TRUE(route.method == "GET" || route.method == "POST");
    EXPECT_TRUE(seen.insert({route.method, route.pattern}).second) << "duplicate route";
    // A concrete path built from the pattern reaches this route (not an earlier one).
    std::string path;
    for (absl::string_view part :
         absl::StrSplit(absl::string_view(route.pattern.data(), route.pattern.size()), '/',
                        absl::SkipEmpty())) {
      path += "/";
      path += part == "**" ? "models" : (part.front() == '{' ? "x" : std::string(part));
    }
    std::optional<HttpRouteMatch> m = MatchHttpRoute(route.method, Segments(path));
    ASSERT_TRUE(m.has_value()) << path;
    EXPECT_EQ(m->route->id, route.id) << path;
    EXPECT_EQ(m->route->route_class, route.route_class) << path;
  }
}

TEST(HttpRoutesTest, ClassesOfTheKnownRoutes) {
  EXPECT_EQ(ClassOf("GET", "health/live"), RouteClass::kHealth);
  EXPECT_EQ(ClassOf("GET", "health/ready"), RouteClass::kHealth);
  EXPECT_EQ(ClassOf("GET", "models/mlp/ready"), RouteClass::kHealth);
  EXPECT_EQ(ClassOf("GET", "models/mlp/versions/1/ready"), RouteClass::kHealth);
  EXPECT_EQ(ClassOf("GET", ""), RouteClass::kMetadata);
  EXPECT_EQ(ClassOf("GET", "models/stats"), RouteClass::kMetadata);
  EXPECT_EQ(ClassOf("GET", "models/mlp/config"), RouteClass::kMetadata);
  EXPECT_EQ(ClassOf("POST", "models/mlp/infer"), RouteClass::kInference);
  EXPECT_EQ(ClassOf("POST", "models/mlp/versions/2/infer"), RouteClass::kInference);
  EXPECT_EQ(ClassOf("GET", "systemsharedmemory/status"), RouteClass::kSharedMemory);
  EXPECT_EQ(ClassOf("GET", "systemsharedmemory/region/r/status"), RouteClass::kSharedMemory);
  EXPECT_EQ(ClassOf("POST", "systemsharedmemory/region/r/register"), RouteClass::kSharedMemory);
  EXPECT_EQ(ClassOf("POST", "systemsharedmemory/region/r/unregister"), RouteClass::kSharedMemory);
  EXPECT_EQ(ClassOf("POST", "systemsharedmemory/unregister"), RouteClass::kSharedMemory);
  EXPECT_EQ(ClassOf("POST", "cudasharedmemory/region/r/register"), RouteClass::kSharedMemory);
  EXPECT_EQ(ClassOf("POST", "repository/index"), RouteClass::kRepository);
  EXPECT_EQ(ClassOf("POST", "repository/models/mlp/load"), RouteClass::kRepository);
  EXPECT_EQ(ClassOf("POST", "repository/r/models/mlp/unload"), RouteClass::kRepository);
  EXPECT_EQ(ClassOf("GET", "admin/models"), RouteClass::kAdmin);
  EXPECT_EQ(ClassOf("POST", "admin/models/load"), RouteClass::kAdmin);
  // Sequence listings and ends need the admin token like every admin call.
  EXPECT_EQ(ClassOf("GET", "admin/sequences"), RouteClass::kAdmin);
  EXPECT_EQ(ClassOf("GET", "admin/models/acc/sequences"), RouteClass::kAdmin);
  EXPECT_EQ(ClassOf("POST", "admin/models/acc/sequences/end"), RouteClass::kAdmin);
  // Wrong method or shape: no route.
  EXPECT_FALSE(MatchHttpRoute("POST", Segments("health/ready")).has_value());
  EXPECT_FALSE(MatchHttpRoute("GET", Segments("systemsharedmemory/region/r/register")).has_value());
  EXPECT_FALSE(MatchHttpRoute("GET", Segments("models/mlp/infer/extra")).has_value());
}

TEST(HttpRoutesTest, CapturesNamedSegments) {
  std::optional<HttpRouteMatch> m = MatchHttpRoute("POST", Segments("models/mlp/versions/3/infer"));
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->Capture("model"), "mlp");
  EXPECT_EQ(m->Capture("version"), "3");
  EXPECT_EQ(m->Capture("region"), "");
}

TEST(HttpRoutesTest, PoliciesOfTheClasses) {
  for (RouteClass c : {RouteClass::kAdmin, RouteClass::kRepository, RouteClass::kSharedMemory,
                       RouteClass::kUnclassified}) {
    SCOPED_TRACE(RouteClassName(c));
    TrustPolicy p = PolicyFor(c);
    EXPECT_TRUE(p.host_and_origin);
    EXPECT_TRUE(p.json_content_type);
    EXPECT_TRUE(p.admin_token);
  }
  for (RouteClass c : {RouteClass::kInference, RouteClass::kMetadata, RouteClass::kHealth}) {
    SCOPED_TRACE(RouteClassName(c));
    TrustPolicy p = PolicyFor(c);
    EXPECT_FALSE(p.host_and_origin);
    EXPECT_FALSE(p.admin_token);
  }
  TrustPolicy shm_infer = SharedMemoryInferencePolicy();
  EXPECT_TRUE(shm_infer.host_and_origin);
  EXPECT_FALSE(shm_infer.json_content_type);
}

}  // namespace
}  // namespace cuvil
