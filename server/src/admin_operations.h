// Private: the model-registry operations behind both the gRPC ModelAdmin service and HTTP
// /v2/admin/..., plus the bearer-token check they and the repository calls share.
#ifndef CUVIL_SERVER_SRC_ADMIN_OPERATIONS_H_
#define CUVIL_SERVER_SRC_ADMIN_OPERATIONS_H_

#include <string>

#include "absl/status/statusor.h"
#include "admin.pb.h"
#include "cuvil/server/model_manager.h"
#include "snapshot_store.h"

namespace cuvil {

// Thread-safe.
class AdminOperations {
 public:
  // `metrics` (optional) counts patches and rollbacks. Without `admin_token`, calls that run or
  // reveal native code (IR patches, snapshots, restores) are refused unless `insecure_admin`
  // (see AuthorizeNativeCode).
  AdminOperations(ModelManager* models, std::string admin_token,
                  observability::ServerMetrics* metrics = nullptr, bool insecure_admin = false)
      : models_(models),
        token_(std::move(admin_token)),
        metrics_(metrics),
        insecure_admin_(insecure_admin) {}

  // OK when no token is configured or `authorization` is "Bearer <token>" (constant-time compare);
  // Unauthenticated otherwise.
  absl::Status Authorize(const std::string& authorization) const;
  // Calls that load native code into the server or hand out its code and weights (kind "ir"
  // patches, Snapshot, RestoreSnapshot) need authority beyond being on the same host: a
  // configured admin token (which Authorize checked) or the operator's explicit
  // --insecure-admin. PermissionDenied naming `what` and the flags otherwise.
  absl::Status AuthorizeNativeCode(const char* what) const;

  // Loads `request.name` from the repository, or inline from its ONNX bytes (as version
  // `request.version`, 1 when 0) and config_pbtxt. The name and the inline model pass the same
  // checks as Triton's load parameters (ParseLoadParameters): InvalidArgument otherwise, before
  // anything is loaded. Returns the model's versions after the load.
  absl::StatusOr<cuvil::admin::v1::LoadModelResponse> LoadModel(
      const cuvil::admin::v1::LoadModelRequest& request);
  // Unloads every version of a model; InvalidArgument for a malformed name, Unimplemented for a
  // single version.
  absl::Status UnloadModel(const cuvil::admin::v1::UnloadModelRequest& request);
  // Every known version with its state, JIT namespace, compile time and memory.
  cuvil::admin::v1::ListModelsResponse ListModels() const;
  // The compiled functions of one READY version; NotFound / Unavailable as ModelManager::Get.
  absl::StatusOr<cuvil::admin::v1::ListFunctionsResponse> ListFunctions(
      const cuvil::admin::v1::ListFunctionsRequest& request) const;
  // Compiles the patch (kind "ir": the request's LLVM IR; "recompile": the version's model
  // compiled again with the request's options; "profile": timing wrappers that roll back by
  // themselves after profile_seconds) off the request path, validates it on the version's
  // warm-up input (a deterministic batch-1 input when it has none) against the current code
  // (unless validate is false; a difference beyond the tolerance is FailedPrecondition unless
  // force), then publishes it between executions. InvalidArgument for a malformed patch or an
  // unknown kind; NotFound / Unavailable as ModelManager::Get. A refused patch changes nothing.
  // A profile patch with wait answers once its window ended, with the per-kernel table.
  absl::StatusOr<cuvil::admin::v1::PatchFunctionResponse> PatchFunction(
      const cuvil::admin::v1::PatchFunctionRequest& request);
  // Rolls back an active patch of a version (see LoadedModel::Rollback).
  absl::StatusOr<cuvil::admin::v1::RollbackResponse> Rollback(
      const cuvil::admin::v1::RollbackRequest& request);
  // The patch history of a version, oldest first.
  absl::StatusOr<cuvil::admin::v1::ListPatchesResponse> ListPatches(
      const cuvil::admin::v1::ListPatchesRequest& request) const;
  // The snapshot artifact of a READY version (see SnapshotVersion); NotFound / Unavailable as
  // ModelManager::Get.
  absl::StatusOr<cuvil::admin::v1::SnapshotResponse> Snapshot(
      const cuvil::admin::v1::SnapshotRequest& request);
  // Recreates the version a snapshot describes (see RestoreSnapshots); InvalidArgument for a
  // damaged, unknown or truncated artifact, which changes nothing.
  absl::StatusOr<cuvil::admin::v1::RestoreSnapshotResponse> RestoreSnapshot(
      const cuvil::admin::v1::RestoreSnapshotRequest& request);
  // The open sequences of the READY versions with sequence_batching, all of them or those of
  // `request.name` (and `request.version` when not 0), sorted by model, version, then id.
  // InvalidArgument for a malformed name or a model without sequence_batching; NotFound /
  // Unavailable as ModelManager::Get.
  absl::StatusOr<cuvil::admin::v1::ListSequencesResponse> ListSequences(
      const cuvil::admin::v1::ListSequencesRequest& request) const;
  // Ends one open sequence of a version (see SequenceBatcher::End). InvalidArgument for a
  // malformed name, a request naming no id or both a numeric and a string id, or a model without
  // sequence_batching; NotFound when the sequence is not open; NotFound / Unavailable as
  // ModelManager::Get.
  absl::StatusOr<cuvil::admin::v1::EndSequenceResponse> EndSequence(
      const cuvil::admin::v1::EndSequenceRequest& request);
  // With --snapshot-dir: versions are snapshotted there after every patch, rollback and restore.
  // Set once before serving.
  void set_snapshot_store(SnapshotStore* store) { snapshots_ = store; }
  // The largest snapshot RestoreSnapshot decodes (--max-snapshot-bytes); set once before serving.
  void set_max_snapshot_bytes(uint64_t bytes) { max_snapshot_bytes_ = bytes; }

 private:
  // Loads `version` again (same version number, its remaining patches carried): every later
  // request goes to the new build; the old one stays for requests still running in it.
  absl::Status ReloadVersion(const ModelVersion& version);

  ModelManager* models_;
  std::string token_;
  observability::ServerMetrics* metrics_;
  bool insecure_admin_;
  SnapshotStore* snapshots_ = nullptr;
  uint64_t max_snapshot_bytes_ = kMaxSnapshotBytesLimit;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_ADMIN_OPERATIONS_H_
