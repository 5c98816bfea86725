#include "input_data.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil::perf {
namespace {

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

template <typename T>
void FillRandom(std::string* data, std::mt19937_64* rng, T lo, T hi) {
  const size_t n = data->size() / sizeof(T);
  for (size_t i = 0; i < n; ++i) {
    T v;
    if constexpr (std::is_floating_point_v<T>) {
      v = std::uniform_real_distribution<T>(lo, hi)(*rng);
    } else {
      v = static_cast<T>(std::uniform_int_distribution<int64_t>(lo, hi)(*rng));
    }
    std::memcpy(data->data() + i * sizeof(T), &v, sizeof(T));
  }
}

absl::Status FillRandomBytes(absl::string_view datatype, std::string* data, std::mt19937_64* rng) {
  if (datatype == "FP32") {
    FillRandom<float>(data, rng, 0.0f, 1.0f);
  } else if (datatype == "FP64") {
    FillRandom<double>(data, rng, 0.0, 1.0);
  } else if (datatype == "BOOL") {
    FillRandom<uint8_t>(data, rng, 0, 1);
  } else if (datatype == "FP16" || datatype == "BF16") {
    // Bit patterns of values in [0, 1): FP16 0x0000-0x3bff, BF16 0x0000-0x3f7f.
    FillRandom<uint16_t>(data, rng, 0, datatype == "FP16" ? 0x3bff : 0x3f7f);
  } else if (datatype == "INT8" || datatype == "UINT8" || datatype == "INT16" ||
             datatype == "UINT16" || datatype == "INT32" || datatype == "UINT32" ||
             datatype == "INT64" || datatype == "UINT64") {
    // Small non-negative values: valid as indices and sizes for most models.
    for (char& c : *data) c = 0;
    const int64_t size = DatatypeSize(datatype);
    for (size_t i = 0; i + size <= data->size(); i += size) {
      (*data)[i] = static_cast<char>(std::uniform_int_distribution<int>(0, 9)(*rng));
    }
  } else {
    return absl::UnimplementedError(absl::StrCat("random data for ", datatype, " inputs"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFromDirectory(const std::string& dir, const InputTensor& in,
                                              int64_t batch, size_t want) {
  std::filesystem::path path = std::filesystem::path(dir) / (in.name + ".bin");
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", path.string(), " for input '", in.name, "'"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string bytes = ss.str();
  if (bytes.size() == want) return bytes;
  // One sample's worth is replicated over the batch.
  if (batch > 1 && bytes.size() * batch == want) {
    std::string out;
    out.reserve(want);
    for (int64_t b = 0; b < batch; ++b) out.append(bytes);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path.string(), " holds ", bytes.size(), " bytes; input '", in.name, "' ",
                   in.datatype, ShapeString(in.shape), " needs ", want,
                   batch > 1 ? absl::StrCat(" (or ", want / batch, " for one sample)") : ""));
}

}  // namespace

int64_t DatatypeSize(absl::string_view t) {
  if (t == "BOOL" || t == "INT8" || t == "UINT8") return 1;
  if (t == "INT16" || t == "UINT16" || t == "FP16" || t == "BF16") return 2;
  if (t == "INT32" || t == "UINT32" || t == "FP32") return 4;
  if (t == "INT64" || t == "UINT64" || t == "FP64") return 8;
  return 0;
}

absl::StatusOr<std::vector<int64_t>> RequestShape(const TensorInfo& input, int64_t max_batch_size,
                                                  int64_t batch) {
  std::vector<int64_t> shape = input.shape;
  bool batched = max_batch_size > 0 || (max_batch_size < 0 && !shape.empty() && shape[0] == -1);
  if (batched) {
    if (shape.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", input.name, "' has no dims but the model batches"));
    }
    if (max_batch_size > 0 && batch > max_batch_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("-b ", batch, " exceeds the model's max_batch_size ", max_batch_size));
    }
    shape[0] = batch;
  } else if (batch != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "-b ", batch, ": the model has no batch dimension (max_batch_size 0); use -b 1"));
  }
  for (size_t d = batched ? 1 : 0; d < shape.size(); ++d) {
    if (shape[d] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", input.name, "' has shape ", ShapeString(input.shape), ": dim ", d,
                       " is variable (-1); cuvil-perf needs every non-batch dim fixed"));
    }
  }
  return shape;
}

absl::StatusOr<std::vector<InputTensor>> BuildInputs(const ModelInfo& model,
                                                     const PerfOptions& options) {
  if (model.inputs.empty()) return absl::InvalidArgumentError("the model reports no inputs");
  std::mt19937_64 rng(options.seed);
  std::vector<InputTensor> out;
  for (const TensorInfo& info : model.inputs) {
    absl::StatusOr<std::vector<int64_t>> shape =
        RequestShape(info, model.max_batch_size, options.batch);
    if (!shape.ok()) return shape.status();
    const int64_t elem = DatatypeSize(info.datatype);
    if (elem == 0) {
      return absl::UnimplementedError(absl::StrCat("input '", info.name, "' has datatype ",
                                                   info.datatype,
                                                   ", which cuvil-perf cannot fill"));
    }
    int64_t count = 1;
    for (int64_t d : *shape) count *= d;
    InputTensor in{info.name, info.datatype, *shape, {}};
    const size_t bytes = static_cast<size_t>(count * elem);
    switch (options.input_data) {
      case InputDataKind::kZero:
        in.data.assign(bytes, '\0');
        break;
      case InputDataKind::kRandom:
        in.data.assign(bytes, '\0');
        if (absl::Status s = FillRandomBytes(info.datatype, &in.data, &rng); !s.ok()) return s;
        break;
      case InputDataKind::kDirectory: {
        absl::StatusOr<std::string> data = ReadFromDirectory(
            options.input_dir, in, model.max_batch_size != 0 ? options.batch : 1, bytes);
        if (!data.ok()) return data.status();
        in.data = std::move(*data);
        break;
      }
    }
    out.push_back(std::move(in));
  }
  return out;
}

}  // namespace cuvil::perf
