#include "snapshot_store.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "cuvil/jitcache/private_dir.h"
#include "cuvil/jitcache/snapshot.h"
#include "cuvil/jitcache/snapshot_files.h"
#include "cuvil/runtime/status_macros.h"
#include "google/protobuf/text_format.h"
#include "model_name.h"
#include "patch_validation.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

}  // namespace

absl::StatusOr<std::string> SnapshotVersion(const ModelVersion& version) {
  std::string config_text;
  google::protobuf::TextFormat::PrintToString(version.config(), &config_text);
  return EncodeSnapshot(version.loaded(), version.name(), version.version(), config_text);
}

namespace {

using Snapshots = std::vector<std::shared_ptr<const VersionSnapshot>>;

// Loads decoded `snapshots` (all of one model) as its versions; see RestoreSnapshots.
absl::StatusOr<std::vector<cuvil::admin::v1::RestoreSnapshotResponse>> RestoreDecoded(
    ModelManager* models, const Snapshots& snapshots) {
  LoadRequest request;
  request.name = snapshots[0]->model_name;
  request.config_pbtxt = snapshots.back()->config_text;
  request.wait = true;
  std::vector<cuvil::admin::v1::RestoreSnapshotResponse> responses;
  for (const auto& snapshot : snapshots) {
    if (!snapshot->host_matches) {
      spdlog::warn(
          "snapshot of model '{}' version {}: {}; its object code is not loaded, the version is "
          "compiled again from its ONNX source",
          snapshot->model_name, snapshot->version, snapshot->host_mismatch);
    }
    bool recompiled = false;
    auto code = SnapshotCode(*snapshot, &recompiled);
    if (!code.ok()) return code.status();
    request.model_bytes[snapshot->version] = snapshot->onnx_model;
    VersionSeed& seed = request.seeds[snapshot->version];
    seed.compiled = std::make_shared<const CompiledModel>(*std::move(code));
    // Taken on the quick tier before its tier-up: the restored version tiers up too.
    seed.tier_up =
        snapshot->opt_level < CompileOptions().opt_level &&
        std::none_of(
            snapshot->patches.begin(), snapshot->patches.end(),
            [](const PatchRecord& r) { return r.active && r.author == kTierSwapAuthor; });
    seed.before_serving = [snapshot](LoadedModel& loaded) {
      // A patch that no longer passes (the sandbox refuses it, its kernels changed) is left out:
      // the version serves unpatched rather than not at all, and never crashes at each start.
      std::vector<std::string> refused;
      absl::Status s =
          RestorePatches(loaded, *snapshot,
                         PatchValidationInputs(loaded, inference::ModelConfig()).front(), &refused);
      for (const std::string& why : refused) {
        spdlog::warn("model '{}' version {}: {}; the version serves without it",
                     snapshot->model_name, snapshot->version, why);
      }
      return s;
    };
    auto& r = responses.emplace_back();
    r.set_name(snapshot->model_name);
    r.set_version(snapshot->version);
    r.set_recompiled(recompiled);
    for (const PatchRecord& p : snapshot->patches) {
      if (p.active && p.kind != kPatchKindProfile) r.add_patch_ids(absl::StrCat(p.id));
    }
  }
  if (absl::Status s = models->Load(request); !s.ok()) return s;
  for (const auto& snapshot : snapshots) {
    spdlog::info("model '{}' version {}: restored from a snapshot (model {}, {} patches)",
                 snapshot->model_name, snapshot->version, snapshot->model_hash,
                 snapshot->patches.size());
  }
  return responses;
}

// RestoreDecoded, with an exception (bad_alloc, a library's) turned into Internal: restores run
// on the admin blocking pool and at start-up, where one would be std::terminate.
absl::StatusOr<std::vector<cuvil::admin::v1::RestoreSnapshotResponse>> RestoreDecodedCatching(
    ModelManager* models, const Snapshots& snapshots) {
  try {
    return RestoreDecoded(models, snapshots);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("restoring a snapshot failed: ", e.what()));
  } catch (...) {
    return absl::InternalError("restoring a snapshot failed: unknown exception");
  }
}

// Checks a decoded snapshot against those of the same restore; InvalidArgument when it does not
// belong with them.
absl::Status CheckBelongs(const VersionSnapshot& snapshot, const Snapshots& others) {
  if (absl::Status s = ValidateModelName(snapshot.model_name); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("snapshot: ", s.message()));
  }
  if (!others.empty() && snapshot.model_name != others[0]->model_name) {
    return absl::InvalidArgumentError(absl::StrCat("snapshots of models '", others[0]->model_name,
                                                   "' and '", snapshot.model_name,
                                                   "' in one restore"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<cuvil::admin::v1::RestoreSnapshotResponse>> RestoreSnapshots(
    ModelManager* models, const std::vector<std::string_view>& artifacts, uint64_t max_bytes) {
  if (artifacts.empty()) return absl::InvalidArgumentError("no snapshot given");
  // Everything is decoded and checked before anything is loaded.
  Snapshots snapshots;
  try {  // Runs on the admin blocking pool: nothing may escape.
    for (std::string_view bytes : artifacts) {
      auto snapshot = DecodeSnapshot(bytes, max_bytes);
      if (!snapshot.ok()) return snapshot.status();
      if (absl::Status s = CheckBelongs(*snapshot, snapshots); !s.ok()) return s;
      snapshots.push_back(std::make_shared<const VersionSnapshot>(*std::move(snapshot)));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("decoding a snapshot failed: ", e.what()));
  }
  return RestoreDecodedCatching(models, snapshots);
}

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Create(std::string dir,
                                                                     ModelManager* models,
                                                                     bool insecure_dir,
                                                                     uint64_t max_snapshot_bytes,
                                                                     Env* env) {
  if (absl::Status s =
          EnsurePrivateDir(dir, insecure_dir, "--snapshot-dir", "--insecure-cache-dir");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<SnapshotStore>(
      new SnapshotStore(std::move(dir), models, max_snapshot_bytes, env));
}

SnapshotStore::~SnapshotStore() { StopWatching(); }

void SnapshotStore::StopWatching() {
  absl::MutexLock lock(&watch_mu_);
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
}

std::string SnapshotStore::PathFor(const std::string& name, int64_t version) const {
  return (fs::path(dir_) / absl::StrCat(name, ".", version, kSnapshotFileSuffix)).string();
}

void SnapshotStore::RestoreAll() {
  // Decoded snapshots by model: one restore per model keeps its versions together. Each file is
  // dropped as soon as it is decoded (the snapshot holds what the restore needs).
  std::map<std::string, Snapshots> by_model;
  std::map<const VersionSnapshot*, std::string> paths;
  absl::StatusOr<std::vector<std::string>> files = ListSnapshotFiles(*env_, dir_);
  if (!files.ok()) {
    spdlog::error("snapshot folder {}: {}", dir_, std::string(files.status().message()));
    return;
  }
  for (const std::string& path : *files) {
    absl::StatusOr<VersionSnapshot> snapshot = absl::UnknownError("unread");
    {
      absl::StatusOr<std::string> bytes = ReadSnapshotFile(*env_, path, max_snapshot_bytes_);
      snapshot = bytes.ok() ? DecodeSnapshot(*bytes, max_snapshot_bytes_) : bytes.status();
    }
    Snapshots& group = by_model[snapshot.ok() ? snapshot->model_name : ""];
    absl::Status s = snapshot.ok() ? CheckBelongs(*snapshot, group) : snapshot.status();
    if (!s.ok()) {
      spdlog::error("snapshot {} refused: {}", path, std::string(s.message()));
      continue;
    }
    group.push_back(std::make_shared<const VersionSnapshot>(*std::move(snapshot)));
    paths[group.back().get()] = path;
  }
  for (const auto& [name, snapshots] : by_model) {
    if (snapshots.empty()) continue;
    auto restored = RestoreDecodedCatching(models_, snapshots);
    if (!restored.ok()) {
      spdlog::error("restoring model '{}' from {}: {}", name, dir_,
                    std::string(restored.status().message()));
      continue;
    }
    for (const auto& snapshot : snapshots) {
      auto v = models_->Get(snapshot->model_name, absl::StrCat(snapshot->version));
      if (!v.ok()) continue;
      const std::string path = PathFor(snapshot->model_name, snapshot->version);
      if (snapshot->host_matches && paths[snapshot.get()] == path) {
        // The file holds the version as it now is: remembered as written instead of encoded
        // again (which would briefly hold a few more copies of the model's weights).
        const LoadedModel& loaded = (*v)->loaded();
        absl::MutexLock lock(&mu_);
        written_[path] = {loaded.namespace_name(), loaded.patches().change_count()};
        continue;
      }
      // Code compiled again here, or a file under another name: written in this build's form.
      if (auto s = Sync(**v); !s.ok()) spdlog::warn("{}", std::string(s.message()));
    }
  }
}

absl::Status SnapshotStore::Sync(const ModelVersion& version) {
  const std::string path = PathFor(version.name(), version.version());
  const LoadedModel& loaded = version.loaded();
  absl::MutexLock lock(&mu_);
  // Read the count before encoding: a change during the write is written again next time.
  const std::pair<std::string, uint64_t> state{loaded.namespace_name(),
                                               loaded.patches().change_count()};
  if (auto it = written_.find(path); it != written_.end() && it->second == state) {
    return absl::OkStatus();
  }
  auto artifact = SnapshotVersion(version);
  if (!artifact.ok()) {
    return absl::Status(artifact.status().code(),
                        absl::StrCat("snapshot of '", version.name(), "' version ",
                                     version.version(), ": ", artifact.status().message()));
  }
  CUVIL_RETURN_IF_ERROR(WriteSnapshotFile(*env_, path, *artifact));
  written_[path] = state;
  spdlog::debug("snapshot {} written ({} bytes)", path, artifact->size());
  return absl::OkStatus();
}

void SnapshotStore::SyncAll() {
  std::set<std::string> live;
  for (const VersionStatus& v : models_->Index()) {
    if (!v.model) continue;
    live.insert(PathFor(v.name, v.version));
    if (absl::Status s = Sync(*v.model); !s.ok()) {
      spdlog::warn("{}", std::string(s.message()));
    }
  }
  absl::MutexLock lock(&mu_);
  for (auto it = written_.begin(); it != written_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    // Unloaded: a restart must not bring it back.
    (void)env_->RemoveFile(it->first);
    it = written_.erase(it);
  }
}

void SnapshotStore::StartWatching(absl::Duration period) {
  watcher_ = std::thread([this, period] {
    while (!stop_.WaitForNotificationWithTimeout(period)) SyncAll();
  });
}

}  // namespace cuvil
