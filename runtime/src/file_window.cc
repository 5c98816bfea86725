#include "cuvil/runtime/file_window.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace cuvil {

bool PreadAll(int fd, uint64_t offset, uint64_t n, void* out) {
  auto* dst = static_cast<uint8_t*>(out);
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, uint64_t{1} << 30));
    const ssize_t got = pread(fd, dst, want, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    dst += got;
    offset += static_cast<uint64_t>(got);
    n -= static_cast<uint64_t>(got);
  }
  return true;
}

FileWindow::FileWindow(int fd, uint64_t size)
    : fd_(fd), size_(size), window_(new uint8_t[kWindowBytes]) {}

bool FileWindow::Fill(uint64_t offset) {
  const uint64_t n = std::min<uint64_t>(kWindowBytes, size_ - offset);
  window_bytes_ = 0;
  if (!PreadAll(fd_, offset, n, window_.get())) return false;
  window_offset_ = offset;
  window_bytes_ = static_cast<size_t>(n);
  return true;
}

bool FileWindow::Byte(uint64_t offset, uint8_t* out) {
  if (offset >= size_) return false;
  if (offset < window_offset_ || offset - window_offset_ >= window_bytes_) {
    if (!Fill(offset)) return false;
  }
  *out = window_[offset - window_offset_];
  return true;
}

bool FileWindow::Read(uint64_t offset, uint64_t n, void* dst) {
  if (offset > size_ || n > size_ - offset) return false;
  auto* d = static_cast<uint8_t*>(dst);
  if (n >= kWindowBytes / 2) return PreadAll(fd_, offset, n, d);
  while (n > 0) {
    if (offset < window_offset_ || offset - window_offset_ >= window_bytes_) {
      if (!Fill(offset)) return false;
    }
    const uint64_t at = offset - window_offset_;
    const uint64_t take = std::min<uint64_t>(n, window_bytes_ - at);
    std::memcpy(d, window_.get() + at, static_cast<size_t>(take));
    d += take;
    offset += take;
    n -= take;
  }
  return true;
}

}  // namespace cuvil
