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

// A bounds-checked reader over [pos, end).
struct Cursor {
  const uint8_t* pos;
  const uint8_t* end;

  bool Varint(uint64_t* out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos == end) return false;
      const uint8_t byte = *pos++;
      v |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) {
        *out = v;
        return true;
      }
    }
    return false;  // More than 10 bytes.
  }

  bool Skip(uint64_t n) {
    if (n > static_cast<uint64_t>(end - pos)) return false;
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

// One field: its tag, and for length-delimited fields the payload.
struct Field {
  uint64_t number = 0;
  int wire = 0;
  const uint8_t* start = nullptr;  // The tag's first byte.
  const uint8_t* payload = nullptr;
  uint64_t length = 0;
};

// Reads the next field of the message at `c`; false on malformed input or group wire types.
bool NextField(Cursor& c, Field* f) {
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

// A TensorProto with a large raw_data: the placeholder version, and the bytes it stood for.
bool SplitTensor(Cursor c, std::string* out, std::string_view* raw) {
  bool seen = false;
  Field f;
  while (c.pos != c.end) {
    if (!NextField(c, &f)) return false;
    if (f.number == kTensorRawData && f.wire == kWireLength) {
      if (seen) return false;
      seen = true;
      if (f.length >= kMinSplitRawDataBytes) {
        *raw = std::string_view(reinterpret_cast<const char*>(f.payload), f.length);
        PutField(kTensorRawData, std::string(1, '\0'), out);
        continue;
      }
    }
    out->append(reinterpret_cast<const char*>(f.start), static_cast<size_t>(c.pos - f.start));
  }
  return true;
}

bool SplitGraph(Cursor c, std::string* out, std::vector<std::string_view>* raw) {
  Field f;
  while (c.pos != c.end) {
    if (!NextField(c, &f)) return false;
    if (f.number == kGraphInitializer && f.wire == kWireLength) {
      std::string tensor;
      std::string_view data;
      if (!SplitTensor({f.payload, f.payload + f.length}, &tensor, &data)) return false;
      raw->push_back(data);
      PutField(kGraphInitializer, tensor, out);
      continue;
    }
    out->append(reinterpret_cast<const char*>(f.start), static_cast<size_t>(c.pos - f.start));
  }
  return true;
}

}  // namespace

std::optional<SplitModel> SplitInitializerData(const uint8_t* data, size_t size) {
  SplitModel split;
  Cursor c{data, data + size};
  bool seen_graph = false;
  Field f;
  while (c.pos != c.end) {
    if (!NextField(c, &f)) return std::nullopt;
    if (f.number == kModelGraph) {
      if (seen_graph || f.wire != kWireLength) return std::nullopt;
      seen_graph = true;
      std::string graph;
      if (!SplitGraph({f.payload, f.payload + f.length}, &graph, &split.raw_data)) {
        return std::nullopt;
      }
      PutField(kModelGraph, graph, &split.skeleton);
      continue;
    }
    split.skeleton.append(reinterpret_cast<const char*>(f.start),
                          static_cast<size_t>(c.pos - f.start));
  }
  bool moved = false;
  for (std::string_view r : split.raw_data) moved |= r.data() != nullptr;
  if (!moved) return std::nullopt;
  return split;
}

}  // namespace cuvil
