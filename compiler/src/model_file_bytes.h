// Private: the initializer bytes a model file keeps until the compiler reads them. The importer
// leaves every large raw_data in the file (HostTensor::Deferred) instead of copying 10s of MB into
// fresh tensors: the weights fill reads them once, straight into the weights blob or its packing,
// and a pass that needs the values reads them on first use.
#ifndef CUVIL_COMPILER_SRC_MODEL_FILE_BYTES_H_
#define CUVIL_COMPILER_SRC_MODEL_FILE_BYTES_H_

#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "cuvil/runtime/host_tensor.h"

namespace cuvil {

// An open model file (its own descriptor) and the identity it had when opened. Reads are refused
// once the file is no longer that file's contents as opened (size, inode, modification time
// changed): a model rewritten in place must not lend a compile half old, half new weights; a
// model replaced by rename keeps the old inode, which this descriptor still reads. Thread-safe.
class ModelFileBytes : public std::enable_shared_from_this<ModelFileBytes> {
 public:
  // Duplicates `fd` (a regular file whose fstat is `st`). Errors when no descriptor is left.
  static absl::StatusOr<std::shared_ptr<ModelFileBytes>> Open(int fd, const struct stat& st);
  ~ModelFileBytes();

  // The `length` bytes at `offset` as a tensor's deferred source (the range must be inside the
  // file as opened).
  std::shared_ptr<const DeferredBytes> Range(uint64_t offset, uint64_t length) const;

  // Copies the range to `dst`; false (and failed() from then on) when the file changed or the
  // read fails.
  bool Read(uint64_t offset, uint64_t length, void* dst) const;
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  ModelFileBytes(const ModelFileBytes&) = delete;
  ModelFileBytes& operator=(const ModelFileBytes&) = delete;

 private:
  ModelFileBytes(int fd, const struct stat& st) : fd_(fd), opened_(st) {}
  bool Unchanged() const;

  const int fd_;
  const struct stat opened_;
  mutable std::atomic<bool> failed_{false};
};

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_MODEL_FILE_BYTES_H_
