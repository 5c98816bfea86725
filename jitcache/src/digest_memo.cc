#include "digest_memo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>

#include "absl/strings/str_cat.h"

namespace cuvil::jitcache_internal {
namespace {

// Layout (little-endian): magic[16], version u32, flags u32, dev u64, ino u64, size u64,
// mtime_ns i64, ctime_ns i64, digest[16], XXH3-128 (canonical) of all the preceding bytes [16].
constexpr char kMagic[16] = {'c', 'u', 'v', 'i', 'l', '.', 'j',  'i',
                             't', '_', 'm', 'e', 'm', 'o', '\n', '\0'};
// Bumped whenever the record layout changes.
constexpr uint32_t kMemoVersion = 1;
constexpr uint32_t kFlagNoExternalData = 1;
constexpr size_t kDigestBytes = 16;
constexpr size_t kBodyBytes = 16 + 4 + 4 + 5 * 8 + kDigestBytes;
constexpr size_t kRecordBytes = kBodyBytes + 16;
// Shared with ObjectCache's writers, so its eviction also removes temporaries of dead writers.
constexpr char kTempPrefix[] = ".tmp-";

void Put(uint64_t v, int bytes, char* p) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t Get(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= uint64_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}

void Checksum(const char* data, size_t n, char* out) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(data, n));
  std::memcpy(out, c.digest, sizeof c.digest);
}

int64_t NowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

FileStamp StampOf(const struct stat& st) {
  FileStamp s;
  s.dev = static_cast<uint64_t>(st.st_dev);
  s.ino = static_cast<uint64_t>(st.st_ino);
  s.size = static_cast<uint64_t>(st.st_size);
  s.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec;
  s.ctime_ns = int64_t{st.st_ctim.tv_sec} * 1'000'000'000 + st.st_ctim.tv_nsec;
  return s;
}

DigestMemo::DigestMemo(std::string dir, std::chrono::milliseconds settle)
    : dir_(std::move(dir)), settle_(settle) {}

std::string DigestMemo::PathOf(const FileStamp& stamp) const {
  char name[64];
  std::snprintf(name, sizeof name, "memo-%llx-%llx.cjm", static_cast<unsigned long long>(stamp.dev),
                static_cast<unsigned long long>(stamp.ino));
  return absl::StrCat(dir_, "/", name);
}

std::optional<MemoRecord> DigestMemo::Find(const FileStamp& stamp) const {
  const int fd = open(PathOf(stamp).c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) return std::nullopt;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return std::nullopt;
  }
  char buf[kRecordBytes + 1];
  size_t have = 0;
  while (have < sizeof buf) {
    const ssize_t n = pread(fd, buf + have, sizeof buf - have, static_cast<off_t>(have));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<size_t>(n);
  }
  if (have != kRecordBytes) {  // Short, long or unreadable.
    close(fd);
    return std::nullopt;
  }
  char sum[16];
  Checksum(buf, kBodyBytes, sum);
  if (std::memcmp(buf, kMagic, sizeof kMagic) != 0 || Get(buf + 16, 4) != kMemoVersion ||
      std::memcmp(sum, buf + kBodyBytes, sizeof sum) != 0) {
    close(fd);
    return std::nullopt;
  }
  FileStamp recorded;
  recorded.dev = Get(buf + 24, 8);
  recorded.ino = Get(buf + 32, 8);
  recorded.size = Get(buf + 40, 8);
  recorded.mtime_ns = static_cast<int64_t>(Get(buf + 48, 8));
  recorded.ctime_ns = static_cast<int64_t>(Get(buf + 56, 8));
  if (!(recorded == stamp)) {
    close(fd);
    return std::nullopt;
  }
  // In use: the cache's eviction keeps records used since the newest entry it evicts.
  futimens(fd, nullptr);
  close(fd);
  MemoRecord r;
  r.digest.assign(buf + 64, kDigestBytes);
  r.no_external_data = (Get(buf + 20, 4) & kFlagNoExternalData) != 0;
  return r;
}

bool DigestMemo::Store(const FileStamp& stamp, const MemoRecord& record) const {
  if (record.digest.size() != kDigestBytes) return false;
  // Racy: a change later in the same timestamp tick would leave mtime and ctime as they are.
  const int64_t settle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(settle_).count();
  const int64_t changed = std::max(stamp.mtime_ns, stamp.ctime_ns);
  if (NowNs() - changed < settle_ns) return false;
  char buf[kRecordBytes];
  std::memcpy(buf, kMagic, sizeof kMagic);
  Put(kMemoVersion, 4, buf + 16);
  Put(record.no_external_data ? kFlagNoExternalData : 0, 4, buf + 20);
  Put(stamp.dev, 8, buf + 24);
  Put(stamp.ino, 8, buf + 32);
  Put(stamp.size, 8, buf + 40);
  Put(static_cast<uint64_t>(stamp.mtime_ns), 8, buf + 48);
  Put(static_cast<uint64_t>(stamp.ctime_ns), 8, buf + 56);
  std::memcpy(buf + 64, record.digest.data(), kDigestBytes);
  Checksum(buf, kBodyBytes, buf + kBodyBytes);
  thread_local std::mt19937_64 rng(std::random_device{}());
  const std::string path = PathOf(stamp);
  const std::string tmp =
      absl::StrCat(dir_, "/", kTempPrefix, "memo-", getpid(), "-", rng() % 1000000);
  // 0600: the record names a model file and its digest; never through a symlink.
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return false;
  bool ok = pwrite(fd, buf, sizeof buf, 0) == static_cast<ssize_t>(sizeof buf);
  ok = close(fd) == 0 && ok;
  ok = ok && rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) unlink(tmp.c_str());
  return ok;
}

}  // namespace cuvil::jitcache_internal
