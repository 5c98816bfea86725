#include "shared_memory_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "bus_error_guard.h"

namespace cuvil {
namespace {

// a + b, or false when it overflows.
bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* sum) {
  return !__builtin_add_overflow(a, b, sum);
}

}  // namespace

SharedMemoryRegion::~SharedMemoryRegion() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  ::close(fd_);
}

absl::Status SharedMemoryRegion::CheckRange(uint64_t offset, uint64_t size,
                                            const std::string& tensor) const {
  uint64_t end = 0;
  if (!CheckedAdd(offset, size, &end) || end > status_.byte_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor, "': shared memory offset ", offset, " + byte size ", size,
                     " is outside region '", status_.name, "' of ", status_.byte_size, " bytes"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::CheckObjectCovers(const std::string& tensor) const {
  struct stat st;
  if (::fstat(fd_, &st) != 0) {
    return absl::InternalError(absl::StrCat("tensor '", tensor, "': cannot stat shared memory '",
                                            status_.key, "': ", std::strerror(errno)));
  }
  // Register checked offset + byte_size does not overflow.
  if (static_cast<uint64_t>(st.st_size) < status_.offset + status_.byte_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "': shared memory region '", status_.name, "' needs ", status_.key,
        " to hold ", status_.offset + status_.byte_size, " bytes but it now has ", st.st_size,
        " (was it truncated after registering?)"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::Read(uint64_t offset, uint64_t size, void* dst,
                                      const std::string& tensor) const {
  if (absl::Status s = CheckRange(offset, size, tensor); !s.ok()) return s;
  if (absl::Status s = CheckObjectCovers(tensor); !s.ok()) return s;
  if (size != 0 && !CopyCatchingBusErrors(dst, window_ + offset, size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor, "': reading shared memory region '", status_.name,
                     "' failed: ", status_.key, " was truncated during the copy"));
  }
  return absl::OkStatus();
}

absl::Status SharedMemoryRegion::Write(uint64_t offset, const void* src, uint64_t size,
                                       const std::string& tensor) const {
  if (absl::Status s = CheckRange(offset, size, tensor); !s.ok()) return s;
  if (absl::Status s = CheckObjectCovers(tensor); !s.ok()) return s;
  if (size != 0 && !CopyCatchingBusErrors(window_ + offset, src, size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor, "': writing shared memory region '", status_.name,
                     "' failed: ", status_.key, " was truncated during the copy"));
  }
  return absl::OkStatus();
}

SharedMemoryRegistry::SharedMemoryRegistry(SharedMemoryLimits limits)
    : limits_(limits),
      input_buffers_(std::make_shared<RecycledBuffers>(8, limits.max_request_input_bytes)) {}

absl::Status SharedMemoryRegistry::Register(const std::string& name, const std::string& key,
                                            uint64_t offset, uint64_t byte_size) {
  if (name.empty()) return absl::InvalidArgumentError("a shared memory region needs a name");
  if (key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory region '", name, "' needs a key"));
  }
  uint64_t end = 0;
  if (!CheckedAdd(offset, byte_size, &end) || end > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat("shared memory region '", name, "': offset ",
                                                   offset, " + byte_size ", byte_size,
                                                   " overflows"));
  }
  {
    absl::MutexLock lock(&mu_);
    if (regions_.count(name)) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared memory region '", name, "' is already registered"));
    }
  }
  // glibc refuses keys with a '/' after the leading one, so only /dev/shm objects can be named.
  int fd = ::shm_open(key.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return absl::InvalidArgumentError(absl::StrCat("unable to open shared memory key '", key,
                                                   "' for region '", name,
                                                   "': ", std::strerror(errno)));
  }
  auto region = std::shared_ptr<SharedMemoryRegion>(
      new SharedMemoryRegion(SharedMemoryRegionStatus{name, key, offset, byte_size}, fd));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory key '", key, "' is not a shared memory object"));
  }
  if (end > static_cast<uint64_t>(st.st_size)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared memory region '", name, "': offset ", offset, " + byte_size ",
                     byte_size, " exceeds the ", st.st_size, " bytes of '", key, "'"));
  }
  if (byte_size != 0) {
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t start = offset / page * page;
    region->mapping_bytes_ = static_cast<size_t>(end - start);
    void* mapping = ::mmap(nullptr, region->mapping_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
                           static_cast<off_t>(start));
    if (mapping == MAP_FAILED) {
      return absl::InvalidArgumentError(absl::StrCat("unable to map shared memory key '", key,
                                                     "' for region '", name,
                                                     "': ", std::strerror(errno)));
    }
    region->mapping_ = mapping;
    region->window_ = static_cast<uint8_t*>(mapping) + (offset - start);
  }
  absl::MutexLock lock(&mu_);
  if (regions_.size() >= limits_.max_regions) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot register shared memory region '", name, "': ", regions_.size(),
                     " regions are registered, the limit (unregister some first)"));
  }
  if (!regions_.emplace(name, std::move(region)).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("shared memory region '", name, "' is already registered"));
  }
  return absl::OkStatus();
}

void SharedMemoryRegistry::Unregister(const std::string& name) {
  // Declared before the lock so regions are released after it: a last reference closes a file.
  std::map<std::string, std::shared_ptr<const SharedMemoryRegion>> dropped;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    dropped.swap(regions_);
  } else if (auto it = regions_.find(name); it != regions_.end()) {
    dropped.emplace(it->first, std::move(it->second));
    regions_.erase(it);
  }
}

absl::StatusOr<std::vector<SharedMemoryRegionStatus>> SharedMemoryRegistry::Status(
    const std::string& name) const {
  std::vector<SharedMemoryRegionStatus> out;
  absl::MutexLock lock(&mu_);
  if (name.empty()) {
    for (const auto& [n, region] : regions_) out.push_back(region->status());
    return out;
  }
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::NotFoundError(
        absl::StrCat("unable to find system shared memory region: '", name, "'"));
  }
  out.push_back(it->second->status());
  return out;
}

absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> SharedMemoryRegistry::Find(
    const std::string& name, const std::string& tensor) const {
  absl::MutexLock lock(&mu_);
  auto it = regions_.find(name);
  if (it == regions_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "': unknown shared memory region '", name,
        "' (register it first with /v2/systemsharedmemory or SystemSharedMemoryRegister)"));
  }
  return it->second;
}

}  // namespace cuvil
