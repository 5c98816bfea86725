// Private: the JIT cache's folder — one entry file `<dir>/<key>.cjc` per compiled model, written
// to a temporary file and renamed, read and verified before use (weights mapped in place), the
// least recently used entries evicted above a byte budget with the digest records and size
// markers they served, and the size markers MayHold checks.
#ifndef CUVIL_JITCACHE_SRC_CACHE_STORE_H_
#define CUVIL_JITCACHE_SRC_CACHE_STORE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/env.h"

namespace cuvil::jitcache_internal {

// Thread-safe (no mutable state; every call works on the folder through the Env); several
// processes may share one folder. Failures to touch, remove or evict are ignored (best effort).
class CacheStore {
 public:
  // Entries live in `dir` (which must exist); above `max_bytes` (0: unlimited) the least recently
  // used are evicted. Every file is reached through `env` (not owned; Env::Default() when null).
  CacheStore(std::string dir, uint64_t max_bytes, Env* env = nullptr);

  const std::string& dir() const { return dir_; }
  // Path of the entry for `key`.
  std::string EntryPath(const std::string& key) const;
  // Reads and checks the entry for `key`. NotFound when there is none; DataLoss (with the
  // reason) when there is one that must not be loaded. Every byte the result uses is verified
  // against its checksum first; the weights are then used in place from a read-only mapping.
  absl::StatusOr<CompiledModel> Read(const std::string& key,
                                     std::vector<PhaseTiming>* timings) const;
  // Removes the entry for `key` (a refused one).
  void Remove(const std::string& key) const;
  // Writes `model`'s entry for `key` atomically (temporary file in the same folder + rename,
  // without fsync; see the .cc). Internal "cannot write <entry>: <why>" when it cannot.
  // Returns the model's weights as a read-only mapping of the written file (so later loads share
  // the page cache instead of a heap copy).
  absl::StatusOr<WeightsBlob> Write(const std::string& key, const CompiledModel& model) const;
  // Makes the entry for `key` the most recently used (a hit).
  void MarkUsed(const std::string& key) const;
  // Evicts least recently used entries above max_bytes, the entry for `keep` last. Returns the
  // number of entries removed.
  uint64_t Evict(const std::string& keep) const;
  // Creates (or refreshes the mtime of) the size marker for models of `size` bytes: 0600, never
  // through a symlink. Best effort: without it a tiered start of this model only skips its first
  // lookup.
  void TouchSizeMarker(uint64_t size) const;
  // Whether the size marker for `size` exists.
  bool HasSizeMarker(uint64_t size) const;

 private:
  // The marker saying the folder has stored a model of `size` bytes (ObjectCache::MayHold).
  std::string SizeMarkerPath(uint64_t size) const;

  std::string dir_;
  uint64_t max_bytes_;
  Env* env_;
};

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_CACHE_STORE_H_
