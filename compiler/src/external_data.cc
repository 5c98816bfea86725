#include "cuvil/compiler/external_data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

// realpath(3) of `path` (every symlink resolved); empty with `*err` set when it cannot be.
std::string RealPath(const std::string& path, int* err) {
  std::unique_ptr<char, decltype(&std::free)> resolved(realpath(path.c_str(), nullptr), &std::free);
  if (resolved == nullptr) {
    *err = errno;
    return "";
  }
  return resolved.get();
}

absl::Status Refuse(const std::string& location, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("external data location '", location.substr(0, 256), "' ", why));
}

}  // namespace

ExternalDataFile::~ExternalDataFile() {
  if (fd_ >= 0) close(fd_);
}

ExternalDataFile::ExternalDataFile(ExternalDataFile&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_(other.size_), path_(std::move(other.path_)) {}

ExternalDataFile& ExternalDataFile::operator=(ExternalDataFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    path_ = std::move(other.path_);
  }
  return *this;
}

bool ExternalDataFile::ReadAt(uint64_t offset, uint64_t n, void* out) const {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = pread(fd_, p, want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  return true;
}

absl::StatusOr<ExternalDataFile> OpenExternalDataFile(const std::string& model_dir,
                                                      const std::string& location,
                                                      uint64_t max_bytes) {
  if (location.empty()) return Refuse(location, "is empty");
  if (location.find('\0') != std::string::npos) return Refuse(location, "holds a NUL byte");
  if (location.find("..") != std::string::npos || location[0] == '/') {
    return Refuse(location, "escapes the model directory");
  }
  if (model_dir.empty()) {
    return absl::InvalidArgumentError("external data is not allowed for in-memory models");
  }
  int err = 0;
  const std::string root = RealPath(model_dir, &err);
  if (root.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model directory ", model_dir, ": ", std::strerror(err)));
  }
  const std::string joined = absl::StrCat(model_dir, "/", location);
  const std::string resolved = RealPath(joined, &err);
  if (resolved.empty()) {
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat("cannot open external data file ", joined));
    }
    return Refuse(location, std::strerror(err));
  }
  // A symlink inside the folder must not lead out of it either (location "w.bin" -> /etc/passwd).
  if (resolved.size() <= root.size() || resolved.compare(0, root.size(), root) != 0 ||
      (root != "/" && resolved[root.size()] != '/')) {
    return Refuse(location,
                  absl::StrCat("escapes the model directory (resolves to ", resolved, ")"));
  }
  // The resolved path has no symlinks left; O_NOFOLLOW keeps a swap of its last component for one
  // from working, O_NONBLOCK keeps a FIFO from blocking the open.
  const int fd = open(resolved.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot open external data file ", joined, ": ", std::strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("cannot stat external data file ", joined));
  }
  ExternalDataFile file(fd, static_cast<uint64_t>(st.st_size), joined);  // Closes it.
  if (!S_ISREG(st.st_mode)) return Refuse(location, "is not a regular file");
  if (file.size() > max_bytes) {
    return Refuse(location,
                  absl::StrCat("is ", file.size(), " bytes, more than the limit of ", max_bytes));
  }
  // Regular files ignore O_NONBLOCK; cleared all the same.
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return file;
}

}  // namespace cuvil
