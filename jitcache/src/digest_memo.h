// Private: a model file's content digest remembered by the file's identity, so a cache hit does
// not read the whole model to compute its key (the idea of git's index).
//
// A record is one small file `<dir>/memo-<dev>-<ino>.cjm` holding the model file's stat identity
// (device, inode, size, mtime and ctime in nanoseconds), its digest and a checksum of both. It is
// used only when every field of the identity matches the file's fstat now; any difference (a
// rewrite, even of the same size, changes ctime) falls back to hashing the content. A file changed
// less than `settle` ago is not recorded, since a later change within the same timestamp tick
// would be invisible to stat. Records are written to a temporary file and renamed, so concurrent
// writers in several processes never leave a torn record; a corrupt one is ignored and rewritten.
#ifndef CUVIL_JITCACHE_SRC_DIGEST_MEMO_H_
#define CUVIL_JITCACHE_SRC_DIGEST_MEMO_H_

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "cuvil/jitcache/env.h"

namespace cuvil::jitcache_internal {

// What stat says about a file's identity and last change. Thread-compatible value.
struct FileStamp {
  uint64_t dev = 0;
  uint64_t ino = 0;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;

  bool operator==(const FileStamp&) const = default;
};

// The stamp of a file from its stat.
FileStamp StampOf(const struct stat& st);

// What is remembered about a file's contents. Thread-compatible value.
struct MemoRecord {
  std::string digest;             // 16 bytes, as computed by the caller (opaque here).
  bool no_external_data = false;  // The model provably refers to no external data file.
};

// Thread-safe: holds no mutable state; every call works on files in the directory.
class DigestMemo {
 public:
  // Records live in `dir` (which must exist); files changed less than `settle` ago are not
  // recorded. Records are read and written through `env` (not owned; Env::Default() when null).
  DigestMemo(std::string dir, std::chrono::milliseconds settle, Env* env = nullptr);

  // The record stored for exactly `stamp`, or nullopt when there is none, it is unreadable or
  // corrupt, or it was stored for another stamp (the file has changed since).
  std::optional<MemoRecord> Find(const FileStamp& stamp) const;

  // Records `record` for `stamp` (replacing any record for the same device and inode), unless
  // the file changed less than `settle` before now. False when it was not recorded (too recent,
  // or the directory is not writable; the caller just hashes again next time).
  bool Store(const FileStamp& stamp, const MemoRecord& record) const;

  // Path of the record for the file `stamp` describes.
  std::string PathOf(const FileStamp& stamp) const;

 private:
  std::string dir_;
  std::chrono::milliseconds settle_;
  Env* env_;
};

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_DIGEST_MEMO_H_
