// Private: Cuvil's /v2/admin/... HTTP routes, JSON bodies translated into AdminOperations calls
// (the same operations the gRPC admin service runs). The caller has already applied the browser
// defences and authorization.
#ifndef CUVIL_SERVER_SRC_HTTP_ADMIN_ROUTES_H_
#define CUVIL_SERVER_SRC_HTTP_ADMIN_ROUTES_H_

#include <httplib.h>

#include <cstdint>
#include <string>
#include <vector>

#include "admin_operations.h"

namespace cuvil {

// Thread-safe: holds no state of its own; `admin` must be thread-safe and outlive it.
class HttpAdminRoutes {
 public:
  explicit HttpAdminRoutes(AdminOperations* admin) : admin_(admin) {}

  // Answers GET admin/models[/{m}/versions/{v}/(functions|patches)], admin/sequences,
  // admin/models/{m}[/versions/{v}]/sequences (`path` is the URL path's segments after "v2");
  // false, leaving `res` untouched, when no admin route matches.
  bool HandleGet(const std::vector<std::string>& path, httplib::Response& res);
  // Answers POST admin/models/load, admin/models/{m}/unload,
  // admin/models/{m}/versions/{v}/(patch|rollback|snapshot), admin/models/{m}/sequences/end and
  // admin/snapshots/restore with the JSON `body`; false, leaving `res` untouched, when no admin
  // route matches.
  bool HandlePost(const std::vector<std::string>& path, const std::string& body,
                  httplib::Response& res);

 private:
  void Load(httplib::Response& res, const std::string& body);
  void Unload(httplib::Response& res, const std::string& body, const std::string& name);
  void ListModels(httplib::Response& res);
  void ListFunctions(httplib::Response& res, const std::string& name, int64_t version);
  void ListPatches(httplib::Response& res, const std::string& name, int64_t version);
  void Patch(httplib::Response& res, const std::string& body, const std::string& name,
             int64_t version);
  void Rollback(httplib::Response& res, const std::string& body, const std::string& name,
                int64_t version);
  void Snapshot(httplib::Response& res, const std::string& name, int64_t version);
  void Restore(httplib::Response& res, const std::string& body);
  void ListSequences(httplib::Response& res, const std::string& name, int64_t version);
  void EndSequence(httplib::Response& res, const std::string& body, const std::string& name);

  AdminOperations* admin_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_HTTP_ADMIN_ROUTES_H_
