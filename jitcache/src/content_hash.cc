#include "content_hash.h"

#include <unistd.h>
#include <xxh_x86dispatch.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <system_error>
#include <thread>
#include <utility>

#include "spdlog/spdlog.h"

namespace cuvil::jitcache_internal {
namespace {

// Passes `size` bytes of `fd` from `offset` to `sink(const char*, size_t)` in chunks through a
// small reused buffer. pread copies through the kernel's direct map: on this kind of host that is
// far cheaper than touching a fresh mapping's 4 KiB pages one TLB miss at a time. False on a short
// read or an error.
template <typename Sink>
bool ReadChunks(int fd, uint64_t offset, uint64_t size, Sink&& sink) {
  constexpr size_t kChunk = 256 << 10;  // Stays in L2 while it is hashed and scanned.
  thread_local std::unique_ptr<char[]> buf(new char[kChunk]);
  while (size > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size, kChunk));
    ssize_t n = pread(fd, buf.get(), want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sink(buf.get(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
  return true;
}

// A thread running `fn`, or an unjoinable one when no thread can be created (the caller then
// runs `fn` itself): a failed std::thread must not escape as an exception.
template <typename Fn>
std::thread TryThread(Fn&& fn) {
  try {
    return std::thread(std::forward<Fn>(fn));
  } catch (const std::system_error& e) {
    spdlog::debug("JIT cache: no helper thread ({}); hashing on one", e.what());
    return std::thread();
  }
}

// Split point of TreeDigest: half the size rounded down to 1 MiB (0 below 2 MiB: one part).
uint64_t TreeSplit(uint64_t size) { return size / 2 / (1 << 20) * (1 << 20); }

}  // namespace

std::string ChecksumOf(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits_dispatch(data, size);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

std::string TreeDigestOf(const char* data, uint64_t size) {
  const uint64_t mid = TreeSplit(size);
  std::string second;
  std::thread helper;
  if (mid >= (4u << 20)) helper = TryThread([&] { second = ChecksumOf(data + mid, size - mid); });
  if (!helper.joinable()) second = ChecksumOf(data + mid, size - mid);
  std::string both = ChecksumOf(data, mid);
  if (helper.joinable()) helper.join();
  both += second;
  return ChecksumOf(both.data(), both.size());
}

std::optional<std::string> TreeDigestOfFile(int fd, uint64_t offset, uint64_t size) {
  const uint64_t mid = TreeSplit(size);
  auto digest = [fd](uint64_t at, uint64_t n, std::string* out) {
    Hasher h;
    if (!ReadChunks(fd, at, n, [&](const char* p, size_t len) { h.Raw(p, len); })) return false;
    *out = h.Canonical();
    return true;
  };
  std::string first, second;
  bool second_ok = false;
  std::thread helper;
  if (mid >= (4u << 20)) {
    helper = TryThread([&] { second_ok = digest(offset + mid, size - mid, &second); });
  }
  if (!helper.joinable()) second_ok = digest(offset + mid, size - mid, &second);
  const bool first_ok = digest(offset, mid, &first);
  if (helper.joinable()) helper.join();
  if (!first_ok || !second_ok) return std::nullopt;
  std::string both = first + second;
  return ChecksumOf(both.data(), both.size());
}

}  // namespace cuvil::jitcache_internal
