#include "client_shared_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cuvil::perf {
namespace {

// Region starts are 64-byte aligned, as tensors in memory are.
uint64_t AlignUp(uint64_t n) { return (n + 63) & ~uint64_t{63}; }

}  // namespace

absl::StatusOr<std::unique_ptr<ClientSharedMemory>> ClientSharedMemory::Create(
    const std::vector<InputTensor>& inputs, size_t num_outputs, uint64_t output_bytes) {
  static std::atomic<int> counter{0};
  std::unique_ptr<ClientSharedMemory> shm(new ClientSharedMemory());
  const std::string base = absl::StrCat("cuvil_perf_", getpid(), "_", counter.fetch_add(1));
  shm->key_ = "/" + base;
  uint64_t offset = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    shm->inputs_.push_back({absl::StrCat(base, "_in", i), offset, inputs[i].data.size()});
    offset = AlignUp(offset + inputs[i].data.size());
  }
  for (size_t i = 0; i < num_outputs; ++i) {
    shm->outputs_.push_back({absl::StrCat(base, "_out", i), offset, output_bytes});
    offset = AlignUp(offset + output_bytes);
  }
  shm->size_ = offset == 0 ? 64 : offset;
  shm->fd_ = shm_open(shm->key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (shm->fd_ < 0) {
    return absl::InternalError(absl::StrCat("shm_open ", shm->key_, ": ", std::strerror(errno)));
  }
  if (ftruncate(shm->fd_, static_cast<off_t>(shm->size_)) != 0) {
    return absl::InternalError(absl::StrCat("ftruncate ", shm->key_, " to ", shm->size_,
                                            " bytes: ", std::strerror(errno)));
  }
  shm->base_ = mmap(nullptr, shm->size_, PROT_READ | PROT_WRITE, MAP_SHARED, shm->fd_, 0);
  if (shm->base_ == MAP_FAILED) {
    shm->base_ = nullptr;
    return absl::InternalError(absl::StrCat("mmap ", shm->key_, ": ", std::strerror(errno)));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::memcpy(static_cast<char*>(shm->base_) + shm->inputs_[i].offset, inputs[i].data.data(),
                inputs[i].data.size());
  }
  return shm;
}

ClientSharedMemory::~ClientSharedMemory() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) {
    close(fd_);
    shm_unlink(key_.c_str());
  }
}

absl::Status ClientSharedMemory::ForEachRegion(
    const std::function<absl::Status(const ClientRegion&)>& fn) const {
  for (const auto* list : {&inputs_, &outputs_}) {
    for (const ClientRegion& region : *list) {
      if (absl::Status s = fn(region); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace cuvil::perf
