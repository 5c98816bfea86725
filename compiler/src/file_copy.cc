#include "file_copy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

struct FdCloser {
  int fd;
  ~FdCloser() { close(fd); }
};

}  // namespace

absl::StatusOr<FileCopy> FileCopy::Open(const std::string& path, int64_t max_bytes) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open model ", path, ": ", std::strerror(errno)));
  }
  FdCloser closer{fd};
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::NotFoundError(absl::StrCat("cannot open model ", path, ": not a regular file"));
  }
  if (st.st_size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than 2 GB; store weights as external data"));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) return FileCopy(nullptr, 0, nullptr, 0);
  const size_t reserved = size;
  void* base = mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size, " bytes for model ",
                                                     path, ": ", std::strerror(errno)));
  }
  auto* start = static_cast<uint8_t*>(base);
  FileCopy copy(base, reserved, start, size);  // Unmaps on every error path below.
  posix_fadvise(fd, 0, static_cast<off_t>(size), POSIX_FADV_SEQUENTIAL);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = pread(fd, start + done, size - done, static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::NotFoundError(
          absl::StrCat("cannot read model ", path, ": ", std::strerror(errno)));
    }
    if (n == 0) {
      return absl::InvalidArgumentError(absl::StrCat("model ", path, " shrank while it was read (",
                                                     done, " of ", size, " bytes)"));
    }
    done += static_cast<size_t>(n);
  }
  mprotect(start, size, PROT_READ);  // Best effort: the importer only reads.
  return copy;
}

FileCopy::FileCopy(FileCopy&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)),
      reserved_(std::exchange(other.reserved_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

FileCopy& FileCopy::operator=(FileCopy&& other) noexcept {
  if (this != &other) {
    Release();
    base_ = std::exchange(other.base_, nullptr);
    reserved_ = std::exchange(other.reserved_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

FileCopy::~FileCopy() { Release(); }

void FileCopy::Release() {
  if (base_ != nullptr) munmap(base_, reserved_);
  base_ = nullptr;
}

}  // namespace cuvil
