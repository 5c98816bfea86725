#include "cache_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <filesystem>
#include <optional>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "content_hash.h"
#include "cuvil/compiler/external_data.h"
#include "cuvil/jitcache/object_cache.h"
#include "cuvil/runtime/file_window.h"
#include "model_format.h"
#include "onnx/onnx_pb.h"

namespace cuvil::jitcache_internal {
namespace fs = std::filesystem;
namespace {

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

}  // namespace

absl::StatusOr<std::string> CacheKeyOf(const std::string& path, const std::string& bytes,
                                       const CompileOptions& options,
                                       const DigestMemo* memo_store) {
  Hasher h;
  // What generates the code, the entry format, and the options: each in the one serialization
  // the entry and snapshot formats share (model_format.h).
  h.Str(ThisBuildIdentity().SerializeAsString());
  h.Int(kCacheFormatVersion);
  h.Str(SerializedCompileOptions(options));
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
    const FileStamp stamp = StampOf(st);
    h.Str("file");
    std::optional<MemoRecord> memo;
    if (memo_store != nullptr) memo = memo_store->Find(stamp);
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
      if (memo_store != nullptr && fstat(fd, &after) == 0 && StampOf(after) == stamp) {
        memo_store->Store(stamp, *memo);
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

}  // namespace cuvil::jitcache_internal
