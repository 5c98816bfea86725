#include "cuvil/jitcache/fault_injection_env.h"

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuvil/runtime/status_macros.h"

namespace cuvil {
namespace {

class FaultWritableFile : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::unique_ptr<WritableFile> base, std::string path)
      : env_(env), base_(std::move(base)), path_(std::move(path)) {}

  absl::Status WriteAt(uint64_t offset, std::string_view bytes) override {
    absl::Status error;
    switch (env_->Write(absl::StrCat("write ", path_, " @", offset, "+", bytes.size()), &error)) {
      case FaultInjectionEnv::Verdict::kFail:
        return error;
      case FaultInjectionEnv::Verdict::kTear: {
        const size_t keep = bytes.size() >= 2 ? bytes.size() / 2 : 0;
        (void)base_->WriteAt(offset, bytes.substr(0, keep));
        return ErrnoStatus(EIO, absl::StrCat("torn write of ", path_, " (crashed)"));
      }
      case FaultInjectionEnv::Verdict::kRun:
        break;
    }
    return base_->WriteAt(offset, bytes);
  }
  absl::Status Truncate(uint64_t size) override {
    return Run(absl::StrCat("truncate ", path_, " ", size), [&] { return base_->Truncate(size); });
  }
  absl::Status Sync() override {
    return Run(absl::StrCat("sync ", path_), [&] { return base_->Sync(); });
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map() const override {
    CUVIL_RETURN_IF_ERROR(env_->Alive(path_));
    return base_->Map();
  }
  absl::Status Close() override {
    return Run(absl::StrCat("close ", path_), [&] { return base_->Close(); });
  }

 private:
  template <typename Fn>
  absl::Status Run(const std::string& what, Fn&& fn) {
    absl::Status error;
    switch (env_->Write(what, &error)) {
      case FaultInjectionEnv::Verdict::kFail:
        return error;
      case FaultInjectionEnv::Verdict::kTear:
        return ErrnoStatus(EIO, absl::StrCat(what, " (crashed)"));
      case FaultInjectionEnv::Verdict::kRun:
        break;
    }
    return fn();
  }

  FaultInjectionEnv* env_;
  std::unique_ptr<WritableFile> base_;  // Closed when destroyed, as the kernel would at a crash.
  std::string path_;
};

class FaultRandomAccessFile : public RandomAccessFile {
 public:
  FaultRandomAccessFile(const FaultInjectionEnv* env, std::unique_ptr<RandomAccessFile> base,
                        std::string path)
      : env_(env), base_(std::move(base)), path_(std::move(path)) {}
  uint64_t size() const override { return base_->size(); }
  bool is_regular() const override { return base_->is_regular(); }
  absl::Status Read(uint64_t offset, uint64_t n, void* dst) const override {
    CUVIL_RETURN_IF_ERROR(env_->Alive(path_));
    return base_->Read(offset, n, dst);
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map(bool populate) const override {
    CUVIL_RETURN_IF_ERROR(env_->Alive(path_));
    return base_->Map(populate);
  }

 private:
  const FaultInjectionEnv* env_;
  std::unique_ptr<RandomAccessFile> base_;
  std::string path_;
};

}  // namespace

const char* WriteFaultName(WriteFault fault) {
  switch (fault) {
    case WriteFault::kNone:
      return "none";
    case WriteFault::kNoSpace:
      return "ENOSPC";
    case WriteFault::kIoError:
      return "EIO";
    case WriteFault::kTornWrite:
      return "torn";
  }
  return "?";
}

FaultInjectionEnv::FaultInjectionEnv(Env* base) : base_(base != nullptr ? base : Env::Default()) {}

void FaultInjectionEnv::FailWrite(uint64_t n, WriteFault fault) {
  absl::MutexLock lock(&mu_);
  fail_at_ = n;
  fault_ = fault;
  writes_ = 0;
  log_.clear();
  fired_ = false;
}

uint64_t FaultInjectionEnv::writes() const {
  absl::MutexLock lock(&mu_);
  return writes_;
}

std::vector<std::string> FaultInjectionEnv::write_log() const {
  absl::MutexLock lock(&mu_);
  return log_;
}

bool FaultInjectionEnv::fired() const {
  absl::MutexLock lock(&mu_);
  return fired_;
}

bool FaultInjectionEnv::crashed() const {
  absl::MutexLock lock(&mu_);
  return crashed_;
}

FaultInjectionEnv::Verdict FaultInjectionEnv::Write(const std::string& what, absl::Status* error) {
  absl::MutexLock lock(&mu_);
  if (crashed_) {
    *error = ErrnoStatus(EIO, absl::StrCat(what, " (crashed)"));
    return Verdict::kFail;
  }
  ++writes_;
  log_.push_back(what);
  if (writes_ != fail_at_ || fault_ == WriteFault::kNone) return Verdict::kRun;
  fired_ = true;
  switch (fault_) {
    case WriteFault::kNoSpace:
      *error = ErrnoStatus(ENOSPC, what);
      return Verdict::kFail;
    case WriteFault::kIoError:
      *error = ErrnoStatus(EIO, what);
      return Verdict::kFail;
    case WriteFault::kTornWrite:
      crashed_ = true;
      return Verdict::kTear;
    case WriteFault::kNone:
      break;
  }
  return Verdict::kRun;
}

absl::Status FaultInjectionEnv::Alive(const std::string& what) const {
  absl::MutexLock lock(&mu_);
  if (crashed_) return ErrnoStatus(EIO, absl::StrCat(what, " (crashed)"));
  return absl::OkStatus();
}

namespace {

// The status of a write that is not to run (kFail: its error; kTear: the crash).
absl::Status NotRun(FaultInjectionEnv::Verdict verdict, absl::Status error,
                    const std::string& what) {
  if (verdict == FaultInjectionEnv::Verdict::kTear) {
    return ErrnoStatus(EIO, absl::StrCat(what, " (crashed)"));
  }
  return error;
}

}  // namespace

absl::StatusOr<std::unique_ptr<WritableFile>> FaultInjectionEnv::NewWritableFile(
    const std::string& path) {
  absl::Status error;
  const std::string what = absl::StrCat("create ", path);
  if (Verdict v = Write(what, &error); v != Verdict::kRun) return NotRun(v, error, what);
  CUVIL_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, base_->NewWritableFile(path));
  return std::make_unique<FaultWritableFile>(this, std::move(file), path);
}

absl::StatusOr<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::NewRandomAccessFile(
    const std::string& path) {
  CUVIL_RETURN_IF_ERROR(Alive(path));
  CUVIL_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, base_->NewRandomAccessFile(path));
  return std::make_unique<FaultRandomAccessFile>(this, std::move(file), path);
}

absl::StatusOr<std::vector<DirEntry>> FaultInjectionEnv::ListDir(const std::string& dir) {
  CUVIL_RETURN_IF_ERROR(Alive(dir));
  return base_->ListDir(dir);
}

absl::Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  absl::Status error;
  const std::string what = absl::StrCat("remove ", path);
  if (Verdict v = Write(what, &error); v != Verdict::kRun) return NotRun(v, error, what);
  return base_->RemoveFile(path);
}

absl::Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  absl::Status error;
  const std::string what = absl::StrCat("rename ", from, " -> ", to);
  if (Verdict v = Write(what, &error); v != Verdict::kRun) return NotRun(v, error, what);
  return base_->RenameFile(from, to);
}

absl::Status FaultInjectionEnv::TouchFile(const std::string& path) {
  absl::Status error;
  const std::string what = absl::StrCat("touch ", path);
  if (Verdict v = Write(what, &error); v != Verdict::kRun) return NotRun(v, error, what);
  return base_->TouchFile(path);
}

absl::Status FaultInjectionEnv::SetModifiedNow(const std::string& path) {
  absl::Status error;
  const std::string what = absl::StrCat("mtime ", path);
  if (Verdict v = Write(what, &error); v != Verdict::kRun) return NotRun(v, error, what);
  return base_->SetModifiedNow(path);
}

bool FaultInjectionEnv::FileExists(const std::string& path) {
  return Alive(path).ok() && base_->FileExists(path);
}

absl::StatusOr<std::unique_ptr<FileLock>> FaultInjectionEnv::LockFile(const std::string& path) {
  absl::Status error;
  const std::string what = absl::StrCat("lock ", path);
  if (Verdict v = Write(what, &error); v != Verdict::kRun) return NotRun(v, error, what);
  return base_->LockFile(path);
}

}  // namespace cuvil
