#include "front_end_security.h"

#include <optional>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

TEST(FrontEndSecurityTest, LoopbackNames) {
  for (const char* host : {"localhost", "LOCALHOST", "localhost.", "127.0.0.1", "127.1.2.3", "::1",
                           "[::1]", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"", "0.0.0.0", "::", "10.0.0.1", "128.0.0.1", "evil.com",
                           "localhost.evil.com", "127.0.0.1.evil.com", "[::2]", "127.1"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
  EXPECT_TRUE(IsLoopbackBindAddress("127.0.0.1"));
  EXPECT_FALSE(IsLoopbackBindAddress("0.0.0.0"));
}

TEST(FrontEndSecurityTest, NonLoopbackBindNeedsATokenOrInsecureAdmin) {
  EXPECT_TRUE(CheckAdminExposure("127.0.0.1", false, false).ok());
  EXPECT_TRUE(CheckAdminExposure("::1", false, false).ok());
  EXPECT_TRUE(CheckAdminExposure("0.0.0.0", true, false).ok());
  EXPECT_TRUE(CheckAdminExposure("0.0.0.0", false, true).ok());
  absl::Status s = CheckAdminExposure("0.0.0.0", false, false);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("--admin-token-file"));
  EXPECT_THAT(s.message(), HasSubstr("--insecure-admin"));
  EXPECT_FALSE(CheckAdminExposure("192.168.1.5", false, false).ok());
}

// Runs CheckAdminRoute on the given headers (nullptr: absent); 0 when allowed.
int Check(const char* host, const char* origin, const char* content_type, bool post = true,
          bool loopback = true, std::string* message = nullptr) {
  std::string h = host ? host : "", o = origin ? origin : "", c = content_type ? content_type : "";
  AdminRouteRequest r;
  r.is_post = post;
  r.host = host ? &h : nullptr;
  r.origin = origin ? &o : nullptr;
  r.content_type = content_type ? &c : nullptr;
  std::optional<RouteRejection> rejected = CheckAdminRoute(r, loopback);
  if (rejected && message) *message = rejected->message;
  return rejected ? rejected->http_status : 0;
}

TEST(FrontEndSecurityTest, AdminRouteAllowsNonBrowserClients) {
  EXPECT_EQ(Check("127.0.0.1:8000", nullptr, "application/json"), 0);
  EXPECT_EQ(Check("localhost:8000", nullptr, "Application/JSON; charset=utf-8"), 0);
  EXPECT_EQ(Check("[::1]:8000", nullptr, "application/json"), 0);
  EXPECT_EQ(Check(nullptr, nullptr, "application/json"), 0);
  EXPECT_EQ(Check("127.0.0.1:8000", nullptr, nullptr, /*post=*/false), 0);  // GET needs no type.
  // Same-origin browser pages pass.
  EXPECT_EQ(Check("localhost:8000", "http://localhost:8000", "application/json"), 0);
  EXPECT_EQ(Check("localhost", "http://localhost", "application/json"), 0);
  EXPECT_EQ(Check("localhost:80", "http://LocalHost", "application/json"), 0);
}

TEST(FrontEndSecurityTest, AdminRouteRefusesBrowsersAndRebinding) {
  std::string message;
  // DNS rebinding: a loopback-bound server answers loopback names only.
  EXPECT_EQ(Check("evil.com:8000", nullptr, "application/json", true, true, &message), 403);
  EXPECT_THAT(message, HasSubstr("not a loopback name"));
  EXPECT_EQ(Check("evil.com:8000", nullptr, "application/json", true, /*loopback=*/false), 0);
  EXPECT_EQ(Check("127.0.0.1:99999", nullptr, "application/json"), 403);
  // Cross-origin pages.
  EXPECT_EQ(Check("localhost:8000", "http://evil.com", "application/json", true, true, &message),
            403);
  EXPECT_THAT(message, HasSubstr("cross-origin"));
  EXPECT_EQ(Check("localhost:8000", "http://localhost:3000", "application/json"), 403);
  EXPECT_EQ(Check("localhost:8000", "http://127.0.0.1:8000", "application/json"), 403);
  EXPECT_EQ(Check("localhost:8000", "null", "application/json"), 403);
  EXPECT_EQ(Check("localhost:8000", "http://localhost:8000@evil.com", "application/json"), 403);
  EXPECT_EQ(Check(nullptr, "http://localhost:8000", "application/json"), 403);
  EXPECT_EQ(Check("10.0.0.1:8000", "http://evil.com:8000", "application/json", true, false), 403);
  // Content types a cross-origin form or fetch can send without a preflight.
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded",
                           "multipart/form-data; boundary=x", "", "application/jsonx"}) {
    EXPECT_EQ(Check("localhost:8000", nullptr, type, true, true, &message), 415) << type;
    EXPECT_THAT(message, HasSubstr("Content-Type: application/json"));
  }
  // A browser's body-less POST carries Origin; a plain client (tritonclient) sends neither.
  EXPECT_EQ(Check("localhost:8000", "http://localhost:8000", nullptr, true, true, &message), 415);
  EXPECT_THAT(message, HasSubstr("got none"));
  EXPECT_EQ(Check("localhost:8000", nullptr, nullptr, true, true), 0);
}

}  // namespace
}  // namespace cuvil
