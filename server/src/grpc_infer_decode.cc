#include "grpc_infer_decode.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuvil/runtime/dtype.h"

namespace cuvil {
namespace {

template <typename T>
void AppendTyped(const google::protobuf::RepeatedField<T>& src, std::string* out) {
  out->append(reinterpret_cast<const char*>(src.data()), src.size() * sizeof(T));
}

// Converts typed `contents` into raw little-endian bytes of `dtype`.
absl::Status ContentsToBytes(const inference::InferTensorContents& c, DType dtype,
                             const std::string& name, std::string* out) {
  auto narrow = [&](auto tag, const auto& src) {
    using T = decltype(tag);
    for (auto v : src) {
      T x = static_cast<T>(v);
      out->append(reinterpret_cast<const char*>(&x), sizeof(T));
    }
  };
  switch (dtype) {
    case DType::kFloat32:
      AppendTyped(c.fp32_contents(), out);
      break;
    case DType::kFloat64:
      AppendTyped(c.fp64_contents(), out);
      break;
    case DType::kInt64:
      AppendTyped(c.int64_contents(), out);
      break;
    case DType::kUInt64:
      AppendTyped(c.uint64_contents(), out);
      break;
    case DType::kInt32:
      AppendTyped(c.int_contents(), out);
      break;
    case DType::kInt16:
      narrow(int16_t{}, c.int_contents());
      break;
    case DType::kInt8:
      narrow(int8_t{}, c.int_contents());
      break;
    case DType::kUInt32:
      AppendTyped(c.uint_contents(), out);
      break;
    case DType::kUInt16:
      narrow(uint16_t{}, c.uint_contents());
      break;
    case DType::kUInt8:
      narrow(uint8_t{}, c.uint_contents());
      break;
    case DType::kBool:
      narrow(uint8_t{}, c.bool_contents());
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("input '", name, "': datatype has no typed contents"));
  }
  return absl::OkStatus();
}

// "tensor 'name': ", the prefix of a tensor parameter's errors.
std::string TensorContext(const std::string& tensor) {
  return absl::StrCat("tensor '", tensor, "': ");
}

// A non-negative integer parameter no larger than `max` (Triton sends uint64, some clients
// int64); anything else, negative or too large is refused instead of being read as 0 or wrapped.
// `*found` (when given) is false when the parameter is absent, and `*out` is then unchanged.
// `context` prefixes the error ("tensor 'x': ", or empty for a request parameter).
absl::Status UnsignedParam(
    const google::protobuf::Map<std::string, inference::InferParameter>& params, const char* key,
    const std::string& context, uint64_t max, uint64_t* out, bool* found = nullptr) {
  auto it = params.find(key);
  if (found != nullptr) *found = it != params.end();
  if (it == params.end()) return absl::OkStatus();
  const inference::InferParameter& p = it->second;
  bool ok = false;
  uint64_t v = 0;
  if (p.has_uint64_param()) {
    v = p.uint64_param();
    ok = true;
  } else if (p.has_int64_param() && p.int64_param() >= 0) {
    v = static_cast<uint64_t>(p.int64_param());
    ok = true;
  }
  if (!ok || v > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(context, "parameter '", key, "' must be ",
                     max == UINT64_MAX ? std::string("a non-negative integer")
                                       : absl::StrCat("an unsigned integer no larger than ", max)));
  }
  *out = v;
  return absl::OkStatus();
}

// The tensor's shared memory parameters, or nullopt when it has none.
absl::StatusOr<std::optional<SharedMemoryRef>> SharedMemoryParams(
    const google::protobuf::Map<std::string, inference::InferParameter>& params,
    const std::string& tensor) {
  auto it = params.find("shared_memory_region");
  if (it == params.end()) return std::nullopt;
  if (!it->second.has_string_param() || it->second.string_param().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "': parameter 'shared_memory_region' must be a non-empty string"));
  }
  SharedMemoryRef ref;
  ref.region = it->second.string_param();
  bool found = false;
  if (auto s = UnsignedParam(params, "shared_memory_byte_size", TensorContext(tensor), UINT64_MAX,
                             &ref.byte_size, &found);
      !s.ok())
    return s;
  if (!found) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", tensor, "': 'shared_memory_region' needs 'shared_memory_byte_size'"));
  }
  if (auto s = UnsignedParam(params, "shared_memory_offset", TensorContext(tensor), UINT64_MAX,
                             &ref.offset, &found);
      !s.ok())
    return s;
  return ref;
}

}  // namespace

absl::StatusOr<WireRequest> DecodeModelInferRequest(const inference::ModelInferRequest& q,
                                                    const std::vector<RawBytes>* raw_contents) {
  // Raw contents belong, in order, to the inputs not in shared memory.
  std::vector<std::optional<SharedMemoryRef>> shm(q.inputs_size());
  int in_messages = 0;
  for (int i = 0; i < q.inputs_size(); ++i) {
    auto ref = SharedMemoryParams(q.inputs(i).parameters(), q.inputs(i).name());
    if (!ref.ok()) return ref.status();
    shm[i] = *std::move(ref);
    if (!shm[i].has_value()) ++in_messages;
  }
  std::vector<RawBytes> from_message;
  if (raw_contents == nullptr) {
    from_message.reserve(static_cast<size_t>(q.raw_input_contents_size()));
    for (const std::string& bytes : q.raw_input_contents()) {
      from_message.push_back({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
    }
    raw_contents = &from_message;
  }
  const bool raw = !raw_contents->empty();
  if (raw && raw_contents->size() != static_cast<size_t>(in_messages)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expected ", in_messages, " raw_input_contents entries, got ", raw_contents->size()));
  }
  int next_raw = 0;
  // Typed contents are converted into buffers owned with the request.
  auto typed = std::make_shared<std::vector<std::string>>(q.inputs_size());
  WireRequest wire;
  wire.id = q.id();
  for (int i = 0; i < q.inputs_size(); ++i) {
    const auto& in = q.inputs(i);
    WireInput w{in.name(), in.datatype(), {in.shape().begin(), in.shape().end()}, nullptr, 0, {}};
    if (shm[i].has_value()) {
      if (in.has_contents()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name(), "' has both contents and shared memory"));
      }
      w.shared_memory = std::move(shm[i]);
    } else if (raw) {
      if (in.has_contents()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name(), "' has both contents and raw data"));
      }
      const RawBytes& bytes = (*raw_contents)[next_raw++];
      w.data = bytes.data;
      w.byte_size = bytes.size;
    } else {
      auto dtype = DTypeFromKServeName(in.datatype());
      if (!dtype.ok())
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name(), "': ", dtype.status().message()));
      if (auto s = ContentsToBytes(in.contents(), *dtype, in.name(), &(*typed)[i]); !s.ok())
        return s;
      w.data = reinterpret_cast<const uint8_t*>((*typed)[i].data());
      w.byte_size = (*typed)[i].size();
    }
    wire.inputs.push_back(std::move(w));
  }
  for (const auto& out : q.outputs()) {
    wire.requested_outputs.push_back(out.name());
    auto ref = SharedMemoryParams(out.parameters(), out.name());
    if (!ref.ok()) return ref.status();
    if (ref->has_value()) wire.shared_memory_outputs.push_back({out.name(), **std::move(ref)});
  }
  // As over HTTP.
  uint64_t priority = 0;
  if (auto s = UnsignedParam(q.parameters(), "priority", "", UINT32_MAX, &priority); !s.ok())
    return s;
  wire.priority = static_cast<uint32_t>(priority);
  if (auto s = UnsignedParam(q.parameters(), "timeout", "", INT64_MAX, &wire.timeout_us); !s.ok())
    return s;
  // Sequence batching, as Triton's clients send it: sequence_id as an int64, uint64 or string
  // parameter; sequence_start and sequence_end as bools.
  if (auto it = q.parameters().find("sequence_id"); it != q.parameters().end()) {
    WireSequence& seq = wire.sequence;
    seq.present = true;
    if (it->second.has_string_param()) {
      seq.string_id = it->second.string_param();
    } else if (auto s = UnsignedParam(q.parameters(), "sequence_id", "", UINT64_MAX, &seq.id);
               !s.ok()) {
      return absl::InvalidArgumentError(
          "parameter 'sequence_id' must be a non-negative integer or a string");
    }
  }
  for (auto [key, flag] : {std::pair<const char*, bool*>{"sequence_start", &wire.sequence.start},
                           {"sequence_end", &wire.sequence.end}}) {
    auto it = q.parameters().find(key);
    if (it == q.parameters().end()) continue;
    if (!it->second.has_bool_param()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", key, "' must be a bool"));
    }
    *flag = it->second.bool_param();
  }
  if (auto s = UnsignedParam(q.parameters(), "sequence_step", "", UINT64_MAX, &wire.sequence.step);
      !s.ok())
    return s;
  wire.holder = typed;
  return wire;
}

}  // namespace cuvil
