#include "cuvil/jitcache/object_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxh_x86dispatch.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "catching.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/external_data.h"
#include "cuvil/jitcache/private_dir.h"
#include "cuvil/runtime/file_window.h"
#include "cuvil/runtime/tensor_size.h"
#include "digest_memo.h"
#include "host_identity.h"
#include "jit_cache.pb.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/TargetParser/Host.h"
#include "model_header.h"
#include "onnx/onnx_pb.h"
#include "spdlog/spdlog.h"
#include "symbolic_fields.h"

namespace cuvil {
namespace fs = std::filesystem;
namespace pb = ::cuvil::jitcache::v1;

namespace {

// The file layout is described in jit_cache.proto.
constexpr char kMagic[16] = {'c', 'u', 'v', 'i', 'l', '.', 'j', 'i',
                             't', '_', 'c', 'a', 'c', 'h', 'e', '\n'};
constexpr size_t kPreambleBytes = 40;
constexpr uint64_t kSectionAlign = 4096;
constexpr char kObjectSection[] = "object_code";
constexpr char kWeightsSection[] = "weights";
constexpr char kEntrySuffix[] = ".cjc";
constexpr char kTempPrefix[] = ".tmp-";
// A cache file larger than this is not a Cuvil entry.
constexpr uint64_t kMaxEntryBytes = uint64_t{1} << 40;
// The header holds names and signatures only; anything larger is not ours.
constexpr uint32_t kMaxHeaderBytes = 64u << 20;

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
// hashes resident memory about twice as fast as the SSE2 baseline).
std::string ChecksumOf(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits_dispatch(data, size);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

const jitcache_internal::HostIdentity& Host() {
  return jitcache_internal::HostIdentityOfThisProcess();
}

// The compiler's build identity (host_identity.h): part of every key and entry header.
const std::string& CompilerIdentity() { return jitcache_internal::CompilerBuildIdentity(); }

void CollectLocations(const onnx::TensorProto& t, std::set<std::string>* out) {
  if (t.data_location() != onnx::TensorProto::EXTERNAL) return;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") out->insert(kv.value());
  }
}

void CollectLocations(const onnx::GraphProto& g, std::set<std::string>* out);

void CollectLocations(const onnx::AttributeProto& a, std::set<std::string>* out) {
  if (a.has_t()) CollectLocations(a.t(), out);
  for (const auto& t : a.tensors()) CollectLocations(t, out);
  if (a.has_g()) CollectLocations(a.g(), out);
  for (const auto& g : a.graphs()) CollectLocations(g, out);
  if (a.has_sparse_tensor()) {
    CollectLocations(a.sparse_tensor().values(), out);
    CollectLocations(a.sparse_tensor().indices(), out);
  }
}

void CollectLocations(const onnx::GraphProto& g, std::set<std::string>* out) {
  for (const auto& t : g.initializer()) CollectLocations(t, out);
  for (const auto& s : g.sparse_initializer()) {
    CollectLocations(s.values(), out);
    CollectLocations(s.indices(), out);
  }
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) CollectLocations(a, out);
  }
}

// The ONNX messages (onnx.proto field numbers) on the way from a ModelProto to its TensorProtos.
enum class OnnxMsg { kNone, kModel, kGraph, kNode, kAttribute, kFunction, kSparse, kTensor };

OnnxMsg ChildOf(OnnxMsg msg, uint64_t field) {
  switch (msg) {
    case OnnxMsg::kModel:
      return field == 7 ? OnnxMsg::kGraph : field == 25 ? OnnxMsg::kFunction : OnnxMsg::kNone;
    case OnnxMsg::kGraph:
      return field == 1    ? OnnxMsg::kNode
             : field == 5  ? OnnxMsg::kTensor
             : field == 15 ? OnnxMsg::kSparse
                           : OnnxMsg::kNone;
    case OnnxMsg::kNode:
      return field == 5 ? OnnxMsg::kAttribute : OnnxMsg::kNone;
    case OnnxMsg::kAttribute:
      return field == 5 || field == 10    ? OnnxMsg::kTensor
             : field == 6 || field == 11  ? OnnxMsg::kGraph
             : field == 22 || field == 23 ? OnnxMsg::kSparse
                                          : OnnxMsg::kNone;
    case OnnxMsg::kFunction:
      return field == 7 ? OnnxMsg::kNode : OnnxMsg::kNone;
    case OnnxMsg::kSparse:
      return field == 1 || field == 2 ? OnnxMsg::kTensor : OnnxMsg::kNone;
    case OnnxMsg::kTensor:
    case OnnxMsg::kNone:
      break;
  }
  return OnnxMsg::kNone;
}

// The bytes of a serialized model held in memory, read like a FileWindow.
struct MemoryBytes {
  const uint8_t* data;
  bool Byte(uint64_t offset, uint8_t* out) const {
    *out = data[offset];
    return true;
  }
};

// Whether a TensorProto inside the serialized `msg` at [p, end) of `bytes` (MemoryBytes, or a
// FileWindow: no mapping, so a file truncated meanwhile is a read error, nullopt, not SIGBUS)
// refers to external data (has external_data entries or data_location EXTERNAL); nullopt when
// the bytes are not well formed. Walks the wire format and skips every payload (raw_data
// included) without reading it, so a large model costs a few reads, not a scan of its weights.
template <typename Bytes>
std::optional<bool> RefersToExternalData(Bytes& bytes, uint64_t p, uint64_t end, OnnxMsg msg,
                                         int depth) {
  auto varint = [&](uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      uint8_t b;
      if (!bytes.Byte(p++, &b)) return false;
      *v |= uint64_t{b & 0x7fu} << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;
  };
  if (depth > 64) return std::nullopt;
  while (p < end) {
    uint64_t tag, v;
    if (!varint(&tag)) return std::nullopt;
    const uint64_t field = tag >> 3;
    switch (tag & 7) {
      case 0:
        if (!varint(&v)) return std::nullopt;
        if (msg == OnnxMsg::kTensor && field == 14 && v == 1) return true;
        break;
      case 1:
        if (end - p < 8) return std::nullopt;
        p += 8;
        break;
      case 5:
        if (end - p < 4) return std::nullopt;
        p += 4;
        break;
      case 2: {
        if (!varint(&v) || v > end - p) return std::nullopt;
        if (msg == OnnxMsg::kTensor && field == 13) return true;
        if (OnnxMsg child = ChildOf(msg, field); child != OnnxMsg::kNone) {
          auto found = RefersToExternalData(bytes, p, p + v, child, depth + 1);
          if (!found.has_value() || *found) return found;
        }
        p += v;
        break;
      }
      default:  // Groups: not in onnx.proto.
        return std::nullopt;
    }
  }
  return false;
}

// Hashes every external data file the model refers to (by its location and contents), opened
// by the importer's own rules (OpenExternalDataFile): a location the importer refuses is an error
// here too, before a byte of it is read. A missing file is hashed as missing (the compile reports
// it).
absl::Status HashExternalData(const char* bytes, size_t size, const std::string& model_dir,
                              Hasher* h) {
  MemoryBytes data{reinterpret_cast<const uint8_t*>(bytes)};
  // Parsing a large model costs more than the rest of a cache hit: only parse one that refers
  // to external data (or that the walk cannot read; the compile then reports the error).
  if (RefersToExternalData(data, 0, size, OnnxMsg::kModel, 0) == false) return absl::OkStatus();
  // Not a ModelProto; the compile says so.
  if (size > static_cast<size_t>(INT_MAX)) return absl::OkStatus();
  onnx::ModelProto model;
  // The compile reports a model that does not parse.
  if (!model.ParseFromArray(bytes, static_cast<int>(size))) return absl::OkStatus();
  std::set<std::string> locations;
  CollectLocations(model.graph(), &locations);
  for (const auto& f : model.functions()) {
    for (const auto& n : f.node()) {
      for (const auto& a : n.attribute()) CollectLocations(a, &locations);
    }
  }
  std::vector<char> buf;
  for (const std::string& loc : locations) {
    h->Str(loc);
    absl::StatusOr<ExternalDataFile> f = OpenExternalDataFile(model_dir, loc);
    if (absl::IsNotFound(f.status())) {
      h->Str("<missing>");
      continue;
    }
    if (!f.ok()) return f.status();
    buf.resize(1 << 18);
    for (uint64_t at = 0; at < f->size();) {
      const uint64_t n = std::min<uint64_t>(buf.size(), f->size() - at);
      if (!f->ReadAt(at, n, buf.data())) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot read external data file ", f->path(), " (it changed?)"));
      }
      h->Raw(buf.data(), static_cast<size_t>(n));
      at += n;
    }
    h->Int(static_cast<int64_t>(f->size()));
  }
  return absl::OkStatus();
}

void HashOptions(const CompileOptions& o, Hasher* h) {
  h->Int(o.opt_level);
  if (!o.target_triple.empty()) {  // Host-target keys stay as they were.
    h->Str(o.target_triple);
    h->Str(o.target_cpu);
    h->Str(o.target_features);
  }
  if (!o.integer_qdq) h->Str("float_qdq");           // Default keys stay as they were.
  if (o.batch_invariant) h->Str("batch_invariant");  // Likewise.
  if (o.vector_bits != 0) {  // Likewise: the host's width is CodegenTargetKey's.
    h->Str("vector_bits");
    h->Int(o.vector_bits);
  }
  h->Int(o.import.run_checker ? 1 : 0);
  h->Int(static_cast<int64_t>(o.import.dim_overrides.size()));
  for (const auto& [name, v] : o.import.dim_overrides) {
    h->Str(name);
    h->Int(v);
  }
  if (!o.import.dim_multiples.empty()) {  // Keys without multiples stay as they were.
    h->Str("dim_multiples");
    h->Int(static_cast<int64_t>(o.import.dim_multiples.size()));
    for (const auto& [name, k] : o.import.dim_multiples) {
      h->Str(name);
      h->Int(k);
    }
  }
  h->Int(static_cast<int64_t>(o.import.input_shapes.size()));
  for (const auto& [name, shape] : o.import.input_shapes) {
    h->Str(name);
    h->Int(static_cast<int64_t>(shape.size()));
    for (int64_t d : shape) h->Int(d);
  }
  h->Int(static_cast<int64_t>(o.import.bound_inputs.size()));
  for (const auto& [name, t] : o.import.bound_inputs) {
    h->Str(name);
    h->Int(static_cast<int64_t>(t.dtype()));
    h->Int(static_cast<int64_t>(t.shape().size()));
    for (int64_t d : t.shape()) h->Int(d);
    h->Str(std::string_view(reinterpret_cast<const char*>(t.data()), t.byte_size()));
  }
  // Only when set, so the keys of models without sequence or optional I/O stay as they were.
  if (o.import.allow_structured_io || !o.import.structured_inputs.empty()) {
    h->Str("structured_io");
    h->Int(o.import.allow_structured_io ? 1 : 0);
    h->Int(static_cast<int64_t>(o.import.structured_inputs.size()));
    for (const auto& [name, s] : o.import.structured_inputs) {
      h->Str(name);
      h->Int(s.present ? 1 : 0);
      h->Int(static_cast<int64_t>(s.element_shapes.size()));
      for (const auto& shape : s.element_shapes) {
        h->Int(static_cast<int64_t>(shape.size()));
        for (int64_t d : shape) h->Int(d);
      }
    }
  }
}

void ToProto(const TensorSignature& s, pb::TensorSignature* p) {
  p->set_name(s.name);
  p->set_dtype(static_cast<int32_t>(s.dtype));
  for (const SymDim& d : s.shape) jitcache_internal::SymDimToProto(d, p->add_shape());
}

absl::StatusOr<TensorSignature> FromProto(const pb::TensorSignature& p,
                                          absl::Span<const std::string> symbols) {
  TensorSignature s;
  s.name = p.name();
  s.dtype = static_cast<DType>(p.dtype());
  if (DTypeSize(s.dtype) == 0) return absl::DataLossError(absl::StrCat("bad dtype ", p.dtype()));
  for (const auto& d : p.shape()) {
    auto dim = jitcache_internal::SymDimFromProto(d, symbols);
    if (!dim.ok()) return dim.status();
    s.shape.push_back(*std::move(dim));
  }
  return s;
}

// The header of `m`'s entry for `key` (sections are added by WriteEntry).
pb::CacheHeader HeaderOf(const CompiledModel& m, const std::string& key) {
  pb::CacheHeader e;
  e.set_key(key);
  e.set_compiler_version(CompilerIdentity());
  e.set_target_triple(Host().triple);
  e.set_cpu(Host().cpu);
  e.set_cpu_features(Host().features);
  e.set_created_unix_ms(std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count());
  e.set_name(m.name);
  e.set_symbol(m.symbol);
  jitcache_internal::SymbolicFieldsToProto(m, &e);
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
  if (auto s = jitcache_internal::SymbolicFieldsFromProto(e, &m); !s.ok()) return s;
  for (const auto& p : e.inputs()) {
    auto s = FromProto(p, m.symbols);
    if (!s.ok()) return s.status();
    m.inputs.push_back(std::move(*s));
  }
  for (const auto& p : e.outputs()) {
    auto s = FromProto(p, m.symbols);
    if (!s.ok()) return s.status();
    m.outputs.push_back(std::move(*s));
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
absl::StatusOr<std::shared_ptr<const FileMapping>> MapFile(int fd, size_t size, bool populate) {
  void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
  if (p == MAP_FAILED) return absl::DataLossError(absl::StrCat("cannot map: ", strerror(errno)));
  return std::make_shared<const FileMapping>(p, size);
}

// Passes `size` bytes of `fd` from `offset` to `sink(const char*, size_t)` in chunks through a
// small reused buffer. pread copies through the kernel's direct map: on this kind of host that is
// far cheaper than touching a fresh mapping's 4 KiB pages one TLB miss at a time. False on a short
// read or an error.
template <typename Sink>
bool ReadChunks(int fd, uint64_t offset, uint64_t size, Sink&& sink) {
  constexpr size_t kChunk = 256 << 10;  // Stays in L2 while it is hashed and scanned.
  thread_local std::unique_ptr<char[]> buf(new char[kChunk]);
  while (size > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size, kChunk));
    ssize_t n = pread(fd, buf.get(), want, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sink(buf.get(), static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
    size -= static_cast<uint64_t>(n);
  }
  return true;
}

// A thread running `fn`, or an unjoinable one when no thread can be created (the caller then
// runs `fn` itself): a failed std::thread must not escape as an exception.
template <typename Fn>
std::thread TryThread(Fn&& fn) {
  try {
    return std::thread(std::forward<Fn>(fn));
  } catch (const std::system_error& e) {
    spdlog::debug("JIT cache: no helper thread ({}); hashing on one", e.what());
    return std::thread();
  }
}

// Split point of TreeDigest: half the size rounded down to 1 MiB (0 below 2 MiB: one part).
uint64_t TreeSplit(uint64_t size) { return size / 2 / (1 << 20) * (1 << 20); }

// The digest of a large byte range that two cores can compute at once: XXH3-128 over the
// canonical XXH3-128 digests of its two parts (TreeSplit). Still a content hash of every byte.
// The second part is hashed on another thread when both parts are large.
std::string TreeDigestOf(const char* data, uint64_t size) {
  const uint64_t mid = TreeSplit(size);
  std::string second;
  std::thread helper;
  if (mid >= (4u << 20)) helper = TryThread([&] { second = ChecksumOf(data + mid, size - mid); });
  if (!helper.joinable()) second = ChecksumOf(data + mid, size - mid);
  std::string both = ChecksumOf(data, mid);
  if (helper.joinable()) helper.join();
  both += second;
  return ChecksumOf(both.data(), both.size());
}

// TreeDigestOf the `size` bytes of `fd` at `offset`, the second part read and hashed on another
// thread when both parts are large. Nullopt on a read error.
std::optional<std::string> TreeDigestOfFile(int fd, uint64_t offset, uint64_t size) {
  const uint64_t mid = TreeSplit(size);
  auto digest = [fd](uint64_t at, uint64_t n, std::string* out) {
    Hasher h;
    if (!ReadChunks(fd, at, n, [&](const char* p, size_t len) { h.Raw(p, len); })) return false;
    *out = h.Canonical();
    return true;
  };
  std::string first, second;
  bool second_ok = false;
  std::thread helper;
  if (mid >= (4u << 20)) {
    helper = TryThread([&] { second_ok = digest(offset + mid, size - mid, &second); });
  }
  if (!helper.joinable()) second_ok = digest(offset + mid, size - mid, &second);
  const bool first_ok = digest(offset, mid, &first);
  if (helper.joinable()) helper.join();
  if (!first_ok || !second_ok) return std::nullopt;
  std::string both = first + second;
  return ChecksumOf(both.data(), both.size());
}

uint32_t LoadU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

void StoreU32(uint32_t v, char* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint64_t SizeOf(const CompiledModel& m) { return m.object_code.size() + m.weights.size(); }

// Appends the time since the last Lap (or construction) as `phase` to `out` (when not null).
class Laps {
 public:
  explicit Laps(std::vector<PhaseTiming>* out) : out_(out) {}
  void Lap(const char* phase) {
    const auto now = std::chrono::steady_clock::now();
    if (out_ != nullptr) {
      out_->push_back({phase, std::chrono::duration<double, std::milli>(now - last_).count()});
    }
    last_ = now;
  }

 private:
  std::vector<PhaseTiming>* out_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace

const char* CacheOutcomeName(CacheOutcome outcome) {
  switch (outcome) {
    case CacheOutcome::kMiss:
      return "miss";
    case CacheOutcome::kDiskHit:
      return "hit";
    case CacheOutcome::kMemoryHit:
      return "memory";
  }
  return "?";
}

const char* CompileTierName(CompileTier tier) {
  switch (tier) {
    case CompileTier::kFull:
      return "full";
    case CompileTier::kFast:
      return "fast";
    case CompileTier::kTiered:
      return "tiered";
  }
  return "?";
}

absl::StatusOr<CompileTier> ParseCompileTier(const std::string& text) {
  for (CompileTier t : {CompileTier::kFull, CompileTier::kFast, CompileTier::kTiered}) {
    if (text == CompileTierName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("compile tier '", text, "' is not one of tiered, fast, full"));
}

absl::StatusOr<std::string> DefaultJitCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/cuvil");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/cuvil");
  return absl::FailedPreconditionError("neither XDG_CACHE_HOME nor HOME is set");
}

struct ObjectCache::Impl {
  mutable absl::Mutex mu;
  // In-memory LRU: most recently used at the front.
  std::list<std::string> order ABSL_GUARDED_BY(mu);
  struct MemEntry {
    std::shared_ptr<const CompiledModel> model;
    std::list<std::string>::iterator pos;
  };
  std::map<std::string, MemEntry> memory ABSL_GUARDED_BY(mu);
  uint64_t memory_bytes ABSL_GUARDED_BY(mu) = 0;
  // Sizes of the models ever kept in memory (MayHold; not pruned with the entries).
  std::set<uint64_t> memory_model_sizes ABSL_GUARDED_BY(mu);
  // Keys being compiled by some thread; others with the same key wait instead of compiling.
  std::set<std::string> inflight ABSL_GUARDED_BY(mu);
  // Owns one key of `inflight`: removes it (which wakes its waiters: they Await on mu) on every
  // way out of the owning call, an early return or an exception included.
  class InflightGuard {
   public:
    // Under impl->mu: adds `key`.
    InflightGuard(Impl* impl, std::string key) ABSL_NO_THREAD_SAFETY_ANALYSIS
        : impl_(impl),
          key_(std::move(key)) {
      impl_->inflight.insert(key_);
    }
    ~InflightGuard() {
      if (impl_ == nullptr) return;
      absl::MutexLock lock(&impl_->mu);
      impl_->inflight.erase(key_);
    }
    InflightGuard(const InflightGuard&) = delete;
    InflightGuard& operator=(const InflightGuard&) = delete;
    // Under mu: removes the key now (the destructor then does nothing).
    void EraseLocked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      impl_->inflight.erase(key_);
      impl_ = nullptr;
    }

   private:
    Impl* impl_;
    std::string key_;
  };
  ObjectCacheStats stats ABSL_GUARDED_BY(mu);
  // Model digests by file identity; null without a directory or with the memo off.
  std::unique_ptr<const jitcache_internal::DigestMemo> memo;
};

ObjectCache::ObjectCache(ObjectCacheOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  if (!options_.dir.empty() && options_.digest_memo) {
    impl_->memo = std::make_unique<const jitcache_internal::DigestMemo>(
        options_.dir, std::chrono::milliseconds(options_.digest_memo_settle_ms));
  }
}

ObjectCache::~ObjectCache() = default;

absl::StatusOr<std::unique_ptr<ObjectCache>> ObjectCache::Create(ObjectCacheOptions options) {
  if (!options.dir.empty()) {
    if (absl::Status s = EnsurePrivateDir(options.dir, options.insecure_dir, "JIT cache directory",
                                          "--insecure-cache-dir");
        !s.ok()) {
      return s;
    }
    if (access(options.dir.c_str(), W_OK | R_OK | X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("JIT cache directory ", options.dir, " is not writable"));
    }
  }
  return std::unique_ptr<ObjectCache>(new ObjectCache(std::move(options)));
}

absl::StatusOr<std::string> ObjectCache::Key(const std::string& path, const std::string& bytes,
                                             const CompileOptions& options) const {
  Hasher h;
  h.Str(CompilerIdentity());
  h.Int(kCacheFormatVersion);
  h.Str(Host().triple);
  h.Str(Host().cpu);
  h.Str(Host().features);
  h.Str(CodegenTargetKey());
  HashOptions(options, &h);
  if (!bytes.empty()) {
    h.Str("bytes");
    h.Str(bytes);
  } else {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open model ", path));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      close(fd);
      return absl::NotFoundError(absl::StrCat("cannot read model ", path));
    }
    const size_t size = static_cast<size_t>(st.st_size);
    const jitcache_internal::FileStamp stamp = jitcache_internal::StampOf(st);
    h.Str("file");
    std::optional<jitcache_internal::MemoRecord> memo;
    if (impl_->memo != nullptr) memo = impl_->memo->Find(stamp);
    if (!memo.has_value()) {
      std::optional<std::string> digest = TreeDigestOfFile(fd, 0, size);
      if (!digest.has_value()) {
        close(fd);
        return absl::NotFoundError(absl::StrCat("cannot read model ", path));
      }
      memo.emplace();
      memo->digest = *std::move(digest);
      // Touches only the message headers, read through a small window (never a mapping of the
      // model: one truncated meanwhile must be a read error, not SIGBUS).
      FileWindow window(fd, size);
      memo->no_external_data = RefersToExternalData(window, 0, size, OnnxMsg::kModel, 0) == false;
      // Remembered only if the file did not change while it was read.
      struct stat after;
      if (impl_->memo != nullptr && fstat(fd, &after) == 0 &&
          jitcache_internal::StampOf(after) == stamp) {
        impl_->memo->Store(stamp, *memo);
      }
    }
    h.Str(memo->digest);
    h.Int(static_cast<int64_t>(size));
    if (!memo->no_external_data) {  // Rare: the whole model is parsed to find its files.
      std::string contents(size, '\0');
      FileWindow window(fd, size);
      std::string dir = fs::path(path).parent_path().string();
      absl::Status hashed = absl::OkStatus();
      if (window.Read(0, size, contents.data())) {
        hashed = HashExternalData(contents.data(), size, dir.empty() ? "." : dir, &h);
      }
      if (!hashed.ok()) {
        close(fd);
        return absl::Status(hashed.code(), absl::StrCat("model ", path, ": ", hashed.message()));
      }
    }
    close(fd);
  }
  return h.Hex();
}

bool ObjectCache::DigestIsRemembered(const std::string& path, const std::string& bytes) const {
  if (!bytes.empty() || impl_->memo == nullptr) return false;
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::optional<jitcache_internal::MemoRecord> memo =
      impl_->memo->Find(jitcache_internal::StampOf(st));
  return memo.has_value() && memo->no_external_data;
}

std::string ObjectCache::EntryPath(const std::string& key) const {
  if (options_.dir.empty()) return "";
  return absl::StrCat(options_.dir, "/", key, kEntrySuffix);
}

void ObjectCache::ClearMemory() {
  absl::MutexLock lock(&impl_->mu);
  impl_->memory.clear();
  impl_->order.clear();
  impl_->memory_bytes = 0;
}

ObjectCacheStats ObjectCache::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

namespace {

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
  if (header.compiler_version() != CompilerIdentity() || header.target_triple() != Host().triple ||
      header.cpu() != Host().cpu || header.cpu_features() != Host().features) {
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

// The size of the model Key hashes: `bytes`, else the file at `path` (nullopt when unreadable).
std::optional<uint64_t> ModelSizeOf(const std::string& path, const std::string& bytes) {
  if (!bytes.empty()) return bytes.size();
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
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

using jitcache_internal::Catching;  // No exception may leave a jitcache thread.

}  // namespace

bool ObjectCache::MayHold(const std::string& path, const std::string& bytes) const {
  std::optional<uint64_t> size = ModelSizeOf(path, bytes);
  if (!size.has_value()) return true;  // Let the lookup report the unreadable model.
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->memory_model_sizes.count(*size) != 0) return true;
  }
  if (options_.dir.empty()) return false;
  struct stat st;
  return stat(SizeMarkerPath(options_.dir, *size).c_str(), &st) == 0;
}

absl::StatusOr<CompiledModel> ObjectCache::Compile(const std::string& path,
                                                   const std::string& bytes,
                                                   const CompileOptions& options,
                                                   CacheLookup* lookup) {
  return Catching("JIT cache compile",
                  [&] { return Get(path, bytes, options, lookup, /*compile_on_miss=*/true); });
}

absl::StatusOr<CompiledModel> ObjectCache::CompileWith(
    const std::string& path, const std::string& bytes, const CompileOptions& options,
    const std::function<absl::StatusOr<CompiledModel>()>& compile, CacheLookup* lookup,
    bool write_disk) {
  return Catching("JIT cache compile", [&] {
    return Get(path, bytes, options, lookup, /*compile_on_miss=*/true, &compile, write_disk);
  });
}

absl::StatusOr<CompiledModel> ObjectCache::Lookup(const std::string& path, const std::string& bytes,
                                                  const CompileOptions& options,
                                                  CacheLookup* lookup) {
  return Catching("JIT cache lookup",
                  [&] { return Get(path, bytes, options, lookup, /*compile_on_miss=*/false); });
}

absl::StatusOr<CompiledModel> ObjectCache::Get(
    const std::string& path, const std::string& bytes, const CompileOptions& options,
    CacheLookup* lookup, bool compile_on_miss,
    const std::function<absl::StatusOr<CompiledModel>()>* compile_fn, bool write_disk) {
  CacheLookup local;
  if (lookup == nullptr) lookup = &local;
  *lookup = CacheLookup();
  auto compile = [&]() -> absl::StatusOr<CompiledModel> {
    return Catching("compile", [&]() -> absl::StatusOr<CompiledModel> {
      if (compile_fn != nullptr) return (*compile_fn)();
      return bytes.empty() ? CompileOnnxFile(path, options) : CompileOnnxBytes(bytes, options);
    });
  };
  Laps laps(&lookup->timings);
  auto key = Key(path, bytes, options);
  laps.Lap("cache_key");
  if (!key.ok()) {
    // A refused external-data file: the importer refuses it too, so say why without compiling.
    if (absl::IsInvalidArgument(key.status())) return key.status();
    // Let the compiler report the unreadable model.
    return compile_on_miss ? compile() : key.status();
  }
  lookup->key = *key;
  const bool emit = !options.emit_llvm_path.empty() && compile_on_miss;

  // Memory first; wait while another thread compiles the same key.
  std::shared_ptr<const CompiledModel> in_memory;
  std::optional<Impl::InflightGuard> inflight;  // Set once this call owns the key.
  {
    absl::MutexLock lock(&impl_->mu);
    auto not_inflight = [&]() ABSL_SHARED_LOCKS_REQUIRED(impl_->mu) {
      return impl_->inflight.count(*key) == 0;
    };
    impl_->mu.Await(absl::Condition(&not_inflight));
    auto it = impl_->memory.find(*key);
    if (it != impl_->memory.end() && !emit) {
      impl_->order.splice(impl_->order.begin(), impl_->order, it->second.pos);
      ++impl_->stats.memory_hits;
      lookup->outcome = CacheOutcome::kMemoryHit;
      in_memory = it->second.model;
    } else {
      inflight.emplace(impl_.get(), *key);
    }
  }
  if (in_memory != nullptr) return CompiledModel(*in_memory);  // Copied outside the lock.
  const std::string file = EntryPath(*key);
  // For MayHold: the marker of a stored entry, the size set of a model kept in memory.
  const std::optional<uint64_t> model_size = ModelSizeOf(path, bytes);
  absl::StatusOr<CompiledModel> result = absl::UnknownError("unset");
  bool from_disk = false;
  if (!file.empty() && !emit) {
    result = Catching("reading a JIT cache entry",
                      [&] { return ReadEntry(file, *key, &lookup->timings); });
    if (result.ok()) {
      from_disk = true;
      // A hit makes the entry and its size marker recently used; the marker first, so it is
      // never newer than its entry (Evict removes side files no newer than an evicted entry).
      if (model_size.has_value()) TouchSizeMarker(options_.dir, *model_size);
      utimensat(AT_FDCWD, file.c_str(), nullptr, AT_SYMLINK_NOFOLLOW);
    } else if (absl::IsDataLoss(result.status())) {
      lookup->refused_entry = true;
      spdlog::warn("JIT cache: refusing entry {} ({}); recompiling", file,
                   std::string(result.status().message()));
      unlink(file.c_str());
    }
  }
  uint64_t evicted = 0;
  bool stored = false;
  if (!from_disk && !compile_on_miss) {
    result = absl::NotFoundError(absl::StrCat("JIT cache has no entry ", *key));
  } else if (!from_disk) {
    result = compile();
    if (result.ok() && !file.empty() && write_disk) {
      // Before the entry, so it is not newer than the entry (see above); a marker of a store that
      // then fails only costs a tiered start of a model this size one lookup.
      if (model_size.has_value()) TouchSizeMarker(options_.dir, *model_size);
      if (auto mapped = WriteEntry(options_.dir, file, *key, *result); mapped.ok()) {
        result->weights = std::move(*mapped);  // Frees the compiler's heap copy.
        stored = true;
        evicted = Evict(options_.dir, options_.max_bytes, file);
      } else {
        lookup->store_failed = true;
        spdlog::warn("JIT cache: {}", std::string(mapped.status().message()));
      }
    }
  }
  absl::MutexLock lock(&impl_->mu);
  inflight->EraseLocked();
  if (lookup->refused_entry) ++impl_->stats.corrupt;
  if (stored) ++impl_->stats.stores;
  if (lookup->store_failed) ++impl_->stats.store_failures;
  impl_->stats.evictions += evicted;
  if (!result.ok()) return result;
  if (from_disk) {
    ++impl_->stats.disk_hits;
    lookup->outcome = CacheOutcome::kDiskHit;
  } else {
    ++impl_->stats.misses;
    lookup->outcome = CacheOutcome::kMiss;
  }
  const uint64_t size = SizeOf(*result);
  if (size <= options_.memory_max_bytes && impl_->memory.count(*key) == 0) {
    if (model_size.has_value()) impl_->memory_model_sizes.insert(*model_size);
    impl_->order.push_front(*key);
    impl_->memory[*key] = {std::make_shared<const CompiledModel>(*result), impl_->order.begin()};
    impl_->memory_bytes += size;
    while (impl_->memory_bytes > options_.memory_max_bytes && !impl_->order.empty()) {
      auto victim = impl_->memory.find(impl_->order.back());
      impl_->memory_bytes -= SizeOf(*victim->second.model);
      impl_->memory.erase(victim);
      impl_->order.pop_back();
    }
  }
  return result;
}

namespace jitcache_internal {

pb::CacheHeader ModelHeader(const CompiledModel& model) { return HeaderOf(model, std::string()); }

absl::StatusOr<CompiledModel> ModelFromHeader(const pb::CacheHeader& header,
                                              std::string_view object_code, WeightsBlob weights) {
  return ModelOf(header, object_code, std::move(weights));
}

}  // namespace jitcache_internal

}  // namespace cuvil
