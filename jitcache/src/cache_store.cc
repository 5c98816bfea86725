#include "cache_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "cache_entry.h"
#include "content_hash.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/jitcache/private_dir.h"
#include "host_identity.h"
#include "laps.h"

namespace cuvil::jitcache_internal {
namespace fs = std::filesystem;
namespace pb = ::cuvil::jitcache::v1;
namespace {

const HostIdentity& Host() { return HostIdentityOfThisProcess(); }

// Reads and checks the entry at `file`. NotFound when there is none; DataLoss (with the reason)
// when there is one that must not be loaded. Every byte the result uses is verified against its
// checksum first; the weights are then used in place from a read-only mapping of the same file.
absl::StatusOr<CompiledModel> ReadEntry(const std::string& file, const std::string& key,
                                        std::vector<PhaseTiming>* timings) {
  Laps laps(timings);
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return absl::DataLossError("a symlink, not an entry");
    return absl::NotFoundError("no entry");
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < kPreambleBytes ||
      static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    return absl::DataLossError("not a regular file of plausible size");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  auto read_at = [&](uint64_t offset, uint64_t n, std::string* out) {
    out->resize(n);
    return ReadChunks(fd, offset, n, [&, at = size_t{0}](const char* p, size_t len) mutable {
      std::memcpy(out->data() + at, p, len);
      at += len;
    });
  };
  std::string preamble;
  if (!read_at(0, kPreambleBytes, &preamble)) return absl::DataLossError("cannot read");
  const auto* pre = reinterpret_cast<const uint8_t*>(preamble.data());
  if (std::memcmp(pre, kMagic, sizeof kMagic) != 0) {
    return absl::DataLossError("foreign file (bad magic)");
  }
  const uint32_t format_version = LoadU32(pre + 16);
  if (format_version != kCacheFormatVersion) {
    return absl::DataLossError(
        absl::StrCat("format version ", format_version, ", expected ", kCacheFormatVersion));
  }
  const uint32_t header_size = LoadU32(pre + 20);
  std::string header_bytes;
  if (header_size > kMaxHeaderBytes || header_size > size - kPreambleBytes ||
      !read_at(kPreambleBytes, header_size, &header_bytes)) {
    return absl::DataLossError("truncated header");
  }
  if (std::memcmp(pre + 24, ChecksumOf(header_bytes.data(), header_size).data(), 16) != 0) {
    return absl::DataLossError("header checksum mismatch");
  }
  pb::CacheHeader header;
  if (!header.ParseFromString(header_bytes)) return absl::DataLossError("bad header");
  laps.Lap("cache_header");
  if (header.key() != key) return absl::DataLossError("entry is for another key");
  if (header.compiler_version() != CompilerBuildIdentity() ||
      header.target_triple() != Host().triple || header.cpu() != Host().cpu ||
      header.cpu_features() != Host().features) {
    return absl::DataLossError("entry is for another compiler or CPU");
  }
  if (header.file_size() != size) {
    return absl::DataLossError(
        absl::StrCat("file is ", size, " bytes, its header says ", header.file_size()));
  }
  std::string object_code;
  const pb::Section* weights = nullptr;
  std::shared_ptr<const FileMapping> mapping;
  bool has_object = false;
  uint64_t end = kPreambleBytes + header_size;  // Sections are in file order, never overlapping.
  for (const pb::Section& sec : header.sections()) {
    if (sec.offset() % kSectionAlign != 0 || sec.offset() < end || sec.offset() > size ||
        sec.size() > size - sec.offset()) {
      return absl::DataLossError(absl::StrCat("section ", sec.name(), " lies outside the file"));
    }
    end = sec.offset() + sec.size();
    std::string sum;
    if (sec.name() == kObjectSection && !has_object) {
      if (!read_at(sec.offset(), sec.size(), &object_code))
        return absl::DataLossError("cannot read");
      sum = ChecksumOf(object_code.data(), object_code.size());
      has_object = true;
      laps.Lap("cache_object_code");
    } else if (sec.name() == kWeightsSection && weights == nullptr) {
      // Verified where they will be used: the read-only mapping of this inode (writers never
      // modify an entry in place: they rename a new file over it), so the bytes that run are the
      // bytes that were hashed. The one pass that hashes also maps the pages (two threads fault
      // their halves in, the kernel mapping runs of page-cache pages per fault), so executions
      // later do not page-fault the weights in; that is cheaper than MAP_POPULATE then a hash.
      auto m = MapFile(fd, size, /*populate=*/false);
      if (!m.ok()) return m.status();
      mapping = *std::move(m);
      laps.Lap("cache_map_weights");
      sum =
          TreeDigestOf(reinterpret_cast<const char*>(mapping->bytes()) + sec.offset(), sec.size());
      weights = &sec;
      laps.Lap("cache_verify_weights");
    } else {
      return absl::DataLossError(absl::StrCat("unexpected section '", sec.name(), "'"));
    }
    if (sec.checksum() != sum) {
      return absl::DataLossError(absl::StrCat("section ", sec.name(), " checksum mismatch"));
    }
  }
  if (!has_object || weights == nullptr) return absl::DataLossError("missing section");
  if (end != size) return absl::DataLossError("trailing bytes after the last section");
  // The blob keeps the mapping alive as long as any model or loaded version uses the weights.
  WeightsBlob blob(mapping, mapping->bytes() + weights->offset(), weights->size(),
                   /*read_only=*/true);
  auto model = ModelOf(header, object_code, std::move(blob));
  laps.Lap("cache_model");
  return model;
}

// Writes `model`'s entry for `key` atomically (temporary file in the same folder + rename).
// Returns the model's weights as a read-only mapping of the written file (so later loads share
// the page cache instead of a heap copy).
absl::StatusOr<WeightsBlob> WriteEntry(const std::string& dir, const std::string& file,
                                       const std::string& key, const CompiledModel& model) {
  pb::CacheHeader header = HeaderOf(model, key);
  // Section offsets depend on the header's size, which depends on the offsets: place the
  // sections after a bound on the header (offsets are fixed-width only once set), then pad.
  const std::string_view object_code = model.object_code;
  const std::string_view weights(reinterpret_cast<const char*>(model.weights.data()),
                                 model.weights.size());
  auto* obj = header.add_sections();
  obj->set_name(kObjectSection);
  obj->set_size(object_code.size());
  obj->set_checksum(ChecksumOf(object_code.data(), object_code.size()));
  auto* wts = header.add_sections();
  wts->set_name(kWeightsSection);
  wts->set_size(weights.size());
  wts->set_checksum(TreeDigestOf(weights.data(), weights.size()));
  auto align = [](uint64_t v) { return (v + kSectionAlign - 1) / kSectionAlign * kSectionAlign; };
  // Varints of offsets and file size take at most 10 bytes each: reserve that much.
  const uint64_t header_bound = header.ByteSizeLong() + 3 * 11;
  const uint64_t obj_off = align(kPreambleBytes + header_bound);
  const uint64_t wts_off = align(obj_off + object_code.size());
  const uint64_t file_size = wts_off + weights.size();
  obj->set_offset(obj_off);
  wts->set_offset(wts_off);
  header.set_file_size(file_size);
  std::string head(kPreambleBytes, '\0');
  if (!header.AppendToString(&head)) return absl::InternalError("cannot serialize the header");
  const size_t header_size = head.size() - kPreambleBytes;
  if (head.size() > obj_off) return absl::InternalError("cache header outgrew its bound");
  std::memcpy(head.data(), kMagic, sizeof kMagic);
  StoreU32(kCacheFormatVersion, head.data() + 16);
  StoreU32(static_cast<uint32_t>(header_size), head.data() + 20);
  std::memcpy(head.data() + 24, ChecksumOf(head.data() + kPreambleBytes, header_size).data(), 16);

  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string tmp = absl::StrCat(dir, "/", kTempPrefix, key, "-", getpid(), "-", rng() % 1000000);
  int fd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, kPrivateFileMode);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  auto put = [&](std::string_view bytes, uint64_t offset) {
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n =
          pwrite(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  };
  // The gaps between sections read back as zeros (the file is extended by the later writes).
  bool ok = put(head, 0) && put(object_code, obj_off) && put(weights, wts_off) &&
            ftruncate(fd, static_cast<off_t>(file_size)) == 0;
  int err = ok ? 0 : errno;
  absl::StatusOr<std::shared_ptr<const FileMapping>> mapping = absl::InternalError("not written");
  if (ok) mapping = MapFile(fd, file_size, /*populate=*/false);  // The inode we wrote.
  if (close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && rename(tmp.c_str(), file.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", file, ": ", strerror(err)));
  }
  if (!mapping.ok()) return WeightsBlob(model.weights);  // Still stored; keep the heap copy.
  return WeightsBlob(*mapping, (*mapping)->bytes() + wts_off, weights.size(), /*read_only=*/true);
}

// The marker saying `dir` has stored a model of `size` bytes (ObjectCache::MayHold).
std::string SizeMarkerPath(const std::string& dir, uint64_t size) {
  return absl::StrCat(dir, "/size-", size, ".cjs");
}

// Whether `name` ends with `suffix`.
bool EndsWith(const std::string& name, std::string_view suffix) {
  return name.size() > suffix.size() &&
         name.compare(name.size() - suffix.size(), std::string::npos, suffix) == 0;
}

// Removes least recently used entries (by mtime, which a hit refreshes) until the folder holds at
// most `max_bytes`; `keep` (the entry just written) goes last. Digest records and size markers go
// with them: those last used no later than the newest entry evicted (a use refreshes their mtime,
// before the entry's) are removed too, so neither kind outlives the entries it served for ever.
// Also drops stale temporary files of writers that died. Returns the number of entries removed.
uint64_t Evict(const std::string& dir, uint64_t max_bytes, const std::string& keep) {
  struct File {
    std::string path;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<File> files;
  std::vector<File> side_files;  // Digest records and size markers.
  uint64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    std::string name = de.path().filename().string();
    std::error_code e2;
    if (!de.is_regular_file(e2) || de.is_symlink(e2)) continue;
    auto mtime = de.last_write_time(e2);
    if (e2) continue;
    if (name.rfind(kTempPrefix, 0) == 0) {
      if (now - mtime > std::chrono::hours(1)) fs::remove(de.path(), e2);
      continue;
    }
    if ((name.rfind("memo-", 0) == 0 && EndsWith(name, ".cjm")) ||
        (name.rfind("size-", 0) == 0 && EndsWith(name, ".cjs"))) {
      side_files.push_back({de.path().string(), 0, mtime});
      continue;
    }
    if (!EndsWith(name, kEntrySuffix)) continue;
    uint64_t bytes = de.file_size(e2);
    if (e2) continue;
    files.push_back({de.path().string(), bytes, mtime});
    total += bytes;
  }
  if (max_bytes == 0 || total <= max_bytes) return 0;
  std::sort(files.begin(), files.end(), [&](const File& a, const File& b) {
    bool ak = a.path == keep, bk = b.path == keep;
    if (ak != bk) return bk;  // `keep` sorts last.
    return a.mtime < b.mtime;
  });
  uint64_t removed = 0;
  std::optional<fs::file_time_type> newest_evicted;
  for (const File& f : files) {
    if (total <= max_bytes) break;
    std::error_code e2;
    if (fs::remove(f.path, e2)) ++removed;  // Another process may have removed it already.
    total -= f.bytes;
    if (!newest_evicted.has_value() || f.mtime > *newest_evicted) newest_evicted = f.mtime;
  }
  if (newest_evicted.has_value()) {
    for (const File& f : side_files) {
      std::error_code e2;
      if (f.mtime <= *newest_evicted) fs::remove(f.path, e2);
    }
  }
  return removed;
}

// Creates (or refreshes the mtime of) the size marker for `size`: 0600, never through a symlink.
// Best effort: without it a tiered start of this model only skips its first lookup.
void TouchSizeMarker(const std::string& dir, uint64_t size) {
  int fd = open(SizeMarkerPath(dir, size).c_str(),
                O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, kPrivateFileMode);
  if (fd < 0) return;
  futimens(fd, nullptr);
  close(fd);
}

}  // namespace

CacheStore::CacheStore(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {}

std::string CacheStore::EntryPath(const std::string& key) const {
  return absl::StrCat(dir_, "/", key, kEntrySuffix);
}

absl::StatusOr<CompiledModel> CacheStore::Read(const std::string& key,
                                               std::vector<PhaseTiming>* timings) const {
  return ReadEntry(EntryPath(key), key, timings);
}

void CacheStore::Remove(const std::string& key) const { unlink(EntryPath(key).c_str()); }

absl::StatusOr<WeightsBlob> CacheStore::Write(const std::string& key,
                                              const CompiledModel& model) const {
  return WriteEntry(dir_, EntryPath(key), key, model);
}

void CacheStore::MarkUsed(const std::string& key) const {
  utimensat(AT_FDCWD, EntryPath(key).c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
}

uint64_t CacheStore::Evict(const std::string& keep) const {
  return ::cuvil::jitcache_internal::Evict(dir_, max_bytes_, EntryPath(keep));
}

void CacheStore::TouchSizeMarker(uint64_t size) const {
  ::cuvil::jitcache_internal::TouchSizeMarker(dir_, size);
}

bool CacheStore::HasSizeMarker(uint64_t size) const {
  struct stat st;
  return stat(SizeMarkerPath(dir_, size).c_str(), &st) == 0;
}

}  // namespace cuvil::jitcache_internal
