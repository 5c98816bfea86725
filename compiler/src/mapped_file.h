// Private: a read-only mapping of a whole file, so the importer parses a model (and copies its
// weights) straight from the page cache instead of first reading it into a heap string.
#ifndef CUVIL_COMPILER_SRC_MAPPED_FILE_H_
#define CUVIL_COMPILER_SRC_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace cuvil {

// Thread-compatible: the bytes are immutable while the object lives; movable, not copyable.
class MappedFile {
 public:
  // Maps the regular file at `path` read-only (MAP_PRIVATE). NotFound if it cannot be opened,
  // InvalidArgument if it is larger than `max_bytes` (checked before mapping). An empty file
  // yields an empty mapping.
  static absl::StatusOr<MappedFile> Open(const std::string& path, int64_t max_bytes);

  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_MAPPED_FILE_H_
