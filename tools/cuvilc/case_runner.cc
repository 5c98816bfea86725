#include "case_runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/compiler/tensor_file.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

struct DataSet {
  std::string dir;
  std::vector<HostTensor> inputs;
  std::vector<HostTensor> outputs;
};

absl::StatusOr<std::vector<HostTensor>> ReadNumbered(const std::string& dir,
                                                     const std::string& prefix) {
  std::vector<HostTensor> out;
  for (int k = 0;; ++k) {
    std::string path = absl::StrCat(dir, "/", prefix, "_", k, ".pb");
    if (!fs::exists(path)) break;
    auto t = ReadTensorFile(path);
    if (!t.ok()) return t.status();
    out.push_back(std::move(t->tensor));
  }
  return out;
}

absl::StatusOr<std::vector<DataSet>> ReadDataSets(const std::string& case_dir) {
  std::vector<std::string> dirs;
  for (const auto& e : fs::directory_iterator(case_dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      dirs.push_back(e.path().string());
    }
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<DataSet> sets;
  for (const std::string& d : dirs) {
    DataSet ds{d, {}, {}};
    auto in = ReadNumbered(d, "input");
    if (!in.ok()) return in.status();
    auto out = ReadNumbered(d, "output");
    if (!out.ok()) return out.status();
    ds.inputs = std::move(*in);
    ds.outputs = std::move(*out);
    sets.push_back(std::move(ds));
  }
  if (sets.empty()) return absl::NotFoundError(absl::StrCat("no test_data_set_* in ", case_dir));
  return sets;
}

// ONNX 1.12's node cases store bfloat16 tensors as uint16 (the same bits): read them as bfloat16
// where the model expects bfloat16.
HostTensor AsBFloat16IfBits(const HostTensor& t, DType model_dtype) {
  if (model_dtype != DType::kBFloat16 || t.dtype() != DType::kUInt16) return t;
  HostTensor out(DType::kBFloat16, t.shape());
  std::memcpy(out.data(), t.data(), t.byte_size());
  return out;
}

absl::Status RunDataSet(const LoadedModel& model, const DataSet& ds,
                        const std::vector<size_t>& input_positions, const Tolerance& tol) {
  std::vector<HostTensor> inputs;
  for (size_t pos : input_positions) {
    if (pos >= ds.inputs.size()) return absl::InvalidArgumentError("data set lacks an input");
    size_t i = inputs.size();
    DType want =
        i < model.model().inputs.size() ? model.model().inputs[i].dtype : DType::kUndefined;
    inputs.push_back(AsBFloat16IfBits(ds.inputs[pos], want));
  }
  auto outputs = model.Run(inputs);
  if (!outputs.ok()) return outputs.status();
  if (outputs->size() < ds.outputs.size()) {
    return absl::InternalError(
        absl::StrCat("model produced ", outputs->size(), " outputs, expected ", ds.outputs.size()));
  }
  for (size_t i = 0; i < ds.outputs.size(); ++i) {
    HostTensor want = AsBFloat16IfBits(ds.outputs[i], (*outputs)[i].dtype());
    if (auto s = CompareTensors((*outputs)[i], want, tol); !s.ok()) {
      return absl::InternalError(absl::StrCat(fs::path(ds.dir).filename().string(), " output ",
                                              model.model().outputs[i].name, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::atomic<int> namespace_counter{0};

}  // namespace

absl::Status CompareTensors(const HostTensor& got, const HostTensor& want, const Tolerance& tol) {
  if (got.dtype() != want.dtype()) {
    return absl::InternalError(
        absl::StrCat("dtype ", DTypeName(got.dtype()), ", expected ", DTypeName(want.dtype())));
  }
  if (got.shape() != want.shape()) {
    return absl::InternalError(
        absl::StrCat("shape ", got.TypeString(), ", expected ", want.TypeString()));
  }
  bool exact = !IsFloat(want.dtype());
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    bool ok = exact ? g == w : std::fabs(g - w) <= tol.atol + tol.rtol * std::fabs(w);
    if (!ok) {
      return absl::InternalError(absl::StrCat("element ", i, " is ", g, ", expected ", w));
    }
  }
  return absl::OkStatus();
}

absl::Status RunCase(JitEngine& engine, const std::string& case_dir, const Tolerance& tol) {
  std::string model_path = case_dir + "/model.onnx";
  auto sets = ReadDataSets(case_dir);
  if (!sets.ok()) return sets.status();
  // Model input order: the non-initializer graph inputs, which data files follow.
  ImportOptions probe;
  auto graph = ImportOnnxFile(model_path, probe);
  std::vector<std::string> input_names;
  std::map<std::string, std::vector<int64_t>> first_shapes;
  if (graph.ok()) {
    for (size_t i = 0; i < (*graph)->inputs.size(); ++i) {
      input_names.push_back((*graph)->inputs[i]->name);
      if (i < (*sets)[0].inputs.size())
        first_shapes[input_names.back()] = (*sets)[0].inputs[i].shape();
    }
  } else if (!absl::IsUnimplemented(graph.status()) ||
             graph.status().message().find("symbolic dimension") == std::string::npos) {
    return graph.status();
  }

  CompileOptions options;
  std::vector<std::string> needs_binding;
  options.needs_binding = &needs_binding;
  auto compiled = CompileOnnxFile(model_path, options);
  if (!compiled.ok() &&
      compiled.status().message().find("symbolic dimension") != std::string::npos) {
    // Several free dims: specialise on the first data set's shapes, as ONNX Runtime's overrides do.
    options.import.input_shapes = first_shapes;
    if (first_shapes.empty()) return compiled.status();
    compiled = CompileOnnxFile(model_path, options);
  }
  if (compiled.ok()) {
    auto loaded = engine.Load(absl::StrCat("case/", namespace_counter++), std::move(*compiled));
    if (!loaded.ok()) return loaded.status();
    std::vector<size_t> positions;
    for (size_t i = 0; i < (*loaded)->model().inputs.size(); ++i) positions.push_back(i);
    for (const DataSet& ds : *sets) {
      if (auto s = RunDataSet(**loaded, ds, positions, tol); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (needs_binding.empty()) return compiled.status();

  // Shape operands come from the data: compile per data set with them bound as constants. Binding
  // can uncover further operands (one node reports one at a time), so repeat until none is new.
  for (const DataSet& ds : *sets) {
    std::vector<std::string> to_bind = needs_binding;
    absl::StatusOr<CompiledModel> model = absl::UnknownError("not compiled");
    std::vector<size_t> positions;
    for (int round = 0; round < 8; ++round) {
      CompileOptions bound = options;
      std::vector<std::string> again;
      bound.needs_binding = &again;
      positions.clear();
      for (size_t i = 0; i < input_names.size(); ++i) {
        bool bind = std::find(to_bind.begin(), to_bind.end(), input_names[i]) != to_bind.end();
        if (bind && i < ds.inputs.size()) {
          bound.import.bound_inputs[input_names[i]] = ds.inputs[i];
        } else {
          positions.push_back(i);
        }
      }
      model = CompileOnnxFile(model_path, bound);
      if (model.ok() || again.empty()) break;
      to_bind.insert(to_bind.end(), again.begin(), again.end());
    }
    if (!model.ok()) return model.status();
    auto loaded = engine.Load(absl::StrCat("case/", namespace_counter++), std::move(*model));
    if (!loaded.ok()) return loaded.status();
    if (auto s = RunDataSet(**loaded, ds, positions, tol); !s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace cuvil
