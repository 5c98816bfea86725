// Private: context snapshots on the server — the RestoreSnapshot operation, and --snapshot-dir,
// which keeps one snapshot file per loaded version current (after every load, patch and
// rollback) and restores them when the server starts, so a restart comes back patched.
#ifndef CUVIL_SERVER_SRC_SNAPSHOT_STORE_H_
#define CUVIL_SERVER_SRC_SNAPSHOT_STORE_H_

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "admin.pb.h"
#include "cuvil/jitcache/env.h"
#include "cuvil/jitcache/snapshot.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

// The snapshot artifact of a READY version (see EncodeSnapshot); FailedPrecondition when its ONNX
// source is unknown.
absl::StatusOr<std::string> SnapshotVersion(const ModelVersion& version);

// Decodes `artifacts` (all versions of one model; InvalidArgument before anything changes when
// one is damaged, unknown or truncated, or they name different models) and loads them as that
// model's versions with their code and active patches, waiting until they serve. Like an inline
// load, versions of the model not among them are unloaded once these are READY. An artifact above
// `max_bytes` is ResourceExhausted, one above kMaxSnapshotBytesLimit InvalidArgument, before it
// is parsed. Object code of another build or host is never loaded (compiled again from the
// snapshot's ONNX source; see DecodeSnapshot). Never throws (an exception is Internal).
absl::StatusOr<std::vector<cuvil::admin::v1::RestoreSnapshotResponse>> RestoreSnapshots(
    ModelManager* models, const std::vector<std::string_view>& artifacts,
    uint64_t max_bytes = kMaxSnapshotBytesLimit);

// Thread-safe.
class SnapshotStore {
 public:
  // Creates `dir` (0700) if needed; InvalidArgument when it cannot be created, FailedPrecondition
  // when another user owns it or group/others may write it, unless `insecure_dir`
  // (EnsurePrivateDir). Snapshot files are written 0600; files above `max_snapshot_bytes` are
  // refused by RestoreAll before they are read. Every snapshot file is listed, read, written and
  // removed through `env` (snapshot_files.h; not owned, must outlive the store; Env::Default()
  // when null).
  static absl::StatusOr<std::unique_ptr<SnapshotStore>> Create(
      std::string dir, ModelManager* models, bool insecure_dir = false,
      uint64_t max_snapshot_bytes = kDefaultMaxSnapshotBytes, Env* env = nullptr);
  ~SnapshotStore();  // Stops the watcher.

  // Restores every snapshot file in the folder, one model at a time. A file that is refused (too
  // large, damaged, a symlink) is logged and left alone (never deleted). Call before
  // StartWatching.
  void RestoreAll();
  // Writes the snapshot of `version` if its code changed since the last write (temporary file,
  // fsync, rename: a crash leaves the old file or the new one, never a mix).
  absl::Status Sync(const ModelVersion& version);
  // Syncs every READY version and removes the files of versions this store wrote that are no
  // longer loaded.
  void SyncAll();
  // Runs SyncAll every `period` on a thread of its own (catches loads, reloads, unloads and the
  // automatic rollback of profile patches).
  void StartWatching(absl::Duration period);
  // Stops the watcher (if any) and waits for it: unloads after this never remove a file, as at
  // exit. Thread-safe; idempotent.
  void StopWatching();

  const std::string& dir() const { return dir_; }

 private:
  SnapshotStore(std::string dir, ModelManager* models, uint64_t max_snapshot_bytes, Env* env)
      : dir_(std::move(dir)),
        models_(models),
        max_snapshot_bytes_(max_snapshot_bytes),
        env_(env != nullptr ? env : Env::Default()) {}
  std::string PathFor(const std::string& name, int64_t version) const;

  const std::string dir_;
  ModelManager* const models_;
  const uint64_t max_snapshot_bytes_;
  Env* const env_;
  absl::Mutex mu_;  // Serialises writes; held across one file write.
  // File -> (namespace, change count) of the code it holds.
  std::map<std::string, std::pair<std::string, uint64_t>> written_ ABSL_GUARDED_BY(mu_);
  absl::Mutex watch_mu_;  // Serialises StopWatching.
  absl::Notification stop_;
  std::thread watcher_;
};

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_SNAPSHOT_STORE_H_
