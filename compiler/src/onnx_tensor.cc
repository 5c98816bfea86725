#include "onnx_tensor.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cuvil/compiler/external_data.h"
#include "cuvil/compiler/tensor_file.h"
#include "onnx/onnx-data_pb.h"

namespace cuvil {
namespace {

constexpr int64_t kMaxTensorBytes = int64_t{1} << 34;  // 16 GiB: beyond this is garbage.

template <typename Src, typename Dst>
void CopyConverted(const Src& src, Dst* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(src.Get(static_cast<int>(i)));
}

// Parses the non-negative decimal integer an external_data entry holds. InvalidArgument naming
// the tensor and the key otherwise (std::stoll would throw and take the loader thread down).
absl::StatusOr<int64_t> ExternalDataInt(const onnx::TensorProto& proto, const std::string& key,
                                        const std::string& value) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < 0) {
    return absl::InvalidArgumentError(absl::StrCat("external data for '", proto.name(), "': ", key,
                                                   " '", value.substr(0, 64),
                                                   "' is not a non-negative 64-bit integer"));
  }
  return v;
}

// Reads a tensor stored in a file next to the model, after checking the file holds it.
absl::StatusOr<HostTensor> ReadExternal(const onnx::TensorProto& proto,
                                        const std::string& model_dir, DType dtype,
                                        const std::vector<int64_t>& shape, int64_t want) {
  std::string location;
  int64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : proto.external_data()) {
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset" || kv.key() == "length") {
      auto v = ExternalDataInt(proto, kv.key(), kv.value());
      if (!v.ok()) return v.status();
      (kv.key() == "offset" ? offset : length) = *v;
    }
  }
  if (location.empty()) return absl::InvalidArgumentError("external data without location");
  if (length >= 0 && length != want) {
    return absl::InvalidArgumentError(absl::StrCat("external data for '", proto.name(), "' has ",
                                                   length, " bytes, shape needs ", want));
  }
  // The same rules as the JIT cache key's hash of the file (cuvil/compiler/external_data.h).
  auto file = OpenExternalDataFile(model_dir, location);
  if (!file.ok()) return file.status();
  const std::string& path = file->path();
  const int64_t file_size = static_cast<int64_t>(file->size());
  int64_t end = 0;
  if (__builtin_add_overflow(offset, want, &end) || end > file_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("external data for '", proto.name(), "': offset ", offset, " + length ", want,
                     " lies beyond the end of ", path, " (", file_size, " bytes)"));
  }
  HostTensor out(dtype, shape);
  if (!file->ReadAt(static_cast<uint64_t>(offset), static_cast<uint64_t>(want), out.data())) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read external data for '", proto.name(), "' from ", path));
  }
  return out;
}

}  // namespace

absl::StatusOr<HostTensor> TensorFromProto(const onnx::TensorProto& proto,
                                           const std::string& model_dir,
                                           const MovedRawData* moved) {
  const uint64_t raw_size = moved != nullptr ? moved->size : proto.raw_data().size();
  auto dtype_or = DTypeFromOnnx(proto.data_type());
  if (!dtype_or.ok()) {
    return absl::UnimplementedError(
        absl::StrCat("tensor '", proto.name(), "': ", dtype_or.status().message()));
  }
  std::vector<int64_t> shape(proto.dims().begin(), proto.dims().end());
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", proto.name(), "' has a negative dim"));
    if (d > 0 && n > kMaxTensorBytes / d)
      return absl::InvalidArgumentError(absl::StrCat("tensor '", proto.name(), "' is too large"));
    n *= d;
  }
  DType dtype = *dtype_or;
  if (dtype == DType::kString) {  // string_data holds each element's bytes.
    if (proto.data_location() == onnx::TensorProto::EXTERNAL || proto.has_raw_data() ||
        proto.string_data_size() != n) {
      return absl::InvalidArgumentError(absl::StrCat("string tensor '", proto.name(), "' holds ",
                                                     proto.string_data_size(),
                                                     " strings, its shape needs ", n));
    }
    return HostTensor::Strings(
        std::move(shape),
        std::vector<std::string>(proto.string_data().begin(), proto.string_data().end()));
  }
  if (n * DTypeSize(dtype) > kMaxTensorBytes) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", proto.name(), "' is too large"));
  }
  // Check that the data is really there before allocating: a small file must not be able to
  // claim a huge tensor and make us allocate (or abort on) gigabytes.
  const int64_t bytes = n * DTypeSize(dtype);
  if (proto.data_location() != onnx::TensorProto::EXTERNAL) {
    int64_t have = -1;
    if (proto.has_raw_data()) {
      have = static_cast<int64_t>(raw_size);
    } else {
      switch (dtype) {
        case DType::kFloat32:
          have = proto.float_data_size();
          break;
        case DType::kFloat64:
          have = proto.double_data_size();
          break;
        case DType::kInt64:
          have = proto.int64_data_size();
          break;
        case DType::kUInt32:
        case DType::kUInt64:
          have = proto.uint64_data_size();
          break;
        default:
          have = proto.int32_data_size();
          break;
      }
      have *= DTypeSize(dtype);
    }
    if (have != bytes) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", proto.name(), "' holds ", have,
                                                     " bytes of data, its shape needs ", bytes));
    }
  }
  if (proto.data_location() == onnx::TensorProto::EXTERNAL) {
    return ReadExternal(proto, model_dir, dtype, shape, bytes);
  }
  if (moved != nullptr && moved->defer && proto.has_raw_data() &&
      raw_size == static_cast<uint64_t>(bytes)) {
    return HostTensor::Deferred(dtype, std::move(shape), moved->bytes);
  }
  HostTensor t(dtype, shape);
  if (proto.has_raw_data()) {
    if (raw_size != t.byte_size()) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", proto.name(), "' has ", raw_size,
                                                     " raw bytes, shape ", t.TypeString(),
                                                     " needs ", t.byte_size()));
    }
    if (moved == nullptr) {
      std::memcpy(t.data(), proto.raw_data().data(), t.byte_size());
    } else if (!moved->bytes->Read(t.data())) {
      return absl::InvalidArgumentError(absl::StrCat("cannot read the raw data of tensor '",
                                                     proto.name(), "' (the model file changed?)"));
    }
    return t;
  }
  auto check = [&](int64_t have) -> absl::Status {
    if (have != n) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", proto.name(), "' has ", have, " elements, shape needs ", n));
    }
    return absl::OkStatus();
  };
  switch (dtype) {
    case DType::kFloat32:
      if (auto s = check(proto.float_data_size()); !s.ok()) return s;
      CopyConverted(proto.float_data(), t.data_as<float>(), n);
      break;
    case DType::kFloat64:
      if (auto s = check(proto.double_data_size()); !s.ok()) return s;
      CopyConverted(proto.double_data(), t.data_as<double>(), n);
      break;
    case DType::kInt64:
      if (auto s = check(proto.int64_data_size()); !s.ok()) return s;
      CopyConverted(proto.int64_data(), t.data_as<int64_t>(), n);
      break;
    case DType::kUInt32:
    case DType::kUInt64:
      if (auto s = check(proto.uint64_data_size()); !s.ok()) return s;
      if (dtype == DType::kUInt32) {
        CopyConverted(proto.uint64_data(), t.data_as<uint32_t>(), n);
      } else {
        CopyConverted(proto.uint64_data(), t.data_as<uint64_t>(), n);
      }
      break;
    case DType::kFloat16:
    case DType::kBFloat16:  // int32_data holds each value's 16 bits.
      if (auto s = check(proto.int32_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) {
        t.data_as<uint16_t>()[i] = static_cast<uint16_t>(proto.int32_data(static_cast<int>(i)));
      }
      break;
    default:  // int32, int16, int8, uint16, uint8, bool live in int32_data.
      if (auto s = check(proto.int32_data_size()); !s.ok()) return s;
      for (int64_t i = 0; i < n; ++i) t.SetFromInt64(i, proto.int32_data(static_cast<int>(i)));
  }
  return t;
}

void TensorToProto(const HostTensor& tensor, onnx::TensorProto* proto) {
  proto->set_data_type(static_cast<int32_t>(tensor.dtype()));
  for (int64_t d : tensor.shape()) proto->add_dims(d);
  if (tensor.dtype() == DType::kString) {
    for (int64_t i = 0; i < tensor.num_elements(); ++i) {
      proto->add_string_data(std::string(tensor.string_at(i)));
    }
    return;
  }
  proto->set_raw_data(tensor.data(), tensor.byte_size());
}

absl::StatusOr<NamedTensor> ReadTensorFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  onnx::TensorProto proto;
  if (!proto.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a serialized TensorProto"));
  }
  auto t = TensorFromProto(proto, "");
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
  return NamedTensor{proto.name(), std::move(*t)};
}

namespace {

absl::StatusOr<std::vector<HostTensor>> SequenceTensors(const onnx::SequenceProto& seq,
                                                        const std::string& path) {
  if (seq.elem_type() != onnx::SequenceProto::TENSOR && seq.tensor_values_size() == 0 &&
      seq.elem_type() != onnx::SequenceProto::UNDEFINED) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": a sequence of non-tensors"));
  }
  std::vector<HostTensor> out;
  for (const auto& tp : seq.tensor_values()) {
    auto t = TensorFromProto(tp, "");
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace

absl::StatusOr<DataValue> ReadDataFile(const std::string& path, IoKind kind) {
  DataValue value;
  value.kind = kind;
  if (kind == IoKind::kTensor) {
    auto t = ReadTensorFile(path);
    if (!t.ok()) return t.status();
    value.tensors.push_back(std::move(t->tensor));
    return value;
  }
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (kind == IoKind::kSequence) {
    onnx::SequenceProto seq;
    if (!seq.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a serialized SequenceProto"));
    }
    auto tensors = SequenceTensors(seq, path);
    if (!tensors.ok()) return tensors.status();
    value.tensors = std::move(*tensors);
    return value;
  }
  onnx::OptionalProto opt;
  if (!opt.ParseFromString(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a serialized OptionalProto"));
  }
  if (opt.has_tensor_value()) {
    if (kind != IoKind::kOptionalTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": an optional tensor, expected ", "an optional sequence"));
    }
    auto t = TensorFromProto(opt.tensor_value(), "");
    if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", t.status().message()));
    value.tensors.push_back(std::move(*t));
  } else if (opt.has_sequence_value()) {
    if (kind != IoKind::kOptionalSequence) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": an optional sequence, expected ", "an optional tensor"));
    }
    auto tensors = SequenceTensors(opt.sequence_value(), path);
    if (!tensors.ok()) return tensors.status();
    value.tensors = std::move(*tensors);
  } else if (opt.has_sparse_tensor_value() || opt.has_map_value() || opt.has_optional_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": an optional of an unsupported type (", opt.elem_type(), ")"));
  } else {
    value.present = false;  // No value: an empty optional (elem_type only names its type).
  }
  return value;
}

absl::Status WriteTensorFile(const std::string& path, const std::string& name,
                             const HostTensor& tensor) {
  onnx::TensorProto proto;
  proto.set_name(name);
  TensorToProto(tensor, &proto);
  std::ofstream file(path, std::ios::binary);
  if (!file || !proto.SerializeToOstream(&file)) {
    return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace cuvil
