// Private: the JIT cache's entry file format (jitcache/proto/jit_cache.proto). A preamble of
// 40 bytes (magic[16], format version u32, header size u32, header checksum[16]), the protobuf
// CacheHeader (key, identity, the model's description in model_format.h's form, the sections'
// offsets, sizes and checksums), then the page-aligned raw sections: object code and weights.
#ifndef CUVIL_JITCACHE_SRC_CACHE_ENTRY_H_
#define CUVIL_JITCACHE_SRC_CACHE_ENTRY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/env.h"

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

// The bytes of an entry but its sections: the preamble and header (at offset 0), and where the
// sections go (the gaps between them read as zeros).
struct EncodedEntry {
  std::string head;
  uint64_t object_offset = 0;
  uint64_t weights_offset = 0;
  uint64_t file_size = 0;
};

// The entry of `model` for `key`: its header holds the model's description and the sections'
// offsets, sizes and checksums. Internal when the header cannot be serialized.
absl::StatusOr<EncodedEntry> EncodeEntry(const CompiledModel& model, const std::string& key);

// Reads and checks the entry in `file` for `key`: DataLoss (with the reason) when it must not be
// loaded. Every byte the result uses is verified against its checksum first; the weights are then
// used in place from a read-only mapping of the same file. Appends its phases to `timings`.
absl::StatusOr<CompiledModel> DecodeEntry(const RandomAccessFile& file, const std::string& key,
                                          std::vector<PhaseTiming>* timings);

}  // namespace cuvil::jitcache_internal

#endif  // CUVIL_JITCACHE_SRC_CACHE_ENTRY_H_
