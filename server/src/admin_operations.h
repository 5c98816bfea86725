// Private: the model-registry operations behind both the gRPC ModelAdmin service and HTTP
// /v2/admin/..., plus the bearer-token check they and the repository calls share.
#ifndef CUVIL_SERVER_SRC_ADMIN_OPERATIONS_H_
#define CUVIL_SERVER_SRC_ADMIN_OPERATIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "admin.pb.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

// Thread-safe.
class AdminOperations {
 public:
  AdminOperations(ModelManager* models, std::string admin_token)
      : models_(models), token_(std::move(admin_token)) {}

  // OK when no token is configured or `authorization` is "Bearer <token>" (constant-time compare);
  // Unauthenticated otherwise.
  absl::Status Authorize(const std::string& authorization) const;

  absl::StatusOr<cuvil::admin::v1::LoadModelResponse> LoadModel(
      const cuvil::admin::v1::LoadModelRequest& request);
  absl::Status UnloadModel(const cuvil::admin::v1::UnloadModelRequest& request);
  cuvil::admin::v1::ListModelsResponse ListModels() const;
  absl::StatusOr<cuvil::admin::v1::ListFunctionsResponse> ListFunctions(
      const cuvil::admin::v1::ListFunctionsRequest& request) const;
  // PatchFunction, Rollback, Snapshot, RestoreSnapshot: Unimplemented until hot patching lands.
  absl::Status NotYetImplemented(const std::string& operation) const;

 private:
  ModelManager* models_;
  std::string token_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_ADMIN_OPERATIONS_H_
