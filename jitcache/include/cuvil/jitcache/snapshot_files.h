// The snapshot folder's files (cuvil-server --snapshot-dir): one artifact per model version,
// `<dir>/<model>.<version>.cuvilsnap`, written through a temporary file that is synced and then
// renamed (a crash leaves the old artifact or the new one, never a mix), read only after their
// size is checked, never through a symlink. Every call goes through an Env (env.h), so tests can
// make any of the writes fail.
#ifndef CUVIL_JITCACHE_SNAPSHOT_FILES_H_
#define CUVIL_JITCACHE_SNAPSHOT_FILES_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/jitcache/env.h"

namespace cuvil {

inline constexpr char kSnapshotFileSuffix[] = ".cuvilsnap";

// Writes `artifact` at `path`: `<path>.tmp.<pid>` created 0600 (one left by a crashed process of
// the same pid is replaced), written, fsynced, renamed over `path`. On an error `path` is as it
// was and the temporary is removed; the status names the step ("cannot write snapshot <path>:
// ..."). Thread-safe for distinct paths.
absl::Status WriteSnapshotFile(Env& env, const std::string& path, std::string_view artifact);

// Reads the snapshot file at `path` after checking its size: a regular file, never followed
// through a symlink, at most `max_bytes` (ResourceExhausted otherwise) and at most
// kMaxSnapshotBytesLimit (InvalidArgument otherwise). InvalidArgument when it cannot be opened or
// read. The bytes are not decoded (DecodeSnapshot does that).
absl::StatusOr<std::string> ReadSnapshotFile(Env& env, const std::string& path, uint64_t max_bytes);

// Paths of the snapshot files in `dir`: regular files (never symlinks) named *.cuvilsnap, in the
// folder's order. The status of listing when `dir` cannot be read.
absl::StatusOr<std::vector<std::string>> ListSnapshotFiles(Env& env, const std::string& dir);

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_SNAPSHOT_FILES_H_
