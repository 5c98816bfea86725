// The one place that decides whether an ONNX external-data `location` may be read: the importer
// (compiler/src/onnx_tensor.cc) reads tensors through it and the JIT cache key hashes the same
// files through it (jitcache/src/object_cache.cc), so the key never reads a file the importer
// would refuse (a `../../dev/zero` location used to make the key read forever).
#ifndef CUVIL_COMPILER_EXTERNAL_DATA_H_
#define CUVIL_COMPILER_EXTERNAL_DATA_H_

#include <cstdint>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace cuvil {

// Largest external-data file read (the importer's largest tensor is 16 GiB; a file may hold
// several): anything larger is refused before a byte of it is read.
inline constexpr uint64_t kMaxExternalDataFileBytes = uint64_t{1} << 36;  // 64 GiB

// An open, validated external-data file. Move-only; closes its descriptor. Thread-compatible.
class ExternalDataFile {
 public:
  ExternalDataFile() = default;
  ExternalDataFile(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  ~ExternalDataFile();
  ExternalDataFile(ExternalDataFile&& other) noexcept;
  ExternalDataFile& operator=(ExternalDataFile&& other) noexcept;
  ExternalDataFile(const ExternalDataFile&) = delete;
  ExternalDataFile& operator=(const ExternalDataFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // From fstat of the open file.
  const std::string& path() const { return path_; }

  // Reads exactly `n` bytes at `offset` into `out` (pread, EINTR retried). False on a short read
  // or an error (the file shrank meanwhile).
  bool ReadAt(uint64_t offset, uint64_t n, void* out) const;

 private:
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string path_;
};

// Opens the external-data file `location` of a model in `model_dir` for reading, after checking
// that it is a regular file inside the folder: `location` is relative, has no `..` anywhere, and
// neither it nor a symlink on its way resolves outside `model_dir`; the file is at most
// `max_bytes` long. Never blocks on a FIFO or device. InvalidArgument saying what is wrong (the
// location quoted), NotFound when the file does not exist. Thread-safe.
absl::StatusOr<ExternalDataFile> OpenExternalDataFile(
    const std::string& model_dir, const std::string& location,
    uint64_t max_bytes = kMaxExternalDataFileBytes);

}  // namespace cuvil

#endif  // CUVIL_COMPILER_EXTERNAL_DATA_H_
