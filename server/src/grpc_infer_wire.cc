#include "grpc_infer_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <algorithm>
#include <climits>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/runtime/dtype.h"

namespace cuvil {
namespace {

using google::protobuf::io::CodedInputStream;

constexpr uint32_t kModelNameField = 1;          // ModelInferRequest.model_name
constexpr uint32_t kModelVersionField = 2;       // ModelInferRequest.model_version
constexpr uint32_t kParametersField = 4;         // ModelInferRequest.parameters
constexpr uint32_t kInputsField = 5;             // ModelInferRequest.inputs
constexpr uint32_t kOutputsField = 6;            // ModelInferRequest.outputs
constexpr uint32_t kRawInputContentsField = 7;   // ModelInferRequest.raw_input_contents
constexpr uint32_t kRawOutputContentsField = 6;  // ModelInferResponse.raw_output_contents
constexpr size_t kCopiedOutputBytes = 4096;      // Smaller outputs are cheaper copied than pinned.
// What one bytes_contents entry takes parsed beyond its bytes: a std::string and its pointer.
constexpr uint64_t kBytesEntryOverhead = 48;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>(v | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat("malformed ModelInferRequest: ", what));
}

size_t AlignedSize(size_t n) { return (n + 63) / 64 * 64; }

// A field tag or a length as protobuf's own parser reads them: CodedInputStream's 32-bit readers
// drop the high bits of an over-long varint, which protobuf's message parser refuses instead.
bool ReadTag(CodedInputStream& in, uint32_t* tag) {
  uint64_t v = 0;
  if (!in.ReadVarint64(&v) || v > UINT32_MAX || (v >> 3) == 0) return false;
  *tag = static_cast<uint32_t>(v);
  return true;
}

bool ReadLength(CodedInputStream& in, uint32_t* len) {
  uint64_t v = 0;
  if (!in.ReadVarint64(&v) || v > INT32_MAX) return false;
  *len = static_cast<uint32_t>(v);
  return true;
}

// A length that fits in what is left of the current message.
bool ReadFittingLength(CodedInputStream& in, uint32_t* len) {
  return ReadLength(in, len) && static_cast<int64_t>(*len) <= in.BytesUntilLimit();
}

// Skips the value of a field of wire type `type` whose tag was just read; false when it is
// truncated or a group (which no KServe client sends).
bool SkipValue(CodedInputStream& in, uint32_t type) {
  switch (type) {
    case kVarint: {
      uint64_t v;
      return in.ReadVarint64(&v);
    }
    case kFixed64:
      return in.Skip(8);
    case kFixed32:
      return in.Skip(4);
    case kLengthDelimited: {
      uint32_t len = 0;
      return ReadLength(in, &len) && in.Skip(static_cast<int>(len));
    }
    default:
      return false;
  }
}

// "1 input", "2 inputs".
std::string Count(uint64_t n, const char* noun, const char* plural) {
  return absl::StrCat(n, " ", n == 1 ? noun : plural);
}

// The first pass: walks every field the request's header parses into (raw entries skipped) and
// counts what parsing would allocate, stopping at the hard caps. Allocates only the model name
// and version. Thread-compatible.
class Counter {
 public:
  Counter(CodedInputStream& in, InferWireCounts* counts) : in_(in), c_(*counts) {}

  // The whole message: `in` limited to it.
  absl::Status Request() {
    while (in_.BytesUntilLimit() > 0) {
      uint32_t tag = 0;
      if (!ReadTag(in_, &tag)) return Malformed("bad field tag");
      const uint32_t field = tag >> 3;
      if ((tag & 7) != kLengthDelimited) {
        if (auto s = Unknown(tag & 7); !s.ok()) return s;
        continue;
      }
      absl::Status s;
      switch (field) {
        case kModelNameField:
        case kModelVersionField: {
          uint32_t len = 0;
          std::string* to = field == kModelNameField ? &c_.model_name : &c_.model_version;
          if (!ReadFittingLength(in_, &len) || !in_.ReadString(to, static_cast<int>(len))) {
            return Malformed("truncated field");
          }
          break;
        }
        case kParametersField:
          if (++c_.parameters > hard_.max_parameters) {
            return AboveCap(hard_.max_parameters, "request parameters");
          }
          s = Nested([this](uint32_t f, uint32_t t) { return ParameterEntryField(f, t); });
          break;
        case kInputsField:
          if (++c_.inputs > hard_.max_inputs) return AboveCap(hard_.max_inputs, "inputs");
          s = Input();
          break;
        case kOutputsField:
          if (++c_.outputs > hard_.max_outputs) return AboveCap(hard_.max_outputs, "outputs");
          s = Output();
          break;
        case kRawInputContentsField: {
          uint32_t len = 0;
          if (!ReadLength(in_, &len)) return Malformed("bad raw_input_contents length");
          if (static_cast<int64_t>(len) > in_.BytesUntilLimit()) {
            return Malformed("raw_input_contents entry longer than the message");
          }
          if (++c_.raw_entries > hard_.max_inputs) {
            return AboveCap(hard_.max_inputs, "raw_input_contents entries");
          }
          c_.raw_bytes += len;
          c_.raw_reserved_bytes += AlignedSize(len);
          if (!in_.Skip(static_cast<int>(len))) return Malformed("truncated raw_input_contents");
          break;
        }
        default:
          s = Unknown(kLengthDelimited);
      }
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }

 private:
  // Reads a length-delimited message (its tag just read), calling `field(number, wire type)` for
  // each of its fields with `in_` positioned on the field's value.
  template <typename FieldFn>
  absl::Status Nested(FieldFn&& field) {
    uint32_t len = 0;
    if (!ReadLength(in_, &len)) return Malformed("bad length");
    if (static_cast<int64_t>(len) > in_.BytesUntilLimit()) {
      return Malformed("field longer than the message");
    }
    const CodedInputStream::Limit limit = in_.PushLimit(static_cast<int>(len));
    while (in_.BytesUntilLimit() > 0) {
      uint32_t tag = 0;
      if (!ReadTag(in_, &tag)) return Malformed("bad field tag");
      if (auto s = field(tag >> 3, tag & 7); !s.ok()) return s;
    }
    in_.PopLimit(limit);
    return absl::OkStatus();
  }

  // A field protobuf would keep among the unknown fields (an unknown number, or a known one with
  // another wire type).
  absl::Status Unknown(uint32_t type) {
    if (++c_.unknown_fields > hard_.max_unknown_fields) {
      return AboveCap(hard_.max_unknown_fields, "unknown fields");
    }
    if (!SkipValue(in_, type)) {
      return type == kVarint || type == kFixed64 || type == kFixed32 || type == kLengthDelimited
                 ? Malformed("truncated field")
                 : Malformed("unsupported wire type");
    }
    return absl::OkStatus();
  }

  absl::Status Skip(uint32_t type) {
    return SkipValue(in_, type) ? absl::OkStatus() : Malformed("truncated field");
  }

  // The elements of a repeated varint field: one, or a packed run of them.
  absl::StatusOr<uint64_t> Varints(uint32_t type) {
    if (type == kVarint) {
      uint64_t v;
      if (!in_.ReadVarint64(&v)) return Malformed("truncated varint");
      return 1;
    }
    uint32_t len = 0;
    if (!ReadFittingLength(in_, &len)) return Malformed("truncated packed field");
    // Each varint ends with the one byte of it whose high bit is clear.
    uint64_t n = 0;
    char chunk[4096];
    while (len > 0) {
      const uint32_t k = std::min<uint32_t>(len, sizeof(chunk));
      if (!in_.ReadRaw(chunk, static_cast<int>(k))) return Malformed("truncated packed field");
      for (uint32_t i = 0; i < k; ++i) n += (static_cast<uint8_t>(chunk[i]) & 0x80) == 0;
      len -= k;
    }
    return n;
  }

  // The bytes of a repeated fixed-width field: one element, or a packed run.
  absl::StatusOr<uint64_t> FixedBytes(uint32_t type, uint32_t width) {
    if (type != kLengthDelimited) {
      if (!in_.Skip(static_cast<int>(width))) return Malformed("truncated field");
      return width;
    }
    uint32_t len = 0;
    if (!ReadFittingLength(in_, &len) || !in_.Skip(static_cast<int>(len))) {
      return Malformed("truncated packed field");
    }
    return len;
  }

  absl::Status Input() {
    size_t dims = 0;
    size_t params = 0;
    absl::Status s = Nested([&](uint32_t field, uint32_t type) -> absl::Status {
      if ((field == 1 || field == 2) && type == kLengthDelimited) return Skip(type);  // name, type
      if (field == 3 && (type == kVarint || type == kLengthDelimited)) {              // shape
        absl::StatusOr<uint64_t> n = Varints(type);
        if (!n.ok()) return n.status();
        dims += *n;
        if (dims > hard_.max_shape_dims)
          return AboveCap(hard_.max_shape_dims, "shape dims in one input");
        return absl::OkStatus();
      }
      if (field == 4 && type == kLengthDelimited) {  // parameters
        if (++params > hard_.max_tensor_parameters) {
          return AboveCap(hard_.max_tensor_parameters, "parameters in one tensor");
        }
        return Nested([this](uint32_t f, uint32_t t) { return ParameterEntryField(f, t); });
      }
      if (field == 5 && type == kLengthDelimited) {  // contents
        return Nested([this](uint32_t f, uint32_t t) { return ContentsField(f, t); });
      }
      return Unknown(type);
    });
    c_.shape_dims = std::max(c_.shape_dims, dims);
    c_.tensor_parameters = std::max(c_.tensor_parameters, params);
    return s;
  }

  absl::Status Output() {
    size_t params = 0;
    absl::Status s = Nested([&](uint32_t field, uint32_t type) -> absl::Status {
      if (field == 1 && type == kLengthDelimited) return Skip(type);  // name
      if (field == 2 && type == kLengthDelimited) {                   // parameters
        if (++params > hard_.max_tensor_parameters) {
          return AboveCap(hard_.max_tensor_parameters, "parameters in one tensor");
        }
        return Nested([this](uint32_t f, uint32_t t) { return ParameterEntryField(f, t); });
      }
      return Unknown(type);
    });
    c_.tensor_parameters = std::max(c_.tensor_parameters, params);
    return s;
  }

  // A field of map<string, InferParameter>'s entry.
  absl::Status ParameterEntryField(uint32_t field, uint32_t type) {
    if (field == 1 && type == kLengthDelimited) return Skip(type);  // key
    if (field == 2 && type == kLengthDelimited) {                   // value
      return Nested([this](uint32_t f, uint32_t t) -> absl::Status {
        const bool known = ((f == 1 || f == 2 || f == 5) && t == kVarint) ||
                           (f == 3 && t == kLengthDelimited) || (f == 4 && t == kFixed64);
        return known ? Skip(t) : Unknown(t);
      });
    }
    return Unknown(type);
  }

  // A field of InferTensorContents: what its elements take once parsed.
  absl::Status ContentsField(uint32_t field, uint32_t type) {
    // bool, int32, int64, uint32, uint64: varints of 1, 4, 8, 4 and 8 bytes in memory.
    static constexpr uint64_t kVarintBytes[] = {0, 1, 4, 8, 4, 8};
    absl::StatusOr<uint64_t> bytes = uint64_t{0};
    if (field >= 1 && field <= 5 && (type == kVarint || type == kLengthDelimited)) {
      absl::StatusOr<uint64_t> n = Varints(type);
      if (!n.ok()) return n.status();
      bytes = *n * kVarintBytes[field];
    } else if (field == 6 && (type == kFixed32 || type == kLengthDelimited)) {
      bytes = FixedBytes(type, 4);
    } else if (field == 7 && (type == kFixed64 || type == kLengthDelimited)) {
      bytes = FixedBytes(type, 8);
    } else if (field == 8 && type == kLengthDelimited) {
      uint32_t len = 0;
      if (!ReadFittingLength(in_, &len) || !in_.Skip(static_cast<int>(len))) {
        return Malformed("truncated field");
      }
      bytes = kBytesEntryOverhead + len;
    } else {
      return Unknown(type);
    }
    if (!bytes.ok()) return bytes.status();
    c_.contents_bytes += *bytes;
    return absl::OkStatus();
  }

  // Counting stopped past a hard cap: no model takes that many.
  static absl::Status AboveCap(size_t cap, const char* what) {
    return absl::InvalidArgumentError(absl::StrCat("ModelInferRequest has more than ", cap, " ",
                                                   what, ", the most any request may have"));
  }

  CodedInputStream& in_;
  InferWireCounts& c_;
  const InferWireLimits hard_;
};

// The counts against the limits of the model the request names.
absl::Status CheckCounts(const InferWireCounts& c, const InferWireLimits& l) {
  const std::string who = l.what.empty() ? std::string("a request") : l.what;
  auto above = [&](uint64_t n, uint64_t max, const char* noun, const char* plural) {
    return absl::InvalidArgumentError(absl::StrCat("the request has ", Count(n, noun, plural), "; ",
                                                   who, " takes at most ", max));
  };
  if (c.inputs > l.max_inputs) return above(c.inputs, l.max_inputs, "input", "inputs");
  if (c.raw_entries > l.max_inputs) {
    return above(c.raw_entries, l.max_inputs, "raw_input_contents entry",
                 "raw_input_contents entries");
  }
  if (c.outputs > l.max_outputs) {
    return above(c.outputs, l.max_outputs, "requested output", "requested outputs");
  }
  if (c.parameters > l.max_parameters) {
    return above(c.parameters, l.max_parameters, "request parameter", "request parameters");
  }
  if (c.tensor_parameters > l.max_tensor_parameters) {
    return above(c.tensor_parameters, l.max_tensor_parameters, "parameter in one tensor",
                 "parameters in one tensor");
  }
  if (c.shape_dims > l.max_shape_dims) {
    return above(c.shape_dims, l.max_shape_dims, "shape dim in one input",
                 "shape dims in one input");
  }
  if (c.unknown_fields > l.max_unknown_fields) {
    return above(c.unknown_fields, l.max_unknown_fields, "unknown field", "unknown fields");
  }
  if (c.raw_bytes > l.max_declared_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("raw_input_contents hold ", c.raw_bytes,
                                                   " bytes, more than the ", l.max_declared_bytes,
                                                   " bytes a request may carry"));
  }
  if (c.contents_bytes > l.max_declared_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("the inputs' typed contents take ", c.contents_bytes, " bytes, more than the ",
                     l.max_declared_bytes, " bytes a request may carry"));
  }
  return absl::OkStatus();
}

// The bytes the inputs outside shared memory declare (shape x datatype size), or nullopt when
// one has no fixed size (BYTES, an unknown datatype, a negative dim: refused later with the
// builder's own message). InvalidArgument naming the input when they exceed `limits`.
absl::StatusOr<std::optional<uint64_t>> DeclaredBytes(const inference::ModelInferRequest& q,
                                                      const InferWireLimits& limits) {
  const uint64_t cap = limits.max_declared_bytes;
  uint64_t total = 0;
  bool known = true;
  for (const auto& in : q.inputs()) {
    if (in.parameters().contains("shared_memory_region")) continue;
    absl::StatusOr<DType> dtype = DTypeFromKServeName(in.datatype());
    if (!dtype.ok() || *dtype == DType::kString || DTypeSize(*dtype) <= 0) {
      known = false;
      continue;
    }
    const bool negative =
        std::any_of(in.shape().begin(), in.shape().end(), [](int64_t d) { return d < 0; });
    if (negative) {
      known = false;
      continue;
    }
    const bool empty =
        std::any_of(in.shape().begin(), in.shape().end(), [](int64_t d) { return d == 0; });
    uint64_t bytes = empty ? 0 : static_cast<uint64_t>(DTypeSize(*dtype));
    bool over = false;
    for (int64_t d : in.shape()) {
      if (bytes == 0) break;
      const uint64_t dim = static_cast<uint64_t>(d);
      if (bytes > cap / dim) {
        over = true;
        break;
      }
      bytes *= dim;
    }
    if (over || bytes > cap - total) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", in.name(), "': shape [", absl::StrJoin(in.shape(), ","), "] of ",
          in.datatype(), " declares more than the ", cap, " bytes a request may carry"));
    }
    total += bytes;
  }
  if (!known) return std::nullopt;
  return total;
}

}  // namespace

absl::Status ReadModelInferRequest(grpc::ByteBuffer& wire,
                                   const std::shared_ptr<RecycledBuffers>& buffers,
                                   SplitInferRequest* out, const InferWireLimitsFn& limits_fn) {
  const size_t total = wire.Length();
  if (total > static_cast<size_t>(INT_MAX)) return Malformed("longer than 2 GiB");
  // First pass: count, allocating nothing in proportion to the message.
  InferWireCounts counts;
  {
    grpc::ProtoBufferReader reader(&wire);
    CodedInputStream in(&reader);
    in.PushLimit(static_cast<int>(total));
    if (auto s = Counter(in, &counts).Request(); !s.ok()) return s;
  }
  InferWireLimits limits;
  if (limits_fn) {
    absl::StatusOr<InferWireLimits> l = limits_fn(counts);
    if (!l.ok()) return l.status();
    limits = *std::move(l);
  }
  if (auto s = CheckCounts(counts, limits); !s.ok()) return s;

  // Second pass: every field but the raw entries, re-encoded for protobuf (bounded now).
  std::string header;
  {
    grpc::ProtoBufferReader reader(&wire);
    CodedInputStream in(&reader);
    in.PushLimit(static_cast<int>(total));
    while (in.BytesUntilLimit() > 0) {
      uint32_t tag = 0;
      if (!ReadTag(in, &tag)) return Malformed("bad field tag");
      const uint32_t type = tag & 7;
      if ((tag >> 3) == kRawInputContentsField && type == kLengthDelimited) {
        uint32_t len = 0;
        if (!ReadLength(in, &len) || !in.Skip(static_cast<int>(len))) {
          return Malformed("truncated raw_input_contents");
        }
        continue;
      }
      AppendVarint(tag, &header);
      switch (type) {
        case kVarint: {
          uint64_t v;
          if (!in.ReadVarint64(&v)) return Malformed("truncated varint");
          AppendVarint(v, &header);
          break;
        }
        case kFixed64:
        case kFixed32: {
          const int n = type == kFixed64 ? 8 : 4;
          char bytes[8];
          if (!in.ReadRaw(bytes, n)) return Malformed("truncated fixed-width field");
          header.append(bytes, static_cast<size_t>(n));
          break;
        }
        case kLengthDelimited: {
          uint32_t len = 0;
          if (!ReadLength(in, &len)) return Malformed("bad length");
          if (static_cast<int64_t>(len) > in.BytesUntilLimit()) {
            return Malformed("field longer than the message");
          }
          AppendVarint(len, &header);
          std::string bytes;
          if (!in.ReadString(&bytes, static_cast<int>(len))) return Malformed("truncated field");
          header += bytes;
          break;
        }
        default:
          return Malformed("unsupported wire type");
      }
    }
  }
  if (!out->header.ParseFromString(header)) return Malformed("fields do not parse");
  header = std::string();
  if (limits.max_declared_bytes != UINT64_MAX) {
    // The raw entries may hold no more than the inputs declare: the buffer below is bounded by
    // the declared tensors, not by what a client chose to send.
    absl::StatusOr<std::optional<uint64_t>> declared = DeclaredBytes(out->header, limits);
    if (!declared.ok()) return declared.status();
    if (declared->has_value() && counts.raw_bytes > **declared) {
      return absl::InvalidArgumentError(
          absl::StrCat("raw_input_contents hold ", counts.raw_bytes, " bytes, more than the ",
                       **declared, " bytes the inputs' shapes and datatypes declare"));
    }
  }
  if (counts.raw_entries == 0) return absl::OkStatus();

  // Third pass: the raw entries, copied into one buffer taken now that they are bounded.
  RecycledBuffers::Buffer storage = RecycledBuffers::Acquire(buffers, counts.raw_reserved_bytes);
  out->raw.assign(counts.raw_entries, RawBytes{});
  {
    grpc::ProtoBufferReader reader(&wire);
    CodedInputStream in(&reader);
    in.PushLimit(static_cast<int>(total));
    size_t entry = 0;
    size_t offset = 0;
    while (in.BytesUntilLimit() > 0) {
      uint32_t tag = 0;
      if (!ReadTag(in, &tag)) return Malformed("bad field tag");
      const uint32_t type = tag & 7;
      if ((tag >> 3) != kRawInputContentsField || type != kLengthDelimited) {
        if (!SkipValue(in, type)) return Malformed("truncated field");
        continue;
      }
      uint32_t len = 0;
      if (!ReadLength(in, &len) || entry == counts.raw_entries ||
          offset + AlignedSize(len) > counts.raw_reserved_bytes) {
        return Malformed("raw_input_contents changed between passes");
      }
      uint8_t* dst = storage.get() + offset;
      if (len != 0 && !in.ReadRaw(dst, static_cast<int>(len))) {
        return Malformed("truncated raw_input_contents");
      }
      out->raw[entry++] = RawBytes{dst, len};
      offset += AlignedSize(len);
    }
  }
  out->reserved_bytes = counts.raw_reserved_bytes;
  out->holder = std::shared_ptr<uint8_t>(std::move(storage));
  return absl::OkStatus();
}

void WriteModelInferResponse(const inference::ModelInferResponse& header,
                             const std::vector<RawBytes>& raw, std::shared_ptr<const void> holder,
                             grpc::ByteBuffer* wire) {
  std::vector<grpc::Slice> slices;
  std::string head = header.SerializeAsString();
  for (const RawBytes& entry : raw) {
    AppendVarint((kRawOutputContentsField << 3) | kLengthDelimited, &head);
    AppendVarint(entry.size, &head);
    if (entry.size < kCopiedOutputBytes) {
      head.append(reinterpret_cast<const char*>(entry.data), entry.size);
      continue;
    }
    slices.emplace_back(head);
    head.clear();
    // The slice owns a reference to the holder; gRPC drops it once the bytes are sent.
    auto* keep = new std::shared_ptr<const void>(holder);
    slices.emplace_back(
        const_cast<uint8_t*>(entry.data), entry.size,
        [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, keep);
  }
  if (!head.empty() || slices.empty()) slices.emplace_back(head);
  *wire = grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace cuvil
