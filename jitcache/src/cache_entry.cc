#include "cache_entry.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "content_hash.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/runtime/status_macros.h"
#include "jit_cache.pb.h"
#include "laps.h"
#include "model_format.h"

namespace cuvil::jitcache_internal {
namespace pb = ::cuvil::jitcache::v1;

absl::StatusOr<EncodedEntry> EncodeEntry(const CompiledModel& model, const std::string& key) {
  pb::CacheHeader header;
  header.set_key(key);
  *header.mutable_identity() = ThisBuildIdentity();
  header.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count());
  *header.mutable_model() = EncodeModelHeader(model);
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

  EncodedEntry out;
  out.head = std::move(head);
  out.object_offset = obj_off;
  out.weights_offset = wts_off;
  out.file_size = file_size;
  return out;
}

absl::StatusOr<CompiledModel> DecodeEntry(const RandomAccessFile& file, const std::string& key,
                                          std::vector<PhaseTiming>* timings) {
  Laps laps(timings);
  if (!file.is_regular() || file.size() < kPreambleBytes || file.size() > kMaxEntryBytes) {
    return absl::DataLossError("not a regular file of plausible size");
  }
  const uint64_t size = file.size();
  auto read_at = [&](uint64_t offset, uint64_t n, std::string* out) {
    out->resize(n);
    return file.Read(offset, n, out->data()).ok();
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
        absl::StrCat("format version ", format_version, ", expected ", kCacheFormatVersion,
                     ": written by another build of Cuvil (the model is compiled again)"));
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
  if (std::string why = IdentityMismatch(header.identity()); !why.empty()) {
    return absl::DataLossError(absl::StrCat("entry ", why));
  }
  if (header.file_size() != size) {
    return absl::DataLossError(
        absl::StrCat("file is ", size, " bytes, its header says ", header.file_size()));
  }
  std::string object_code;
  const pb::Section* weights = nullptr;
  std::shared_ptr<const MappedFile> mapping;
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
      auto m = file.Map(/*populate=*/false);
      if (!m.ok()) return absl::DataLossError(absl::StrCat("cannot map: ", m.status().message()));
      mapping = *std::move(m);
      laps.Lap("cache_map_weights");
      sum = TreeDigestOf(reinterpret_cast<const char*>(mapping->data()) + sec.offset(), sec.size());
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
  WeightsBlob blob(mapping, mapping->data() + weights->offset(), weights->size(),
                   /*read_only=*/true);
  auto model = DecodeModelHeader(header.model(), object_code, std::move(blob));
  laps.Lap("cache_model");
  return model;
}

}  // namespace cuvil::jitcache_internal
