// The file-system seam under the JIT cache's folder and the snapshot folder (after LevelDB's
// `Env`): every file those stores create, write, read, map, list, rename, remove or touch goes
// through an Env, so tests can swap in one that fails (FaultInjectionEnv: ENOSPC, EIO, a torn
// write) while the server uses the POSIX one (Env::Default()).
//
// Every mutating call is one "write" for fault injection: NewWritableFile, WritableFile::WriteAt,
// Truncate, Sync and Close, RenameFile, RemoveFile, TouchFile, SetModifiedNow and LockFile.
// WriteFileAtomically is built on them once for every store: temporary file, writes, fsync,
// rename.
#ifndef CUVIL_JITCACHE_ENV_H_
#define CUVIL_JITCACHE_ENV_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cuvil {

// A read-only mapping of a whole file (MAP_PRIVATE: files are replaced by rename, never written
// in place, so the bytes stay what they were when mapped); unmapped with its last reference.
// Thread-safe.
class MappedFile {
 public:
  virtual ~MappedFile() = default;
  virtual const uint8_t* data() const = 0;
  virtual size_t size() const = 0;
};

// An open file read at offsets. Thread-safe (reads are positional).
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Size and kind when opened (fstat).
  virtual uint64_t size() const = 0;
  virtual bool is_regular() const = 0;
  // Reads exactly the `n` bytes at `offset` into `dst`. OutOfRange when the file ends first (it
  // was truncated); the errno's status (ErrnoStatus) on an I/O error.
  virtual absl::Status Read(uint64_t offset, uint64_t n, void* dst) const = 0;
  // Maps the whole file (size() bytes) read-only; `populate` pre-faults its pages.
  virtual absl::StatusOr<std::shared_ptr<const MappedFile>> Map(bool populate) const = 0;
};

// A file being written (the temporary file of an atomic write). Thread-compatible.
class WritableFile {
 public:
  virtual ~WritableFile() = default;  // Closes the file if Close was not called (errors lost).
  // Writes all of `bytes` at `offset` (the file grows as needed; gaps read as zeros).
  virtual absl::Status WriteAt(uint64_t offset, std::string_view bytes) = 0;
  // Sets the file's size (extends with zeros).
  virtual absl::Status Truncate(uint64_t size) = 0;
  // fsync: the bytes written so far survive a crash of the machine.
  virtual absl::Status Sync() = 0;
  // Maps the file as written so far, read-only: the inode this call wrote, whatever is renamed
  // over its path later.
  virtual absl::StatusOr<std::shared_ptr<const MappedFile>> Map() const = 0;
  // Closes the file (the error of a deferred write shows here). Call once.
  virtual absl::Status Close() = 0;
};

// An advisory exclusive lock on a file; released when destroyed.
class FileLock {
 public:
  virtual ~FileLock() = default;
};

// One name in a folder (ListDir).
struct DirEntry {
  std::string name;           // Without the folder.
  bool regular = false;       // A regular file (never true for a symlink, whatever it points at).
  uint64_t size = 0;          // Of a regular file.
  int64_t mtime_unix_ns = 0;  // Last modification, nanoseconds since the Unix epoch.
};

// Thread-safe. Paths are plain file-system paths; no call follows a symlink at the last
// component except FileExists.
class Env {
 public:
  virtual ~Env() = default;

  // The POSIX implementation, shared by the whole process and never destroyed.
  static Env* Default();

  // Creates `path`, which must not exist (AlreadyExists otherwise), mode 0600, for writing.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;
  // Opens `path` for reading without blocking on a FIFO. NotFound when it does not exist;
  // FailedPrecondition when it is a symlink.
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;
  // The names in `dir` (not "." and ".."), in no particular order; entries that vanish while
  // listed are skipped.
  virtual absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& dir) = 0;
  // NotFound when `path` does not exist.
  virtual absl::Status RemoveFile(const std::string& path) = 0;
  // rename(2): atomically replaces `to`.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Creates `path` empty (0600) when it does not exist, then sets its modification time to now.
  virtual absl::Status TouchFile(const std::string& path) = 0;
  // Sets the modification time of the existing `path` to now.
  virtual absl::Status SetModifiedNow(const std::string& path) = 0;
  // Whether `path` exists (stat follows symlinks).
  virtual bool FileExists(const std::string& path) = 0;
  // Takes an exclusive advisory lock (flock) on `path`, created 0600 when missing, waiting for
  // other holders.
  virtual absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path) = 0;
};

// The status of a failed system call: NotFound (ENOENT), AlreadyExists (EEXIST),
// ResourceExhausted (ENOSPC, EDQUOT), PermissionDenied (EACCES, EPERM), FailedPrecondition
// (ELOOP: a symlink), Internal otherwise; the message is "`what`: strerror(err)".
absl::Status ErrnoStatus(int err, std::string_view what);

// Bytes to put at an offset of a file (WriteFileAtomically).
struct FilePiece {
  uint64_t offset = 0;
  std::string_view bytes;
};

struct AtomicWriteOptions {
  // The temporary file, in the same folder as the target (rename is atomic within a file
  // system only). Empty: `<path>.tmp`.
  std::string temp_path;
  // An existing temporary (left by a crashed predecessor of the same name) is removed and the
  // file created again; otherwise such a write fails with AlreadyExists.
  bool replace_stale_temp = false;
  // fsync the temporary before the rename, so a crash of the machine leaves the old file or the
  // complete new one. Without it, a crash may leave the new name holding a short or zeroed file,
  // which only a reader that checks every byte (the JIT cache's checksums) may accept.
  bool sync = true;
  // Return a read-only mapping of the written file (the inode written, not whatever the name
  // holds later).
  bool map = false;
};

// Writes a file of `size` bytes holding `pieces` (gaps read as zeros) at `path` atomically:
// created new as the temporary file (0600), written, extended to `size`, synced (options.sync),
// closed, then renamed over `path`. On any error the temporary is removed (best effort), `path`
// is left as it was and the error names the step. Returns the mapping (options.map; a failed
// mapping is not an error: then null) or null. Thread-safe for distinct temporary paths.
absl::StatusOr<std::shared_ptr<const MappedFile>> WriteFileAtomically(
    Env& env, const std::string& path, const std::vector<FilePiece>& pieces, uint64_t size,
    const AtomicWriteOptions& options = {});

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_ENV_H_
