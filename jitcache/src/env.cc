// The POSIX Env and the atomic write every store shares.
#include "cuvil/jitcache/env.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cuvil/jitcache/private_dir.h"
#include "cuvil/runtime/status_macros.h"

namespace cuvil {
namespace {

class PosixMapping : public MappedFile {
 public:
  PosixMapping(void* addr, size_t size) : addr_(addr), size_(size) {}
  ~PosixMapping() override {
    if (size_ != 0) munmap(addr_, size_);
  }
  PosixMapping(const PosixMapping&) = delete;
  PosixMapping& operator=(const PosixMapping&) = delete;
  const uint8_t* data() const override { return static_cast<const uint8_t*>(addr_); }
  size_t size() const override { return size_; }

 private:
  void* addr_;
  size_t size_;
};

// Maps `size` bytes of `fd` read-only (MAP_PRIVATE). An empty file maps to an empty region.
absl::StatusOr<std::shared_ptr<const MappedFile>> MapFd(int fd, uint64_t size, bool populate,
                                                        const std::string& path) {
  if (size == 0) return std::make_shared<const PosixMapping>(nullptr, 0);
  void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ,
                 MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat("cannot map ", path));
  return std::make_shared<const PosixMapping>(p, static_cast<size_t>(size));
}

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, std::string path, uint64_t size, bool regular)
      : fd_(fd), path_(std::move(path)), size_(size), regular_(regular) {}
  ~PosixRandomAccessFile() override { close(fd_); }
  PosixRandomAccessFile(const PosixRandomAccessFile&) = delete;
  PosixRandomAccessFile& operator=(const PosixRandomAccessFile&) = delete;

  uint64_t size() const override { return size_; }
  bool is_regular() const override { return regular_; }
  absl::Status Read(uint64_t offset, uint64_t n, void* dst) const override {
    char* out = static_cast<char*>(dst);
    while (n > 0) {
      const ssize_t got = pread(fd_, out, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) return ErrnoStatus(errno, absl::StrCat("cannot read ", path_));
      if (got == 0) return absl::OutOfRangeError(absl::StrCat(path_, " ends early"));
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<uint64_t>(got);
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map(bool populate) const override {
    return MapFd(fd_, size_, populate, path_);
  }

 private:
  int fd_;
  std::string path_;
  uint64_t size_;
  bool regular_;
};

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) close(fd_);
  }
  PosixWritableFile(const PosixWritableFile&) = delete;
  PosixWritableFile& operator=(const PosixWritableFile&) = delete;

  absl::Status WriteAt(uint64_t offset, std::string_view bytes) override {
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, absl::StrCat("cannot write ", path_));
      if (n == 0) return ErrnoStatus(ENOSPC, absl::StrCat("cannot write ", path_));
      size_ = std::max<uint64_t>(size_, offset + done + static_cast<uint64_t>(n));
      done += static_cast<size_t>(n);
    }
    return absl::OkStatus();
  }
  absl::Status Truncate(uint64_t size) override {
    if (ftruncate(fd_, static_cast<off_t>(size)) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot extend ", path_));
    }
    size_ = size;
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    if (fsync(fd_) != 0) return ErrnoStatus(errno, absl::StrCat("cannot sync ", path_));
    return absl::OkStatus();
  }
  absl::StatusOr<std::shared_ptr<const MappedFile>> Map() const override {
    return MapFd(fd_, size_, /*populate=*/false, path_);
  }
  absl::Status Close() override {
    const int fd = std::exchange(fd_, -1);
    if (fd >= 0 && close(fd) != 0) return ErrnoStatus(errno, absl::StrCat("cannot close ", path_));
    return absl::OkStatus();
  }

 private:
  int fd_;
  std::string path_;
  uint64_t size_ = 0;
};

class PosixFileLock : public FileLock {
 public:
  explicit PosixFileLock(int fd) : fd_(fd) {}
  ~PosixFileLock() override {
    flock(fd_, LOCK_UN);
    close(fd_);
  }
  PosixFileLock(const PosixFileLock&) = delete;
  PosixFileLock& operator=(const PosixFileLock&) = delete;

 private:
  int fd_;
};

class PosixEnv : public Env {
 public:
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    const int fd =
        open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kPrivateFileMode);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot create ", path));
    return std::make_unique<PosixWritableFile>(fd, path);
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
    struct stat st;
    if (fstat(fd, &st) != 0) {
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, absl::StrCat("cannot stat ", path));
    }
    return std::make_unique<PosixRandomAccessFile>(fd, path, static_cast<uint64_t>(st.st_size),
                                                   S_ISREG(st.st_mode));
  }

  absl::StatusOr<std::vector<DirEntry>> ListDir(const std::string& dir) override {
    DIR* d = opendir(dir.c_str());
    if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("cannot list ", dir));
    std::vector<DirEntry> out;
    while (const dirent* e = readdir(d)) {
      const std::string_view name = e->d_name;
      if (name == "." || name == "..") continue;
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;  // Gone.
      DirEntry entry;
      entry.name = std::string(name);
      entry.regular = S_ISREG(st.st_mode);
      entry.size = entry.regular ? static_cast<uint64_t>(st.st_size) : 0;
      entry.mtime_unix_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
      out.push_back(std::move(entry));
    }
    closedir(d);
    return out;
  }

  absl::Status RemoveFile(const std::string& path) override {
    if (unlink(path.c_str()) != 0) return ErrnoStatus(errno, absl::StrCat("cannot remove ", path));
    return absl::OkStatus();
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot rename ", from, " to ", to));
    }
    return absl::OkStatus();
  }

  absl::Status TouchFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
                        kPrivateFileMode);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot create ", path));
    const int touched = futimens(fd, nullptr);
    const int err = errno;
    close(fd);
    if (touched != 0) return ErrnoStatus(err, absl::StrCat("cannot touch ", path));
    return absl::OkStatus();
  }

  absl::Status SetModifiedNow(const std::string& path) override {
    if (utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) != 0) {
      return ErrnoStatus(errno, absl::StrCat("cannot touch ", path));
    }
    return absl::OkStatus();
  }

  bool FileExists(const std::string& path) override {
    struct stat st;
    return stat(path.c_str(), &st) == 0;
  }

  absl::StatusOr<std::unique_ptr<FileLock>> LockFile(const std::string& path) override {
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, kPrivateFileMode);
    if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open lock ", path));
    while (flock(fd, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      close(fd);
      return ErrnoStatus(err, absl::StrCat("cannot lock ", path));
    }
    return std::make_unique<PosixFileLock>(fd);
  }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv();  // Never destroyed: used until the process exits.
  return env;
}

absl::Status ErrnoStatus(int err, std::string_view what) {
  const std::string message = absl::StrCat(std::string(what), ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EEXIST:
      return absl::AlreadyExistsError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case ELOOP:
      return absl::FailedPreconditionError(message);
    default:
      return absl::InternalError(message);
  }
}

absl::StatusOr<std::shared_ptr<const MappedFile>> WriteFileAtomically(
    Env& env, const std::string& path, const std::vector<FilePiece>& pieces, uint64_t size,
    const AtomicWriteOptions& options) {
  const std::string tmp = options.temp_path.empty() ? path + ".tmp" : options.temp_path;
  absl::StatusOr<std::unique_ptr<WritableFile>> file = env.NewWritableFile(tmp);
  if (absl::IsAlreadyExists(file.status()) && options.replace_stale_temp) {
    (void)env.RemoveFile(tmp);  // A crashed predecessor's: the create below says if it stays.
    file = env.NewWritableFile(tmp);
  }
  CUVIL_RETURN_IF_ERROR(file);
  std::shared_ptr<const MappedFile> mapping;
  auto write = [&]() -> absl::Status {
    for (const FilePiece& piece : pieces)
      CUVIL_RETURN_IF_ERROR((*file)->WriteAt(piece.offset, piece.bytes));
    CUVIL_RETURN_IF_ERROR((*file)->Truncate(size));
    if (options.sync) CUVIL_RETURN_IF_ERROR((*file)->Sync());
    if (options.map) {
      absl::StatusOr<std::shared_ptr<const MappedFile>> mapped = (*file)->Map();
      if (mapped.ok()) mapping = *std::move(mapped);
    }
    CUVIL_RETURN_IF_ERROR((*file)->Close());
    return env.RenameFile(tmp, path);
  };
  if (absl::Status s = write(); !s.ok()) {
    file->reset();  // Closed before it is removed.
    (void)env.RemoveFile(tmp);
    return s;
  }
  return mapping;
}

}  // namespace cuvil
