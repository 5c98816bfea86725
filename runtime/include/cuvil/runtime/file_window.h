// Random access to a file's bytes through pread and a small reused buffer, never a mapping: a
// file truncated meanwhile reads short (an error the caller reports) instead of raising SIGBUS.
#ifndef CUVIL_RUNTIME_FILE_WINDOW_H_
#define CUVIL_RUNTIME_FILE_WINDOW_H_

#include <cstddef>
#include <cstdint>
#include <memory>

namespace cuvil {

// pread until the `n` bytes at `offset` are in `dst`; false on end of file or an I/O error.
// Thread-safe.
bool PreadAll(int fd, uint64_t offset, uint64_t n, void* dst);

// Thread-compatible (the window is mutable state); does not own the descriptor.
class FileWindow {
 public:
  // Reads the open file `fd`, whose readable range is [0, size) (its size when opened).
  FileWindow(int fd, uint64_t size);

  uint64_t size() const { return size_; }
  // Copies the `n` bytes at `offset` to `dst` (large reads go straight into `dst`). False when
  // the range is not inside [0, size()) or the file no longer holds it (truncated, I/O error).
  bool Read(uint64_t offset, uint64_t n, void* dst);
  // The byte at `offset`, through the window. False like Read.
  bool Byte(uint64_t offset, uint8_t* out);

 private:
  static constexpr size_t kWindowBytes = 64 << 10;
  bool Fill(uint64_t offset);

  int fd_;
  uint64_t size_;
  std::unique_ptr<uint8_t[]> window_;
  uint64_t window_offset_ = 0;
  size_t window_bytes_ = 0;
};

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_FILE_WINDOW_H_
