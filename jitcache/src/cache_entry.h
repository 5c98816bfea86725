// Private: the JIT cache's entry file format (jitcache/proto/jit_cache.proto). A preamble of
// 40 bytes (magic[16], format version u32, header size u32, header checksum[16]), the protobuf
// CacheHeader (identity, the model's description, the sections' offsets, sizes and checksums),
// then the page-aligned raw sections: object code and weights.
#ifndef CUVIL_JITCACHE_SRC_CACHE_ENTRY_H_
#define CUVIL_JITCACHE_SRC_CACHE_ENTRY_H_

#include <sys/mman.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiled_model.h"
#include "jit_cache.pb.h"

namespace cuvil::jitcache_internal {

// The file layout is described in jit_cache.proto.
inline constexpr char kMagic[16] = {'c', 'u', 'v', 'i', 'l', '.', 'j', 'i',
                                    't', '_', 'c', 'a', 'c', 'h', 'e', '\n'};
inline constexpr size_t kPreambleBytes = 40;
inline constexpr uint64_t kSectionAlign = 4096;
inline constexpr char kObjectSection[] = "object_code";
inline constexpr char kWeightsSection[] = "weights";
inline constexpr char kEntrySuffix[] = ".cjc";
inline constexpr char kTempPrefix[] = ".tmp-";
// A cache file larger than this is not a Cuvil entry.
inline constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 40;
// The header holds names and signatures only; anything larger is not ours.
inline constexpr uint32_t kMaxHeaderBytes = 64u << 20;

inline uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

inline void StoreU32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

// The header of `m`'s entry for `key` (sections are added by the writer).
::cuvil::jitcache::v1::CacheHeader HeaderOf(const CompiledModel& m, const std::string& key);

// Rebuilds a CompiledModel from a checked header and its sections, checking everything a later
// stage would trust (sizes, indices). The weights stay in `weights` (a read-only mapping).
absl::StatusOr<CompiledModel> ModelOf(const ::cuvil::jitcache::v1::CacheHeader& e,
                                      std::string_view object_code, WeightsBlob weights);

// A read-only private mapping of a whole file; unmapped with its last reference.
struct FileMapping {
  FileMapping(void* p, size_t n) : addr(p), size(n) {}
  ~FileMapping() { munmap(addr, size); }
  FileMapping(const FileMapping&) = delete;
  FileMapping& operator=(const FileMapping&) = delete;
  void* addr;
  size_t size;
  const uint8_t* bytes() const { return static_cast<const uint8_t*>(addr); }
};

// Maps `fd` (a regular file of `size` bytes) read-only. MAP_PRIVATE: writers never modify an entry
// in place (they rename a new file over it), so the mapped bytes stay what was verified.
absl::StatusOr<std::shared_ptr<const FileMapping>> MapFile(int fd, size_t size, bool populate);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_CACHE_ENTRY_H_
