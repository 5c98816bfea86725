#include "snapshot_store.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cuvil/jitcache/snapshot.h"
#include "google/protobuf/text_format.h"
#include "model_name.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
constexpr char kSuffix[] = ".cuvilsnap";

// Writes `bytes` to `path` through a temporary file in the same folder, synced, then renamed.
absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string err = strerror(errno);
      close(fd);
      unlink(tmp.c_str());
      return absl::InternalError(absl::StrCat("cannot write ", tmp, ": ", err));
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0 || close(fd) != 0) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot sync ", tmp));
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string err = strerror(errno);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, ": ", err));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> SnapshotVersion(const ModelVersion& version) {
  std::string config_text;
  google::protobuf::TextFormat::PrintToString(version.config(), &config_text);
  return EncodeSnapshot(version.loaded(), version.name(), version.version(), config_text);
}

absl::StatusOr<std::vector<cuvil::admin::v1::RestoreSnapshotResponse>> RestoreSnapshots(
    ModelManager* models, const std::vector<std::string_view>& artifacts) {
  if (artifacts.empty()) return absl::InvalidArgumentError("no snapshot given");
  // Everything is decoded and checked before anything is loaded.
  std::vector<std::shared_ptr<const VersionSnapshot>> snapshots;
  for (std::string_view bytes : artifacts) {
    auto snapshot = DecodeSnapshot(bytes);
    if (!snapshot.ok()) return snapshot.status();
    if (absl::Status s = ValidateModelName(snapshot->model_name); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("snapshot: ", s.message()));
    }
    if (!snapshots.empty() && snapshot->model_name != snapshots[0]->model_name) {
      return absl::InvalidArgumentError(absl::StrCat("snapshots of models '",
                                                     snapshots[0]->model_name, "' and '",
                                                     snapshot->model_name, "' in one restore"));
    }
    snapshots.push_back(std::make_shared<const VersionSnapshot>(*std::move(snapshot)));
  }
  LoadRequest request;
  request.name = snapshots[0]->model_name;
  request.config_pbtxt = snapshots.back()->config_text;
  request.wait = true;
  std::vector<cuvil::admin::v1::RestoreSnapshotResponse> responses;
  for (const auto& snapshot : snapshots) {
    bool recompiled = false;
    auto code = SnapshotCode(*snapshot, &recompiled);
    if (!code.ok()) return code.status();
    request.model_bytes[snapshot->version] = snapshot->onnx_model;
    VersionSeed& seed = request.seeds[snapshot->version];
    seed.compiled = std::make_shared<const CompiledModel>(*std::move(code));
    seed.before_serving = [snapshot](LoadedModel& loaded) {
      return RestorePatches(loaded, *snapshot);
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

absl::StatusOr<std::unique_ptr<SnapshotStore>> SnapshotStore::Create(std::string dir,
                                                                     ModelManager* models) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--snapshot-dir ", dir, ": cannot create it: ", ec.message()));
  }
  return std::unique_ptr<SnapshotStore>(new SnapshotStore(std::move(dir), models));
}

SnapshotStore::~SnapshotStore() {
  stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
}

std::string SnapshotStore::PathFor(const std::string& name, int64_t version) const {
  return (fs::path(dir_) / absl::StrCat(name, ".", version, kSuffix)).string();
}

void SnapshotStore::RestoreAll() {
  // Files by model: one restore per model keeps its versions together.
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> by_model;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string path = entry.path().string();
    if (!entry.is_regular_file() || !path.ends_with(kSuffix)) continue;
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    std::string bytes = ss.str();
    auto snapshot = DecodeSnapshot(bytes);
    if (!snapshot.ok()) {
      spdlog::error("snapshot {} refused: {}", path, std::string(snapshot.status().message()));
      continue;
    }
    by_model[snapshot->model_name].emplace_back(path, std::move(bytes));
  }
  for (const auto& [name, files] : by_model) {
    std::vector<std::string_view> artifacts;
    for (const auto& [path, bytes] : files) artifacts.push_back(bytes);
    auto restored = RestoreSnapshots(models_, artifacts);
    if (!restored.ok()) {
      spdlog::error("restoring model '{}' from {}: {}", name, dir_,
                    std::string(restored.status().message()));
      continue;
    }
    for (const auto& r : *restored) {
      if (auto v = models_->Get(r.name(), absl::StrCat(r.version())); v.ok()) {
        if (auto s = Sync(**v); !s.ok()) spdlog::warn("{}", std::string(s.message()));
      }
    }
  }
}

absl::Status SnapshotStore::Sync(const ModelVersion& version) {
  const std::string path = PathFor(version.name(), version.version());
  const LoadedModel& loaded = version.loaded();
  absl::MutexLock lock(&mu_);
  // Read the count before encoding: a change during the write is written again next time.
  const std::pair<std::string, uint64_t> state{loaded.namespace_name(), loaded.change_count()};
  if (auto it = written_.find(path); it != written_.end() && it->second == state) {
    return absl::OkStatus();
  }
  auto artifact = SnapshotVersion(version);
  if (!artifact.ok()) {
    return absl::Status(artifact.status().code(),
                        absl::StrCat("snapshot of '", version.name(), "' version ",
                                     version.version(), ": ", artifact.status().message()));
  }
  if (absl::Status s = WriteAtomically(path, *artifact); !s.ok()) return s;
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
    std::error_code ec;
    fs::remove(it->first, ec);
    it = written_.erase(it);
  }
}

void SnapshotStore::StartWatching(absl::Duration period) {
  watcher_ = std::thread([this, period] {
    while (!stop_.WaitForNotificationWithTimeout(period)) SyncAll();
  });
}

}  // namespace cuvil
