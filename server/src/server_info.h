// Private: facts every front end reports about the server.
#ifndef CUVIL_SERVER_SRC_SERVER_INFO_H_
#define CUVIL_SERVER_SRC_SERVER_INFO_H_

#include <atomic>
#include <string>
#include <vector>

namespace cuvil {

// Thread-safe: `ready` flips atomically; the rest is immutable after start.
struct ServerInfo {
  std::string name = "cuvil";
  std::string version = "0.1.0";
  std::vector<std::string> extensions = {
      "classification",     "model_repository",    "model_repository(unload_dependents)",
      "schedule_policy",    "model_configuration", "statistics",
      "binary_tensor_data", "system_shared_memory"};
  std::atomic<bool> ready{false};  // False while starting and while draining.
  std::string admin_token;         // Empty: admin and repository calls need no token.
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_SERVER_INFO_H_
