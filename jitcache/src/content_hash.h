// Private: the content hashes of the JIT cache — XXH3-128 of byte ranges, streamed (Hasher) or
// one-shot (ChecksumOf), and the two-part "tree" digest that two cores compute at once for large
// ranges (model files, weights sections). Used by the cache key and the entry checksums.
#ifndef CUVIL_JITCACHE_SRC_CONTENT_HASH_H_
#define CUVIL_JITCACHE_SRC_CONTENT_HASH_H_

#include <xxhash.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

namespace cuvil::jitcache_internal {

// Incremental XXH3-128 with length-prefixed fields, so ("ab","c") and ("a","bc") differ.
class Hasher {
 public:
  Hasher() : state_(XXH3_createState()) { XXH3_128bits_reset(state_); }
  ~Hasher() { XXH3_freeState(state_); }
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;

  void Raw(const void* data, size_t n) { XXH3_128bits_update(state_, data, n); }
  void Int(int64_t v) { Raw(&v, sizeof v); }
  void Str(std::string_view s) {
    Int(static_cast<int64_t>(s.size()));
    Raw(s.data(), s.size());
  }
  std::string Hex() const { return HexOf(XXH3_128bits_digest(state_)); }
  // The digest as 16 bytes, big-endian (what ChecksumOf returns).
  std::string Canonical() const {
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(state_));
    return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
  }

  static std::string HexOf(XXH128_hash_t h) {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    return buf;
  }

 private:
  XXH3_state_t* state_;
};

// The one-shot XXH3-128 of the widest vector unit the CPU has (libxxhash's runtime dispatch: AVX2
// hashes resident memory about twice as fast as the SSE2 baseline); 16 bytes, big-endian.
std::string ChecksumOf(const void* data, size_t size);

// The digest of a large byte range that two cores can compute at once: XXH3-128 over the
// canonical XXH3-128 digests of its two parts (split at half the size rounded down to 1 MiB).
// Still a content hash of every byte. The second part is hashed on another thread when both
// parts are large.
std::string TreeDigestOf(const char* data, uint64_t size);

// TreeDigestOf the `size` bytes of `fd` at `offset`, the second part read and hashed on another
// thread when both parts are large. Nullopt on a read error.
std::optional<std::string> TreeDigestOfFile(int fd, uint64_t offset, uint64_t size);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_CONTENT_HASH_H_
