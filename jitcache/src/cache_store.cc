#include "cache_store.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <random>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache_entry.h"
#include "cuvil/runtime/status_macros.h"

namespace cuvil::jitcache_internal {
namespace {

// Whether `name` ends with `suffix`.
bool EndsWith(const std::string& name, std::string_view suffix) {
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), std::string::npos, suffix) == 0;
}

int64_t NowUnixNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

CacheStore::CacheStore(std::string dir, uint64_t max_bytes, Env* env)
    : dir_(std::move(dir)), max_bytes_(max_bytes), env_(env != nullptr ? env : Env::Default()) {}

std::string CacheStore::EntryPath(const std::string& key) const {
  return absl::StrCat(dir_, "/", key, kEntrySuffix);
}

std::string CacheStore::SizeMarkerPath(uint64_t size) const {
  return absl::StrCat(dir_, "/size-", size, ".cjs");
}

absl::StatusOr<CompiledModel> CacheStore::Read(const std::string& key,
                                               std::vector<PhaseTiming>* timings) const {
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> file =
      env_->NewRandomAccessFile(EntryPath(key));
  if (!file.ok()) {
    // ELOOP: the name is a symlink, which no writer of entries makes.
    if (absl::IsFailedPrecondition(file.status())) {
      return absl::DataLossError("a symlink, not an entry");
    }
    return absl::NotFoundError("no entry");
  }
  return DecodeEntry(**file, key, timings);
}

void CacheStore::Remove(const std::string& key) const { (void)env_->RemoveFile(EntryPath(key)); }

absl::StatusOr<WeightsBlob> CacheStore::Write(const std::string& key,
                                              const CompiledModel& model) const {
  const std::string file = EntryPath(key);
  CUVIL_ASSIGN_OR_RETURN(EncodedEntry entry, EncodeEntry(model, key));
  const std::string_view weights(reinterpret_cast<const char*>(model.weights.data()),
                                 model.weights.size());
  thread_local std::mt19937_64 rng(std::random_device{}());
  AtomicWriteOptions options;
  options.temp_path =
      absl::StrCat(dir_, "/", kTempPrefix, key, "-", getpid(), "-", rng() % 1000000);
  // No fsync: a crash of the machine may leave the new name holding a short or zeroed file, which
  // the reader refuses (its size is in the checksummed header, every section is checksummed) and
  // the next lookup compiles again. Syncing every entry would cost each compile a disk flush.
  options.sync = false;
  options.map = true;  // The inode written: later loads share its page cache.
  // The gaps between sections read back as zeros (the file is extended to its size).
  absl::StatusOr<std::shared_ptr<const MappedFile>> mapping = WriteFileAtomically(
      *env_, file,
      {{0, entry.head}, {entry.object_offset, model.object_code}, {entry.weights_offset, weights}},
      entry.file_size, options);
  if (!mapping.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot write ", file, ": ", mapping.status().message()));
  }
  if (*mapping == nullptr) return WeightsBlob(model.weights);  // Still stored; keep the heap copy.
  const uint8_t* data = (*mapping)->data() + entry.weights_offset;
  return WeightsBlob(*std::move(mapping), data, weights.size(), /*read_only=*/true);
}

void CacheStore::MarkUsed(const std::string& key) const {
  (void)env_->SetModifiedNow(EntryPath(key));
}

// Removes least recently used entries (by mtime, which a hit refreshes) until the folder holds at
// most max_bytes; `keep` (the entry just written) goes last. Digest records and size markers go
// with them: those last used no later than the newest entry evicted (a use refreshes their mtime,
// before the entry's) are removed too, so neither kind outlives the entries it served for ever.
// Also drops stale temporary files of writers that died.
uint64_t CacheStore::Evict(const std::string& keep) const {
  struct File {
    std::string path;
    uint64_t bytes;
    int64_t mtime;
  };
  std::vector<File> files;
  std::vector<File> side_files;  // Digest records and size markers.
  uint64_t total = 0;
  absl::StatusOr<std::vector<DirEntry>> listed = env_->ListDir(dir_);
  if (!listed.ok()) return 0;
  const int64_t now = NowUnixNs();
  constexpr int64_t kStaleTempNs = int64_t{3600} * 1'000'000'000;  // One hour.
  for (const DirEntry& de : *listed) {
    if (!de.regular) continue;
    const std::string path = absl::StrCat(dir_, "/", de.name);
    if (de.name.rfind(kTempPrefix, 0) == 0) {
      if (now - de.mtime_unix_ns > kStaleTempNs) (void)env_->RemoveFile(path);
      continue;
    }
    if ((de.name.rfind("memo-", 0) == 0 && EndsWith(de.name, ".cjm")) ||
        (de.name.rfind("size-", 0) == 0 && EndsWith(de.name, ".cjs"))) {
      side_files.push_back({path, 0, de.mtime_unix_ns});
      continue;
    }
    if (!EndsWith(de.name, kEntrySuffix)) continue;
    files.push_back({path, de.size, de.mtime_unix_ns});
    total += de.size;
  }
  if (max_bytes_ == 0 || total <= max_bytes_) return 0;
  const std::string keep_path = EntryPath(keep);
  std::sort(files.begin(), files.end(), [&](const File& a, const File& b) {
    bool ak = a.path == keep_path, bk = b.path == keep_path;
    if (ak != bk) return bk;  // `keep` sorts last.
    return a.mtime < b.mtime;
  });
  uint64_t removed = 0;
  std::optional<int64_t> newest_evicted;
  for (const File& f : files) {
    if (total <= max_bytes_) break;
    if (env_->RemoveFile(f.path).ok()) ++removed;  // Another process may have removed it already.
    total -= f.bytes;
    if (!newest_evicted.has_value() || f.mtime > *newest_evicted) newest_evicted = f.mtime;
  }
  if (newest_evicted.has_value()) {
    for (const File& f : side_files) {
      if (f.mtime <= *newest_evicted) (void)env_->RemoveFile(f.path);
    }
  }
  return removed;
}

void CacheStore::TouchSizeMarker(uint64_t size) const {
  (void)env_->TouchFile(SizeMarkerPath(size));
}

bool CacheStore::HasSizeMarker(uint64_t size) const {
  return env_->FileExists(SizeMarkerPath(size));
}

}  // namespace cuvil::jitcache_internal
