#include "model_file_bytes.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "cuvil/runtime/file_window.h"

namespace cuvil {
namespace {

class FileRange : public DeferredBytes {
 public:
  FileRange(std::shared_ptr<const ModelFileBytes> file, uint64_t offset, uint64_t length)
      : file_(std::move(file)), offset_(offset), length_(length) {}
  bool Read(uint8_t* dst) const override { return file_->Read(offset_, length_, dst); }
  bool failed() const override { return file_->failed(); }

 private:
  const std::shared_ptr<const ModelFileBytes> file_;
  const uint64_t offset_;
  const uint64_t length_;
};

}  // namespace

absl::StatusOr<std::shared_ptr<ModelFileBytes>> ModelFileBytes::Open(int fd,
                                                                     const struct stat& st) {
  const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot keep the model file open: ", std::strerror(errno)));
  }
  return std::shared_ptr<ModelFileBytes>(new ModelFileBytes(own, st));
}

ModelFileBytes::~ModelFileBytes() { close(fd_); }

std::shared_ptr<const DeferredBytes> ModelFileBytes::Range(uint64_t offset, uint64_t length) const {
  return std::make_shared<FileRange>(shared_from_this(), offset, length);
}

bool ModelFileBytes::Unchanged() const {
  struct stat now{};
  return fstat(fd_, &now) == 0 && now.st_size == opened_.st_size && now.st_ino == opened_.st_ino &&
         now.st_dev == opened_.st_dev && now.st_mtim.tv_sec == opened_.st_mtim.tv_sec &&
         now.st_mtim.tv_nsec == opened_.st_mtim.tv_nsec;
}

bool ModelFileBytes::Read(uint64_t offset, uint64_t length, void* dst) const {
  const auto size = static_cast<uint64_t>(opened_.st_size);
  const bool ok = !failed() && offset <= size && length <= size - offset && Unchanged() &&
                  PreadAll(fd_, offset, length, dst) && Unchanged();
  if (!ok) failed_.store(true, std::memory_order_release);
  return ok;
}

}  // namespace cuvil
