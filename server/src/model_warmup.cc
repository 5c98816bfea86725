#include "model_warmup.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "accepted_shapes.h"
#include "cuvil/runtime/tensor_size.h"
#include "cuvil/server/infer_request_builder.h"

namespace cuvil {

absl::StatusOr<std::string> ModelDataFilePath(const std::string& model_dir,
                                              const std::string& folder, const std::string& name,
                                              const std::string& what) {
  namespace fs = std::filesystem;
  if (model_dir.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the model has no folder (inline load)"));
  }
  const fs::path relative(name);
  if (name.empty() || relative.is_absolute() || name.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a relative path"));
  }
  for (const fs::path& part : relative) {
    if (part == "..") {
      return absl::InvalidArgumentError(absl::StrCat(what, " must not contain \"..\""));
    }
  }
  std::error_code ec;
  const fs::path root = fs::weakly_canonical(fs::path(model_dir) / folder, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(what, ": ", ec.message()));
  const fs::path resolved = fs::weakly_canonical(root / relative, ec);
  if (ec) return absl::InvalidArgumentError(absl::StrCat(what, ": ", ec.message()));
  auto [r, _] = std::mismatch(root.begin(), root.end(), resolved.begin(), resolved.end());
  if (r != root.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " resolves outside the model's ", folder, " folder"));
  }
  return resolved.string();
}

namespace {

// The file a warm-up `input_data_file` names, which must lie inside `<model_dir>/warmup/` (Triton's
// place for it).
absl::StatusOr<std::string> WarmupFilePath(const std::string& model_dir, const std::string& name) {
  return ModelDataFilePath(model_dir, "warmup", name,
                           absl::StrCat("warmup input_data_file \"", name, "\""));
}

// Fills `t` for a warmup input as the config asks (zero data by default).
absl::Status FillWarmupInput(const inference::ModelWarmup::Input& spec,
                             const std::string& model_dir, HostTensor* t) {
  if (spec.has_random_data() && spec.random_data()) {
    std::mt19937 rng(42);
    for (size_t i = 0; i < t->byte_size(); ++i) t->data()[i] = static_cast<uint8_t>(rng() & 0x3f);
    if (t->dtype() == DType::kFloat32) {
      std::uniform_real_distribution<float> dist(-1, 1);
      for (int64_t i = 0; i < t->num_elements(); ++i) t->data_as<float>()[i] = dist(rng);
    }
  } else if (spec.has_input_data_file()) {
    auto confined = WarmupFilePath(model_dir, spec.input_data_file());
    if (!confined.ok()) return confined.status();
    const std::string& path = *confined;
    std::ifstream f(path, std::ios::binary);
    if (!f)
      return absl::InvalidArgumentError(absl::StrCat("warmup data file ", path, " not found"));
    f.read(reinterpret_cast<char*>(t->data()), static_cast<std::streamsize>(t->byte_size()));
    if (f.gcount() != static_cast<std::streamsize>(t->byte_size())) {
      return absl::InvalidArgumentError(absl::StrCat("warmup data file ", path, " is too short"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RunWarmup(ModelVersion& model, const inference::ModelWarmup* warmup,
                       const std::string& model_dir, uint64_t max_request_bytes) {
  const auto& specs = model.executable().inputs();
  int64_t batch = 1;
  if (warmup != nullptr && warmup->batch_size() > 0) batch = warmup->batch_size();
  bool batched = model.config().max_batch_size() > 0;
  auto tensors = std::make_shared<std::vector<HostTensor>>();
  WireRequest wire;
  wire.id = "warmup";
  const CompiledModel& compiled = model.loaded().model();
  // The free dims beyond the batch at the smallest of a few sizes the model accepts (a 2x2 pool
  // beside an upsample refuses 1x1; a dim declared a multiple of 8 is 8 at 1); all 1 when none
  // fits (the warm-up then reports why).
  const std::vector<int64_t> syms =
      AcceptedSymbols(model.loaded(), batch, {1, 2, 4, 8, 16, 32, 64, 128, 224})
          .value_or(std::vector<int64_t>(compiled.InputSymbolCount(), 1));
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorSpec& spec = specs[i];
    std::vector<int64_t> shape;
    if (batched) shape.push_back(batch);
    const size_t skip = spec.batched && batched ? 1 : 0;
    for (size_t d = 0; d < spec.dims.size(); ++d) {
      int64_t v = spec.dims[d];
      if (v < 0) {
        v = 1;
        if (i < compiled.inputs.size() && d + skip < compiled.inputs[i].shape.size()) {
          std::optional<int64_t> at = compiled.inputs[i].shape[d + skip].Eval(syms);
          if (at.has_value() && *at > 0) v = *at;
        }
      }
      shape.push_back(v);
    }
    // Size first: a fixed input too large to ever arrive in a request must fail the load, not
    // abort the process allocating it.
    constexpr uint64_t kMinWarmupLimitBytes = uint64_t{256} << 20;
    const uint64_t limit = std::max(max_request_bytes, kMinWarmupLimitBytes);
    auto bytes = CheckedTensorBytes(spec.dtype, shape);
    if (!bytes.ok() || *bytes > limit) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", spec.name, "' of shape [", absl::StrJoin(shape, ","), "] ",
          bytes.ok() ? absl::StrCat("needs ", *bytes, " bytes, more than the request limit ", limit)
                     : std::string(bytes.status().message())));
    }
    HostTensor t(spec.dtype, shape);
    if (warmup != nullptr) {
      auto it = warmup->inputs().find(spec.name);
      if (it != warmup->inputs().end()) {
        if (auto s = FillWarmupInput(it->second, model_dir, &t); !s.ok()) return s;
      }
    }
    tensors->push_back(std::move(t));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const HostTensor& t = (*tensors)[i];
    wire.inputs.push_back(
        {specs[i].name, DTypeKServeName(t.dtype()), t.shape(), t.data(), t.byte_size(), {}});
  }
  wire.holder = tensors;
  auto request = BuildInferenceRequest(model, std::move(wire));
  if (!request.ok()) return request.status();
  InferenceResponse response = InferBlocking(model, std::move(*request));
  if (!response.status.ok()) {
    return absl::Status(response.status.code(),
                        absl::StrCat("warmup failed: ", response.status.message()));
  }
  return absl::OkStatus();
}

}  // namespace cuvil
