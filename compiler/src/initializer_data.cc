#include "initializer_data.h"

namespace cuvil {
namespace {

// Field numbers of onnx.proto.
constexpr uint64_t kModelGraph = 7;
constexpr uint64_t kGraphInitializer = 5;
constexpr uint64_t kTensorRawData = 9;

constexpr int kWireVarint = 0;
constexpr int kWireFixed64 = 1;
constexpr int kWireLength = 2;
constexpr int kWireFixed32 = 5;

// The bytes being split: a buffer in memory, or a file read through a FileWindow.
struct MemorySource {
  const uint8_t* data;
  uint64_t size;
  bool Byte(uint64_t at, uint8_t* out) {
    if (at >= size) return false;
    *out = data[at];
    return true;
  }
  bool Append(uint64_t at, uint64_t n, std::string* out) {
    if (at > size || n > size - at) return false;
    out->append(reinterpret_cast<const char*>(data + at), static_cast<size_t>(n));
    return true;
  }
};

struct FileSource {
  FileWindow* file;
  bool Byte(uint64_t at, uint8_t* out) { return file->Byte(at, out); }
  bool Append(uint64_t at, uint64_t n, std::string* out) {
    const size_t old = out->size();
    out->resize(old + static_cast<size_t>(n));
    return file->Read(at, n, out->data() + old);
  }
};

// A bounds-checked reader over the offsets [pos, end) of a source.
template <typename Source>
struct Cursor {
  Source* src;
  uint64_t pos;
  uint64_t end;

  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t byte = 0;
      if (pos == end || !src->Byte(pos++, &byte)) return false;
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;  // More than 10 bytes.
  }

  bool Skip(uint64_t n) {
    if (n > end - pos) return false;
    pos += n;
    return true;
  }
};

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// One field: its tag, and for length-delimited fields the payload (offsets in the source).
struct Field {
  uint64_t number = 0;
  int wire = 0;
  uint64_t start = 0;  // The tag's first byte.
  uint64_t payload = 0;
  uint64_t length = 0;
};

// Reads the next field of the message at `c`; false on malformed input or group wire types.
template <typename Source>
bool NextField(Cursor<Source>& c, Field* f) {
  f->start = c.pos;
  uint64_t tag = 0;
  if (!c.Varint(&tag)) return false;
  f->number = tag >> 3;
  f->wire = static_cast<int>(tag & 7);
  if (f->number == 0) return false;
  uint64_t skip = 0;
  switch (f->wire) {
    case kWireVarint:
      return c.Varint(&skip);
    case kWireFixed64:
      return c.Skip(8);
    case kWireFixed32:
      return c.Skip(4);
    case kWireLength:
      if (!c.Varint(&f->length)) return false;
      f->payload = c.pos;
      return c.Skip(f->length);
    default:  // Groups (3, 4) are not used by onnx.proto; 6 and 7 are invalid.
      return false;
  }
}

void PutField(uint64_t number, const std::string& payload, std::string* out) {
  PutVarint(number << 3 | kWireLength, out);
  PutVarint(payload.size(), out);
  out->append(payload);
}

// A TensorProto with a large raw_data: the placeholder version, and where the bytes lie.
template <typename Source>
bool SplitTensor(Cursor<Source> c, std::string* out, RawDataRange* raw) {
  bool seen = false;
  Field f;
  while (c.pos != c.end) {
    if (!NextField(c, &f)) return false;
    if (f.number == kTensorRawData && f.wire == kWireLength) {
      if (seen) return false;
      seen = true;
      if (f.length >= kMinSplitRawDataBytes) {
        *raw = {true, f.payload, f.length};
        PutField(kTensorRawData, std::string(1, '\0'), out);
        continue;
      }
    }
    if (!c.src->Append(f.start, c.pos - f.start, out)) return false;
  }
  return true;
}

template <typename Source>
bool SplitGraph(Cursor<Source> c, std::string* out, std::vector<RawDataRange>* raw) {
  Field f;
  while (c.pos != c.end) {
    if (!NextField(c, &f)) return false;
    if (f.number == kGraphInitializer && f.wire == kWireLength) {
      std::string tensor;
      RawDataRange data;
      if (!SplitTensor(Cursor<Source>{c.src, f.payload, f.payload + f.length}, &tensor, &data)) {
        return false;
      }
      raw->push_back(data);
      PutField(kGraphInitializer, tensor, out);
      continue;
    }
    if (!c.src->Append(f.start, c.pos - f.start, out)) return false;
  }
  return true;
}

template <typename Source>
std::optional<SplitFile> Split(Source& src, uint64_t size) {
  SplitFile split;
  Cursor<Source> c{&src, 0, size};
  bool seen_graph = false;
  Field f;
  while (c.pos != c.end) {
    if (!NextField(c, &f)) return std::nullopt;
    if (f.number == kModelGraph) {
      if (seen_graph || f.wire != kWireLength) return std::nullopt;
      seen_graph = true;
      std::string graph;
      if (!SplitGraph(Cursor<Source>{&src, f.payload, f.payload + f.length}, &graph,
                      &split.raw_data)) {
        return std::nullopt;
      }
      PutField(kModelGraph, graph, &split.skeleton);
      continue;
    }
    if (!src.Append(f.start, c.pos - f.start, &split.skeleton)) return std::nullopt;
  }
  bool moved = false;
  for (const RawDataRange& r : split.raw_data) moved |= r.moved;
  if (!moved) return std::nullopt;
  return split;
}

}  // namespace

std::optional<SplitModel> SplitInitializerData(const uint8_t* data, size_t size) {
  MemorySource src{data, size};
  std::optional<SplitFile> split = Split(src, size);
  if (!split.has_value()) return std::nullopt;
  SplitModel out;
  out.skeleton = std::move(split->skeleton);
  for (const RawDataRange& r : split->raw_data) {
    out.raw_data.push_back(r.moved
                               ? std::string_view(reinterpret_cast<const char*>(data) + r.offset,
                                                  static_cast<size_t>(r.length))
                               : std::string_view());
  }
  return out;
}

std::optional<SplitFile> SplitInitializerDataOfFile(FileWindow& file) {
  FileSource src{&file};
  return Split(src, file.size());
}

}  // namespace cuvil
