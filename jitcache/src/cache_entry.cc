#include "cache_entry.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "content_hash.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/runtime/status_macros.h"
#include "host_identity.h"
#include "laps.h"
#include "model_header.h"
#include "symbolic_fields.h"

namespace cuvil::jitcache_internal {
namespace pb = ::cuvil::jitcache::v1;
namespace {

const HostIdentity& Host() { return HostIdentityOfThisProcess(); }

void ToProto(const TensorSignature& s, pb::TensorSignature* p) {
  p->set_name(s.name);
  p->set_dtype(static_cast<int32_t>(s.dtype));
  for (const SymDim& d : s.shape) SymDimToProto(d, p->add_shape());
}

absl::StatusOr<TensorSignature> FromProto(const pb::TensorSignature& p,
                                          absl::Span<const std::string> symbols) {
  TensorSignature s;
  s.name = p.name();
  s.dtype = static_cast<DType>(p.dtype());
  if (DTypeSize(s.dtype) == 0) return absl::DataLossError(absl::StrCat("bad dtype ", p.dtype()));
  for (const auto& d : p.shape()) {
    CUVIL_ASSIGN_OR_RETURN(SymDim dim, SymDimFromProto(d, symbols));
    s.shape.push_back(std::move(dim));
  }
  return s;
}

}  // namespace

// The header of `m`'s entry for `key` (sections are added by WriteEntry).
pb::CacheHeader HeaderOf(const CompiledModel& m, const std::string& key) {
  pb::CacheHeader e;
  e.set_key(key);
  e.set_compiler_version(CompilerBuildIdentity());
  e.set_target_triple(Host().triple);
  e.set_cpu(Host().cpu);
  e.set_cpu_features(Host().features);
  e.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  e.set_name(m.name);
  e.set_symbol(m.symbol);
  SymbolicFieldsToProto(m, &e);
  for (const auto& s : m.inputs) ToProto(s, e.add_inputs());
  for (const auto& s : m.outputs) ToProto(s, e.add_outputs());
  e.set_arena_per_batch_bytes(m.arena.per_batch_bytes);
  e.set_arena_fixed_bytes(m.arena.fixed_bytes);
  e.set_arena_unplanned_bytes(m.arena.unplanned_bytes);
  e.set_arena_live_per_batch_bytes(m.arena.live_per_batch_bytes);
  e.set_arena_live_fixed_bytes(m.arena.live_fixed_bytes);
  e.set_arena_max_shards(m.arena.max_shards);
  e.set_batch_split_note(m.batch_split_note);
  for (const auto& k : m.kernels) {
    auto* pk = e.add_kernels();
    pk->set_index(k.index);
    pk->set_symbol(k.symbol);
    pk->set_op_type(k.op_type);
    pk->set_node_name(k.node_name);
    pk->set_signature(k.signature);
    if (k.parent >= 0) pk->set_parent(k.parent);
  }
  for (const auto& t : m.timings) {
    auto* pt = e.add_timings();
    pt->set_phase(t.phase);
    pt->set_ms(t.ms);
  }
  e.set_compiled_cpu(m.cpu);
  return e;
}

// Rebuilds a CompiledModel from a checked header and its sections, checking everything a later
// stage would trust (sizes, indices). The weights stay in `weights` (a read-only mapping).
absl::StatusOr<CompiledModel> ModelOf(const pb::CacheHeader& e, std::string_view object_code,
                                      WeightsBlob weights) {
  CompiledModel m;
  m.name = e.name();
  m.symbol = e.symbol();
  CUVIL_RETURN_IF_ERROR(SymbolicFieldsFromProto(e, &m));
  for (const auto& p : e.inputs()) {
    CUVIL_ASSIGN_OR_RETURN(TensorSignature s, FromProto(p, m.symbols));
    m.inputs.push_back(std::move(s));
  }
  for (const auto& p : e.outputs()) {
    CUVIL_ASSIGN_OR_RETURN(TensorSignature s, FromProto(p, m.symbols));
    m.outputs.push_back(std::move(s));
  }
  if (object_code.empty()) return absl::DataLossError("no object code");
  m.object_code.assign(object_code.data(), object_code.size());
  m.weights = std::move(weights);
  m.arena.per_batch_bytes = e.arena_per_batch_bytes();
  m.arena.fixed_bytes = e.arena_fixed_bytes();
  m.arena.unplanned_bytes = e.arena_unplanned_bytes();
  m.arena.live_per_batch_bytes = e.arena_live_per_batch_bytes();
  m.arena.live_fixed_bytes = e.arena_live_fixed_bytes();
  m.arena.max_shards = std::max(1, e.arena_max_shards());
  m.batch_split_note = e.batch_split_note();
  if (m.arena.per_batch_bytes < 0 || m.arena.fixed_bytes < 0 ||
      m.arena.max_shards > kMaxBatchShards) {
    return absl::DataLossError("negative arena size or too many batch parts");
  }
  for (int i = 0; i < e.kernels_size(); ++i) {
    const auto& k = e.kernels(i);
    if (k.index() != i) return absl::DataLossError("kernel table out of order");
    if (k.has_parent() && (k.parent() < 0 || k.parent() >= i)) {
      return absl::DataLossError("kernel parent out of range");
    }
    m.kernels.push_back({k.index(), k.symbol(), k.op_type(), k.node_name(), k.signature(),
                         k.has_parent() ? k.parent() : -1});
  }
  for (const auto& t : e.timings()) m.timings.push_back({t.phase(), t.ms()});
  m.cpu = e.compiled_cpu();
  return m;
}

absl::StatusOr<EncodedEntry> EncodeEntry(const CompiledModel& model, const std::string& key) {
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
  auto model = ModelOf(header, object_code, std::move(blob));
  laps.Lap("cache_model");
  return model;
}

pb::CacheHeader ModelHeader(const CompiledModel& model) { return HeaderOf(model, std::string()); }

absl::StatusOr<CompiledModel> ModelFromHeader(const pb::CacheHeader& header,
                                              std::string_view object_code, WeightsBlob weights) {
  return ModelOf(header, object_code, std::move(weights));
}

}  // namespace cuvil::jitcache_internal
