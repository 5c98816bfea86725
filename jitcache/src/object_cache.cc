#include "cuvil/jitcache/object_cache.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <map>
#include <random>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "cuvil/runtime/tensor_size.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"
#include "jit_cache.pb.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/TargetParser/Host.h"
#include "onnx/onnx_pb.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace fs = std::filesystem;
namespace pb = ::cuvil::jitcache::v1;

namespace {

constexpr char kMagic[] = "cuvil.jit_cache";
constexpr char kEntrySuffix[] = ".cjc";
constexpr char kTempPrefix[] = ".tmp-";
// A cache file larger than this is not a Cuvil entry (protobuf's own limit is 2 GB).
constexpr uint64_t kMaxEntryBytes = (uint64_t{1} << 31) - 1;

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

  static std::string HexOf(XXH128_hash_t h) {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                  static_cast<unsigned long long>(h.low64));
    return buf;
  }

 private:
  XXH3_state_t* state_;
};

std::string ChecksumOf(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, h);
  return std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest);
}

struct HostIdentity {
  std::string triple;
  std::string cpu;
  std::string features;  // Sorted "+avx2,-avx512f,...".
};

const HostIdentity& Host() {
  static const HostIdentity* host = [] {
    auto* h = new HostIdentity;
    h->triple = llvm::sys::getProcessTriple();
    h->cpu = llvm::sys::getHostCPUName().str();
    std::vector<std::string> feats;
    for (const auto& f : llvm::sys::getHostCPUFeatures()) {
      feats.push_back(absl::StrCat(f.second ? "+" : "-", f.first().str()));
    }
    std::sort(feats.begin(), feats.end());
    h->features = absl::StrJoin(feats, ",");
    return h;
  }();
  return *host;
}

// The compiler's version plus the hash of the binary that holds the compiler code (kernels change
// daily; a rebuilt compiler must not serve code an older one generated) and the LLVM version.
const std::string& CompilerIdentity() {
  static const std::string* id = [] {
    std::string build = "unknown";
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&CompileGraph), &info) != 0 && info.dli_fname != nullptr) {
      std::string path = info.dli_fname;
      if (path.empty() || path.find('/') == std::string::npos) path = "/proc/self/exe";
      std::ifstream f(path, std::ios::binary);
      if (f) {
        std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
        build = Hasher::HexOf(XXH3_128bits(bytes.data(), bytes.size()));
      }
    }
    return new std::string(
        absl::StrCat(kCompilerVersion, "+llvm", LLVM_VERSION_STRING, "+", build));
  }();
  return *id;
}

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

// Hashes every external data file the model refers to (by its location and contents).
void HashExternalData(const std::string& bytes, const std::string& model_dir, Hasher* h) {
  // Only a model with external data spells the key "location"; skip parsing all others.
  if (bytes.find("location") == std::string::npos) return;
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes)) return;  // The compile reports the parse error.
  std::set<std::string> locations;
  CollectLocations(model.graph(), &locations);
  for (const auto& f : model.functions()) {
    for (const auto& n : f.node()) {
      for (const auto& a : n.attribute()) CollectLocations(a, &locations);
    }
  }
  for (const std::string& loc : locations) {
    h->Str(loc);
    std::ifstream f(absl::StrCat(model_dir, "/", loc), std::ios::binary);
    if (!f) {
      h->Str("<missing>");
      continue;
    }
    char buf[1 << 16];
    int64_t total = 0;
    while (f) {
      f.read(buf, sizeof buf);
      h->Raw(buf, static_cast<size_t>(f.gcount()));
      total += f.gcount();
    }
    h->Int(total);
  }
}

void HashOptions(const CompileOptions& o, Hasher* h) {
  h->Int(o.opt_level);
  h->Int(o.import.run_checker ? 1 : 0);
  h->Int(static_cast<int64_t>(o.import.dim_overrides.size()));
  for (const auto& [name, v] : o.import.dim_overrides) {
    h->Str(name);
    h->Int(v);
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
}

void ToProto(const TensorSignature& s, pb::TensorSignature* p) {
  p->set_name(s.name);
  p->set_dtype(static_cast<int32_t>(s.dtype));
  for (const SymDim& d : s.shape) {
    auto* pd = p->add_shape();
    pd->set_coef(d.coef);
    pd->set_power(d.power);
  }
}

absl::StatusOr<TensorSignature> FromProto(const pb::TensorSignature& p) {
  TensorSignature s;
  s.name = p.name();
  s.dtype = static_cast<DType>(p.dtype());
  if (DTypeSize(s.dtype) == 0) return absl::DataLossError(absl::StrCat("bad dtype ", p.dtype()));
  for (const auto& d : p.shape()) s.shape.push_back(SymDim{d.coef(), d.power()});
  return s;
}

pb::CacheEntry EntryOf(const CompiledModel& m, const std::string& key) {
  pb::CacheEntry e;
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
  for (const auto& s : m.inputs) ToProto(s, e.add_inputs());
  for (const auto& s : m.outputs) ToProto(s, e.add_outputs());
  e.set_object_code(m.object_code);
  e.set_weights_dtype(static_cast<int32_t>(m.weights.dtype()));
  for (int64_t d : m.weights.shape()) e.add_weights_shape(d);
  e.set_weights(reinterpret_cast<const char*>(m.weights.data()), m.weights.byte_size());
  e.set_arena_per_batch_bytes(m.arena.per_batch_bytes);
  e.set_arena_fixed_bytes(m.arena.fixed_bytes);
  e.set_arena_unplanned_bytes(m.arena.unplanned_bytes);
  for (const auto& k : m.kernels) {
    auto* pk = e.add_kernels();
    pk->set_index(k.index);
    pk->set_symbol(k.symbol);
    pk->set_op_type(k.op_type);
    pk->set_node_name(k.node_name);
    pk->set_signature(k.signature);
  }
  for (const auto& t : m.timings) {
    auto* pt = e.add_timings();
    pt->set_phase(t.phase);
    pt->set_ms(t.ms);
  }
  e.set_compiled_cpu(m.cpu);
  return e;
}

// Rebuilds a CompiledModel, checking everything a later stage would trust (sizes, indices).
absl::StatusOr<CompiledModel> ModelOf(pb::CacheEntry& e) {
  CompiledModel m;
  m.name = e.name();
  m.symbol = e.symbol();
  for (const auto& p : e.inputs()) {
    auto s = FromProto(p);
    if (!s.ok()) return s.status();
    m.inputs.push_back(std::move(*s));
  }
  for (const auto& p : e.outputs()) {
    auto s = FromProto(p);
    if (!s.ok()) return s.status();
    m.outputs.push_back(std::move(*s));
  }
  if (e.object_code().empty()) return absl::DataLossError("no object code");
  m.object_code = std::move(*e.mutable_object_code());
  std::vector<int64_t> shape(e.weights_shape().begin(), e.weights_shape().end());
  auto dtype = static_cast<DType>(e.weights_dtype());
  if (!shape.empty() || dtype != DType::kUndefined) {
    auto bytes = CheckedTensorBytes(dtype, shape);
    if (!bytes.ok() || *bytes != e.weights().size()) {
      return absl::DataLossError("weights size does not match their shape");
    }
    m.weights = HostTensor(dtype, shape);
    if (*bytes > 0) std::memcpy(m.weights.data(), e.weights().data(), *bytes);
  } else if (!e.weights().empty()) {
    return absl::DataLossError("weights without a shape");
  }
  m.arena.per_batch_bytes = e.arena_per_batch_bytes();
  m.arena.fixed_bytes = e.arena_fixed_bytes();
  m.arena.unplanned_bytes = e.arena_unplanned_bytes();
  if (m.arena.per_batch_bytes < 0 || m.arena.fixed_bytes < 0) {
    return absl::DataLossError("negative arena size");
  }
  for (int i = 0; i < e.kernels_size(); ++i) {
    const auto& k = e.kernels(i);
    if (k.index() != i) return absl::DataLossError("kernel table out of order");
    m.kernels.push_back({k.index(), k.symbol(), k.op_type(), k.node_name(), k.signature()});
  }
  for (const auto& t : e.timings()) m.timings.push_back({t.phase(), t.ms()});
  m.cpu = e.compiled_cpu();
  return m;
}

uint64_t SizeOf(const CompiledModel& m) { return m.object_code.size() + m.weights.byte_size(); }

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
  // Keys being compiled by some thread; others with the same key wait instead of compiling.
  std::set<std::string> inflight ABSL_GUARDED_BY(mu);
  ObjectCacheStats stats ABSL_GUARDED_BY(mu);
};

ObjectCache::ObjectCache(ObjectCacheOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {}

ObjectCache::~ObjectCache() = default;

absl::StatusOr<std::unique_ptr<ObjectCache>> ObjectCache::Create(ObjectCacheOptions options) {
  if (!options.dir.empty()) {
    std::error_code ec;
    fs::create_directories(options.dir, ec);
    if (ec || !fs::is_directory(options.dir)) {
      return absl::InvalidArgumentError(absl::StrCat("JIT cache directory ", options.dir, ": ",
                                                     ec ? ec.message() : "not a directory"));
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
  HashOptions(options, &h);
  if (!bytes.empty()) {
    h.Str("bytes");
    h.Str(bytes);
  } else {
    // Streamed in chunks: a model can be large, and allocating its size costs page faults.
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open model ", path));
    h.Str("file");
    constexpr size_t kChunk = 1 << 20;
    constexpr std::string_view kLocation = "location";
    std::vector<char> buf(kChunk + kLocation.size());
    size_t carry = 0;  // Tail of the previous chunk, so "location" across chunks is found.
    bool has_location = false;
    int64_t total = 0;
    for (;;) {
      ssize_t n = read(fd, buf.data() + carry, kChunk);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        close(fd);
        return absl::NotFoundError(absl::StrCat("cannot read model ", path));
      }
      if (n == 0) break;
      h.Raw(buf.data() + carry, static_cast<size_t>(n));
      total += n;
      std::string_view window(buf.data(), carry + static_cast<size_t>(n));
      has_location = has_location || window.find(kLocation) != std::string_view::npos;
      carry = std::min(window.size(), kLocation.size() - 1);
      std::memmove(buf.data(), window.data() + window.size() - carry, carry);
    }
    close(fd);
    h.Int(total);
    if (has_location) {  // Only a model with external data spells "location": parse it then.
      std::ifstream f(path, std::ios::binary);
      std::string file((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      std::string dir = fs::path(path).parent_path().string();
      HashExternalData(file, dir.empty() ? "." : dir, &h);
    }
  }
  return h.Hex();
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
// when there is one that must not be loaded.
absl::StatusOr<CompiledModel> ReadEntry(const std::string& file, const std::string& key) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError("no entry");
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
      static_cast<uint64_t>(st.st_size) > kMaxEntryBytes) {
    close(fd);
    return absl::DataLossError("not a regular, non-empty file of plausible size");
  }
  const size_t size = static_cast<size_t>(st.st_size);
  // Mapped rather than read: the payload is checked and parsed in place, without copies.
  void* mapped = mmap(nullptr, size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  close(fd);
  if (mapped == MAP_FAILED) return absl::DataLossError("cannot map the file");
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{mapped, size};
  const auto* data = static_cast<const uint8_t*>(mapped);

  // CacheFile, field by field, so `payload` stays a view into the mapping.
  using WFL = google::protobuf::internal::WireFormatLite;
  google::protobuf::io::CodedInputStream in(data, static_cast<int>(size));
  std::string magic, checksum;
  uint32_t format_version = 0;
  const uint8_t* payload = nullptr;
  uint32_t payload_size = 0;
  while (uint32_t tag = in.ReadTag()) {
    const int field = WFL::GetTagFieldNumber(tag);
    const bool delimited = WFL::GetTagWireType(tag) == WFL::WIRETYPE_LENGTH_DELIMITED;
    uint32_t len = 0;
    if ((field == 1 || field == 3 || field == 4) && (!delimited || !in.ReadVarint32(&len))) {
      return absl::DataLossError("not a cache file");
    }
    if (field == 1 || field == 3) {
      if (len > 64 || !in.ReadString(field == 1 ? &magic : &checksum, static_cast<int>(len))) {
        return absl::DataLossError("not a cache file");
      }
    } else if (field == 2) {
      if (WFL::GetTagWireType(tag) != WFL::WIRETYPE_VARINT || !in.ReadVarint32(&format_version)) {
        return absl::DataLossError("not a cache file");
      }
    } else if (field == 4) {
      payload = data + in.CurrentPosition();
      payload_size = len;
      if (!in.Skip(static_cast<int>(len))) return absl::DataLossError("truncated");
    } else if (!WFL::SkipField(&in, tag)) {
      return absl::DataLossError("not a cache file");
    }
  }
  if (static_cast<size_t>(in.CurrentPosition()) != size) {
    return absl::DataLossError("not a cache file (or truncated)");
  }
  if (magic != kMagic) return absl::DataLossError("foreign file (bad magic)");
  if (format_version != kCacheFormatVersion) {
    return absl::DataLossError(
        absl::StrCat("format version ", format_version, ", expected ", kCacheFormatVersion));
  }
  if (payload == nullptr) return absl::DataLossError("no payload");
  if (checksum != ChecksumOf(payload, payload_size)) {
    return absl::DataLossError("checksum mismatch");
  }
  pb::CacheEntry entry;
  if (!entry.ParseFromArray(payload, static_cast<int>(payload_size))) {
    return absl::DataLossError("bad payload");
  }
  if (entry.key() != key) return absl::DataLossError("entry is for another key");
  if (entry.compiler_version() != CompilerIdentity() || entry.target_triple() != Host().triple ||
      entry.cpu() != Host().cpu || entry.cpu_features() != Host().features) {
    return absl::DataLossError("entry is for another compiler or CPU");
  }
  return ModelOf(entry);
}

// Writes `entry` for `key` atomically (temporary file in the same folder + rename).
absl::Status WriteEntry(const std::string& dir, const std::string& file, const std::string& key,
                        const pb::CacheEntry& entry) {
  pb::CacheFile cache_file;
  cache_file.set_magic(kMagic);
  cache_file.set_format_version(kCacheFormatVersion);
  if (!entry.SerializeToString(cache_file.mutable_payload())) {
    return absl::InternalError("cannot serialize the cache entry");
  }
  cache_file.set_checksum(ChecksumOf(cache_file.payload().data(), cache_file.payload().size()));
  std::string data;
  if (!cache_file.SerializeToString(&data)) return absl::InternalError("cannot serialize");
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string tmp = absl::StrCat(dir, "/", kTempPrefix, key, "-", getpid(), "-", rng() % 1000000);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0)
    return absl::InternalError(absl::StrCat("cannot create ", tmp, ": ", strerror(errno)));
  size_t put = 0;
  while (put < data.size()) {
    ssize_t n = write(fd, data.data() + put, data.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    put += static_cast<size_t>(n);
  }
  bool ok = put == data.size() && close(fd) == 0;
  if (!ok || rename(tmp.c_str(), file.c_str()) != 0) {
    std::string why = strerror(errno);
    unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", file, ": ", why));
  }
  return absl::OkStatus();
}

// Removes least recently used entries (by mtime, which a hit refreshes) until the folder holds at
// most `max_bytes`; `keep` (the entry just written) goes last. Also drops stale temporary files of
// writers that died. Returns the number of entries removed.
uint64_t Evict(const std::string& dir, uint64_t max_bytes, const std::string& keep) {
  struct File {
    std::string path;
    uint64_t bytes;
    fs::file_time_type mtime;
  };
  std::vector<File> files;
  uint64_t total = 0;
  std::error_code ec;
  const auto now = fs::file_time_type::clock::now();
  for (const auto& de : fs::directory_iterator(dir, ec)) {
    std::string name = de.path().filename().string();
    std::error_code e2;
    if (!de.is_regular_file(e2)) continue;
    auto mtime = de.last_write_time(e2);
    if (e2) continue;
    if (name.rfind(kTempPrefix, 0) == 0) {
      if (now - mtime > std::chrono::hours(1)) fs::remove(de.path(), e2);
      continue;
    }
    if (name.size() <= strlen(kEntrySuffix) ||
        name.compare(name.size() - strlen(kEntrySuffix), std::string::npos, kEntrySuffix) != 0) {
      continue;
    }
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
  for (const File& f : files) {
    if (total <= max_bytes) break;
    std::error_code e2;
    if (fs::remove(f.path, e2)) ++removed;  // Another process may have removed it already.
    total -= f.bytes;
  }
  return removed;
}

}  // namespace

absl::StatusOr<CompiledModel> ObjectCache::Compile(const std::string& path,
                                                   const std::string& bytes,
                                                   const CompileOptions& options,
                                                   CacheLookup* lookup) {
  CacheLookup local;
  if (lookup == nullptr) lookup = &local;
  *lookup = CacheLookup();
  auto compile = [&]() {
    return bytes.empty() ? CompileOnnxFile(path, options) : CompileOnnxBytes(bytes, options);
  };
  auto key = Key(path, bytes, options);
  if (!key.ok()) return compile();  // Let the compiler report the unreadable model.
  lookup->key = *key;
  const bool emit = !options.emit_llvm_path.empty();

  // Memory first; wait while another thread compiles the same key.
  std::shared_ptr<const CompiledModel> in_memory;
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
      impl_->inflight.insert(*key);
    }
  }
  if (in_memory != nullptr) return CompiledModel(*in_memory);  // Copied outside the lock.
  const std::string file = EntryPath(*key);
  absl::StatusOr<CompiledModel> result = absl::UnknownError("unset");
  bool from_disk = false;
  if (!file.empty() && !emit) {
    result = ReadEntry(file, *key);
    if (result.ok()) {
      from_disk = true;
      utimensat(AT_FDCWD, file.c_str(), nullptr, 0);  // A hit makes the entry recently used.
    } else if (absl::IsDataLoss(result.status())) {
      lookup->refused_entry = true;
      spdlog::warn("JIT cache: refusing entry {} ({}); recompiling", file,
                   std::string(result.status().message()));
      unlink(file.c_str());
    }
  }
  uint64_t evicted = 0;
  bool stored = false;
  if (!from_disk) {
    result = compile();
    if (result.ok() && !file.empty()) {
      if (auto s = WriteEntry(options_.dir, file, *key, EntryOf(*result, *key)); s.ok()) {
        stored = true;
        evicted = Evict(options_.dir, options_.max_bytes, file);
      } else {
        spdlog::warn("JIT cache: {}", std::string(s.message()));
      }
    }
  }
  absl::MutexLock lock(&impl_->mu);
  impl_->inflight.erase(*key);
  if (lookup->refused_entry) ++impl_->stats.corrupt;
  if (stored) ++impl_->stats.stores;
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

}  // namespace cuvil
