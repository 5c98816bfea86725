#include "snapshot_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "cuvil/jitcache/private_dir.h"
#include "cuvil/jitcache/snapshot.h"
#include "google/protobuf/text_format.h"
#include "model_name.h"
#include "patch_validation.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
constexpr char kSuffix[] = ".cuvilsnap";

// Writes `bytes` to `path` through a temporary file in the same folder (created 0600, never
// through a symlink), synced, then renamed.
absl::Status WriteAtomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  constexpr int kFlags = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
  int fd = open(tmp.c_str(), kFlags, kPrivateFileMode);
  if (fd < 0 && errno == EEXIST) {  // Left by a crash of this pid's predecessor: replace it.
    unlink(tmp.c_str());
    fd = open(tmp.c_str(), kFlags, kPrivateFileMode);
  }
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

// Reads the snapshot file at `path` after checking its size: a regular file, never followed
// through a symlink, at most `max_bytes`. ResourceExhausted/InvalidArgument otherwise.
absl::StatusOr<std::string> ReadSnapshotFile(const std::string& path, uint64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot open it: ", strerror(errno)));
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError("not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxSnapshotBytesLimit) {
    return absl::InvalidArgumentError(absl::StrCat(
        "it is ", size, " bytes; no snapshot may exceed ", kMaxSnapshotBytesLimit, " bytes"));
  }
  if (size > max_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("it is ", size,
                                                     " bytes, larger than the server's limit of ",
                                                     max_bytes, " bytes (--max-snapshot-bytes)"));
  }
  std::string bytes(size, '\0');  // Read straight into its one buffer.
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, bytes.data() + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return absl::InvalidArgumentError("cannot read it (it changed?)");
    done += static_cast<size_t>(n);
  }
  return bytes;
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
                                                                     uint64_t max_snapshot_bytes) {
  if (absl::Status s =
          EnsurePrivateDir(dir, insecure_dir, "--snapshot-dir", "--insecure-cache-dir");
      !s.ok()) {
    return s;
  }
  return std::unique_ptr<SnapshotStore>(
      new SnapshotStore(std::move(dir), models, max_snapshot_bytes));
}

SnapshotStore::~SnapshotStore() { StopWatching(); }

void SnapshotStore::StopWatching() {
  absl::MutexLock lock(&watch_mu_);
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (watcher_.joinable()) watcher_.join();
}

std::string SnapshotStore::PathFor(const std::string& name, int64_t version) const {
  return (fs::path(dir_) / absl::StrCat(name, ".", version, kSuffix)).string();
}

void SnapshotStore::RestoreAll() {
  // Decoded snapshots by model: one restore per model keeps its versions together. Each file is
  // dropped as soon as it is decoded (the snapshot holds what the restore needs).
  std::map<std::string, Snapshots> by_model;
  std::map<const VersionSnapshot*, std::string> paths;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) {
    const std::string path = entry.path().string();
    std::error_code e2;
    if (entry.is_symlink(e2) || !entry.is_regular_file(e2) || !path.ends_with(kSuffix)) continue;
    absl::StatusOr<VersionSnapshot> snapshot = absl::UnknownError("unread");
    {
      absl::StatusOr<std::string> bytes = ReadSnapshotFile(path, max_snapshot_bytes_);
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
