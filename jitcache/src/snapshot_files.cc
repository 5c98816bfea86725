#include "cuvil/jitcache/snapshot_files.h"

#include <unistd.h>

#include <filesystem>
#include <memory>

#include "absl/strings/str_cat.h"
#include "cuvil/jitcache/snapshot.h"
#include "cuvil/runtime/status_macros.h"

namespace cuvil {

absl::Status WriteSnapshotFile(Env& env, const std::string& path, std::string_view artifact) {
  AtomicWriteOptions options;
  options.temp_path = absl::StrCat(path, ".tmp.", getpid());
  options.replace_stale_temp = true;  // Left by a crash of this pid's predecessor.
  options.sync = true;
  absl::StatusOr<std::shared_ptr<const MappedFile>> written =
      WriteFileAtomically(env, path, {{0, artifact}}, artifact.size(), options);
  if (!written.ok()) {
    return absl::Status(written.status().code(), absl::StrCat("cannot write snapshot ", path, ": ",
                                                              written.status().message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadSnapshotFile(Env& env, const std::string& path,
                                             uint64_t max_bytes) {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = env.NewRandomAccessFile(path);
  if (!file.ok()) return absl::InvalidArgumentError(file.status().message());
  if (!(*file)->is_regular()) return absl::InvalidArgumentError("not a regular file");
  const uint64_t size = (*file)->size();
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
  if (!(*file)->Read(0, size, bytes.data()).ok()) {
    return absl::InvalidArgumentError("cannot read it (it changed?)");
  }
  return bytes;
}

absl::StatusOr<std::vector<std::string>> ListSnapshotFiles(Env& env, const std::string& dir) {
  CUVIL_ASSIGN_OR_RETURN(std::vector<DirEntry> entries, env.ListDir(dir));
  std::vector<std::string> paths;
  for (const DirEntry& e : entries) {
    if (!e.regular || !e.name.ends_with(kSnapshotFileSuffix)) continue;
    paths.push_back((std::filesystem::path(dir) / e.name).string());
  }
  return paths;
}

}  // namespace cuvil
