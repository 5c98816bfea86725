// For tests: an Env that counts the writes made through it (every mutating call; see env.h) and
// makes one of them fail the way a disk does — ENOSPC, EIO, or a torn write that puts only a
// prefix of its bytes on disk and then "crashes" the process: from then on every call fails with
// EIO and nothing is cleaned up, as if the process had died there (a fresh store over the same
// folder, with the real Env, then plays the next process). Reads pass through until a crash.
// Linked from cuvil_jitcache_testing, never into the server.
#ifndef CUVIL_JITCACHE_FAULT_INJECTION_ENV_H_
#define CUVIL_JITCACHE_FAULT_INJECTION_ENV_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/jitcache/env.h"

namespace cuvil {

enum class WriteFault {
  kNone,
  kNoSpace,    // The write fails with ENOSPC and changes nothing.
  kIoError,    // The write fails with EIO and changes nothing.
  kTornWrite,  // WriteAt puts the first half of its bytes (at least one when there are two or
               // more) on disk, then the process crashes; any other write crashes before it runs.
};

// "none", "ENOSPC", "EIO", "torn".
const char* WriteFaultName(WriteFault fault);

// Thread-safe.
class FaultInjectionEnv : public Env {
 public:
  // Forwards to `base` (not owned; Env::Default() when null).
  explicit FaultInjectionEnv(Env* base = nullptr);

  // Makes the `n`th write from now (1-based) fail with `fault`; counting restarts at 0. n == 0 or
  // kNone: no fault.
  void FailWrite(uint64_t n, WriteFault fault);
  // Writes since construction or the last FailWrite.
  uint64_t writes() const;
  // One line per write since construction or the last FailWrite ("create <path>",
  // "write <path> @<offset>+<n>", "truncate", "sync", "close", "rename <from> -> <to>",
  // "remove", "touch", "mtime", "lock"), in order.
  std::vector<std::string> write_log() const;
  // Whether the injected fault has fired.
  bool fired() const;
  // Whether a torn write has crashed the "process" (every call now fails with EIO).
  bool crashed() const;

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;
  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& dir) override;
  absl::Status RemoveFile(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::Status TouchFile(const std::string& path) override;
  absl::Status SetModifiedNow(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path) override;

  // What a write must do (used by the files this Env hands out).
  enum class Verdict { kRun, kFail, kTear };
  // Counts one write described by `what`; kFail sets `*error`.
  Verdict Write(const std::string& what, absl::Status* error);
  // EIO when crashed, else OK.
  absl::Status Alive(const std::string& what) const;

 private:
  Env* const base_;
  mutable absl::Mutex mu_;
  uint64_t fail_at_ ABSL_GUARDED_BY(mu_) = 0;
  WriteFault fault_ ABSL_GUARDED_BY(mu_) = WriteFault::kNone;
  uint64_t writes_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
  bool fired_ ABSL_GUARDED_BY(mu_) = false;
  bool crashed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_FAULT_INJECTION_ENV_H_
