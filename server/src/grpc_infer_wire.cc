#include "grpc_infer_wire.h"

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/proto_buffer_reader.h>
#include <grpcpp/support/slice.h>

#include <climits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

constexpr uint32_t kRawInputContentsField = 7;   // ModelInferRequest.raw_input_contents
constexpr uint32_t kRawOutputContentsField = 6;  // ModelInferResponse.raw_output_contents
constexpr size_t kCopiedOutputBytes = 4096;      // Smaller outputs are cheaper copied than pinned.

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
bool ReadTag(google::protobuf::io::CodedInputStream& in, uint32_t* tag) {
  uint64_t v = 0;
  if (!in.ReadVarint64(&v) || v > UINT32_MAX || (v >> 3) == 0) return false;
  *tag = static_cast<uint32_t>(v);
  return true;
}

bool ReadLength(google::protobuf::io::CodedInputStream& in, uint32_t* len) {
  uint64_t v = 0;
  if (!in.ReadVarint64(&v) || v > INT32_MAX) return false;
  *len = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

absl::Status ReadModelInferRequest(grpc::ByteBuffer& wire,
                                   const std::shared_ptr<RecycledBuffers>& buffers,
                                   SplitInferRequest* out) {
  const size_t total = wire.Length();
  std::string header;  // Every field but the raw entries, re-encoded for protobuf.
  // The first pass counts and sizes the raw entries so one buffer can hold them all.
  size_t entries = 0;
  size_t raw_bytes = 0;
  RecycledBuffers::Buffer storage;
  for (int pass = 0; pass < 2; ++pass) {
    grpc::ProtoBufferReader reader(&wire);
    google::protobuf::io::CodedInputStream in(&reader);
    size_t entry = 0;
    size_t offset = 0;
    while (static_cast<size_t>(in.CurrentPosition()) != total) {
      uint32_t tag = 0;
      if (!ReadTag(in, &tag)) return Malformed("bad field tag");
      const uint32_t field = tag >> 3;
      const uint32_t type = tag & 7;
      if (field == kRawInputContentsField && type == kLengthDelimited) {
        uint32_t len = 0;
        if (!ReadLength(in, &len)) return Malformed("bad raw_input_contents length");
        if (len > total - static_cast<size_t>(in.CurrentPosition())) {
          return Malformed("raw_input_contents entry longer than the message");
        }
        if (pass == 0) {
          ++entries;
          raw_bytes += AlignedSize(len);
          if (!in.Skip(static_cast<int>(len))) return Malformed("truncated raw_input_contents");
        } else {
          uint8_t* dst = storage.get() + offset;
          if (len != 0 && !in.ReadRaw(dst, static_cast<int>(len))) {
            return Malformed("truncated raw_input_contents");
          }
          out->raw[entry++] = RawBytes{dst, len};
          offset += AlignedSize(len);
        }
        continue;
      }
      if (pass == 1) {
        // Everything else was gathered in the first pass.
        switch (type) {
          case kVarint: {
            uint64_t v;
            if (!in.ReadVarint64(&v)) return Malformed("truncated varint");
            break;
          }
          case kFixed64:
            if (!in.Skip(8)) return Malformed("truncated fixed64");
            break;
          case kFixed32:
            if (!in.Skip(4)) return Malformed("truncated fixed32");
            break;
          case kLengthDelimited: {
            uint32_t len = 0;
            if (!ReadLength(in, &len) || !in.Skip(static_cast<int>(len))) {
              return Malformed("truncated field");
            }
            break;
          }
          default:
            return Malformed("unsupported wire type");
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
          if (len > total - static_cast<size_t>(in.CurrentPosition())) {
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
    if (pass == 0) {
      if (!out->header.ParseFromString(header)) return Malformed("fields do not parse");
      if (entries == 0) break;
      storage = RecycledBuffers::Acquire(buffers, raw_bytes);
      out->raw.assign(entries, RawBytes{});
    }
  }
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
