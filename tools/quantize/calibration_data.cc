#include "calibration_data.h"

#include <algorithm>
#include <filesystem>
#include <random>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "cuvil/compiler/tensor_file.h"

namespace cuvil::quantize {
namespace {

namespace fs = std::filesystem;

// Reads DIR/input_0.pb, input_1.pb, ... until one is missing.
absl::StatusOr<std::vector<NamedTensor>> ReadNumberedInputs(const std::string& dir) {
  std::vector<NamedTensor> out;
  for (size_t k = 0;; ++k) {
    std::string path = absl::StrCat(dir, "/input_", k, ".pb");
    if (!fs::exists(path)) break;
    auto t = ReadTensorFile(path);
    if (!t.ok()) return t.status();
    out.push_back(std::move(*t));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<ModelInput>> ModelInputs(const onnx::ModelProto& model) {
  const onnx::GraphProto& g = model.graph();
  std::unordered_set<std::string> initializers;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  std::vector<ModelInput> out;
  for (const auto& in : g.input()) {
    if (initializers.count(in.name()) != 0) continue;
    if (!in.type().has_tensor_type()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name(), "' is not a tensor"));
    }
    const auto& tt = in.type().tensor_type();
    auto dtype = DTypeFromOnnx(tt.elem_type());
    if (!dtype.ok()) return dtype.status();
    ModelInput mi{in.name(), *dtype, {}};
    for (const auto& d : tt.shape().dim())
      mi.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    out.push_back(std::move(mi));
  }
  return out;
}

absl::StatusOr<std::vector<std::vector<HostTensor>>> ReadCalibrationSets(
    const std::string& dir, const std::vector<ModelInput>& inputs) {
  std::vector<std::string> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      dirs.push_back(e.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat("cannot read ", dir, ": ", ec.message()));
  std::sort(dirs.begin(), dirs.end());
  if (dirs.empty() && fs::exists(absl::StrCat(dir, "/input_0.pb"))) dirs.push_back(dir);
  if (dirs.empty()) {
    return absl::NotFoundError(absl::StrCat("no test_data_set_* or input_0.pb in ", dir));
  }
  std::vector<std::vector<HostTensor>> sets;
  for (const std::string& d : dirs) {
    auto files = ReadNumberedInputs(d);
    if (!files.ok()) return files.status();
    bool by_name = !files->empty();
    for (const NamedTensor& f : *files) {
      by_name &= std::any_of(inputs.begin(), inputs.end(),
                             [&](const ModelInput& in) { return in.name == f.name; });
    }
    std::vector<HostTensor> set;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const NamedTensor* found = nullptr;
      if (by_name) {
        for (const NamedTensor& f : *files) {
          if (f.name == inputs[i].name) found = &f;
        }
      } else if (i < files->size()) {
        found = &(*files)[i];
      }
      if (found == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(d, ": no data for input '", inputs[i].name, "'"));
      }
      if (found->tensor.dtype() != inputs[i].dtype) {
        return absl::InvalidArgumentError(
            absl::StrCat(d, ": input '", inputs[i].name, "' is ", DTypeName(found->tensor.dtype()),
                         ", the model takes ", DTypeName(inputs[i].dtype)));
      }
      set.push_back(found->tensor);
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

std::vector<std::vector<HostTensor>> RandomCalibrationSets(int count,
                                                           const std::vector<ModelInput>& inputs,
                                                           uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<HostTensor>> sets;
  for (int s = 0; s < count; ++s) {
    std::vector<HostTensor> set;
    for (const ModelInput& in : inputs) {
      std::vector<int64_t> shape = in.shape;
      for (int64_t& d : shape) d = d < 0 ? 1 : d;
      HostTensor t(in.dtype, shape);
      int64_t lo = 0, hi = 1;
      if (in.dtype == DType::kUInt8) hi = 255;
      if (IsInteger(in.dtype) && in.dtype != DType::kUInt8) {
        lo = IsSigned(in.dtype) ? -128 : 0;
        hi = 127;
      }
      std::uniform_int_distribution<int64_t> uniform(lo, hi);
      for (int64_t i = 0; i < t.num_elements(); ++i) {
        if (in.dtype == DType::kFloat32) {
          t.data_as<float>()[i] = static_cast<float>(normal(rng));
        } else if (in.dtype == DType::kFloat64) {
          t.data_as<double>()[i] = normal(rng);
        } else {
          t.SetFromInt64(i, uniform(rng));
        }
      }
      set.push_back(std::move(t));
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

}  // namespace cuvil::quantize
