#include "mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cuvil {

absl::StatusOr<MappedFile> MappedFile::Open(const std::string& path, int64_t max_bytes) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open model ", path, ": ", std::strerror(errno)));
  }
  struct stat st{};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::NotFoundError(absl::StrCat("cannot open model ", path, ": not a regular file"));
  }
  if (st.st_size > max_bytes) {
    close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is larger than 2 GB; store weights as external data"));
  }
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) {
    close(fd);
    return MappedFile(nullptr, 0);
  }
  void* addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  close(fd);
  if (addr == MAP_FAILED) {
    return absl::NotFoundError(
        absl::StrCat("cannot map model ", path, ": ", std::strerror(map_errno)));
  }
  // Read once front to back: let the kernel read ahead and map whole runs of pages per fault.
  madvise(addr, size, MADV_SEQUENTIAL);
  madvise(addr, size, MADV_WILLNEED);
  return MappedFile(static_cast<const uint8_t*>(addr), size);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace cuvil
