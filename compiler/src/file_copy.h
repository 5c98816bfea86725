// Private: a whole file read into process memory, so the importer parses a model (and copies its
// weights) from bytes nobody else can change or take away while it runs.
//
// A shared mapping of the model file would raise SIGBUS (and kill the server) if the file were
// truncated in place while the importer touches it; a private copy cannot fault.
#ifndef CUVIL_COMPILER_SRC_FILE_COPY_H_
#define CUVIL_COMPILER_SRC_FILE_COPY_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace cuvil {

// Thread-compatible: the bytes are immutable while the object lives; movable, not copyable.
class FileCopy {
 public:
  // Reads the regular file at `path` into an anonymous, read-only (after the read) buffer of its
  // own. NotFound if it cannot be opened or read, InvalidArgument if it is larger than
  // `max_bytes` (checked before allocating) or shrinks while it is read. An empty file yields an
  // empty copy. Later changes to the file (truncation, rewrites) never affect the copy.
  static absl::StatusOr<FileCopy> Open(const std::string& path, int64_t max_bytes);

  FileCopy(FileCopy&& other) noexcept;
  FileCopy& operator=(FileCopy&& other) noexcept;
  FileCopy(const FileCopy&) = delete;
  FileCopy& operator=(const FileCopy&) = delete;
  ~FileCopy();

  // The file's bytes as they were read (nullptr when empty).
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  FileCopy(void* base, size_t reserved, const uint8_t* data, size_t size)
      : base_(base), reserved_(reserved), data_(data), size_(size) {}
  void Release();

  void* base_ = nullptr;  // The anonymous mapping holding data_, `reserved_` bytes long.
  size_t reserved_ = 0;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cuvil

#endif  // CUVIL_COMPILER_SRC_FILE_COPY_H_
