#include "digest_memo.h"

#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
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

DigestMemo::DigestMemo(std::string dir, std::chrono::milliseconds settle, Env* env)
    : dir_(std::move(dir)), settle_(settle), env_(env != nullptr ? env : Env::Default()) {}

std::string DigestMemo::PathOf(const FileStamp& stamp) const {
  char name[64];
  std::snprintf(name, sizeof name, "memo-%llx-%llx.cjm", static_cast<unsigned long long>(stamp.dev),
                static_cast<unsigned long long>(stamp.ino));
  return absl::StrCat(dir_, "/", name);
}

std::optional<MemoRecord> DigestMemo::Find(const FileStamp& stamp) const {
  const std::string path = PathOf(stamp);
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file = env_->NewRandomAccessFile(path);
  if (!file.ok() || !(*file)->is_regular()) return std::nullopt;
  char buf[kRecordBytes];
  // Short, long or unreadable: not a record.
  if ((*file)->size() != kRecordBytes || !(*file)->Read(0, kRecordBytes, buf).ok()) {
    return std::nullopt;
  }
  char sum[16];
  Checksum(buf, kBodyBytes, sum);
  if (std::memcmp(buf, kMagic, sizeof kMagic) != 0 || Get(buf + 16, 4) != kMemoVersion ||
      std::memcmp(sum, buf + kBodyBytes, sizeof sum) != 0) {
    return std::nullopt;
  }
  FileStamp recorded;
  recorded.dev = Get(buf + 24, 8);
  recorded.ino = Get(buf + 32, 8);
  recorded.size = Get(buf + 40, 8);
  recorded.mtime_ns = static_cast<int64_t>(Get(buf + 48, 8));
  recorded.ctime_ns = static_cast<int64_t>(Get(buf + 56, 8));
  if (!(recorded == stamp)) return std::nullopt;
  // In use: the cache's eviction keeps records used since the newest entry it evicts.
  (void)env_->SetModifiedNow(path);
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
  // 0600: the record names a model file and its digest; never through a symlink. Not synced: a
  // record torn by a crash fails its checksum and is hashed again.
  AtomicWriteOptions options;
  options.temp_path = tmp;
  options.sync = false;
  return WriteFileAtomically(*env_, path, {{0, std::string_view(buf, sizeof buf)}}, sizeof buf,
                             options)
      .ok();
}

}  // namespace cuvil::jitcache_internal
