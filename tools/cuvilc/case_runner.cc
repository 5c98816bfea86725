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
  std::vector<DataValue> inputs;
  std::vector<DataValue> outputs;
};

// Reads prefix_0.pb, prefix_1.pb, ... as the model declares value k (a tensor when undeclared).
absl::StatusOr<std::vector<DataValue>> ReadNumbered(const std::string& dir,
                                                    const std::string& prefix,
                                                    const std::vector<DeclaredIo>& declared) {
  std::vector<DataValue> out;
  for (size_t k = 0;; ++k) {
    std::string path = absl::StrCat(dir, "/", prefix, "_", k, ".pb");
    if (!fs::exists(path)) break;
    auto v = ReadDataFile(path, k < declared.size() ? declared[k].kind : IoKind::kTensor);
    if (!v.ok()) return v.status();
    if (v->kind == IoKind::kTensor && v->tensors.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": expected one tensor"));
    }
    out.push_back(std::move(*v));
  }
  return out;
}

absl::StatusOr<std::vector<DataSet>> ReadDataSets(const std::string& case_dir,
                                                  const DeclaredModelIo& io) {
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
    auto in = ReadNumbered(d, "input", io.inputs);
    if (!in.ok()) return in.status();
    auto out = ReadNumbered(d, "output", io.outputs);
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
    inputs.push_back(AsBFloat16IfBits(ds.inputs[pos].tensors[0], want));
  }
  auto outputs = model.Run(inputs);
  if (!outputs.ok()) return outputs.status();
  if (outputs->size() < ds.outputs.size()) {
    return absl::InternalError(
        absl::StrCat("model produced ", outputs->size(), " outputs, expected ", ds.outputs.size()));
  }
  for (size_t i = 0; i < ds.outputs.size(); ++i) {
    HostTensor want = AsBFloat16IfBits(ds.outputs[i].tensors[0], (*outputs)[i].dtype());
    if (auto s = CompareTensors((*outputs)[i], want, tol); !s.ok()) {
      return absl::InternalError(absl::StrCat(fs::path(ds.dir).filename().string(), " output ",
                                              model.model().outputs[i].name, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

std::atomic<int> namespace_counter{0};

// Compiles `model_path` for one data set of a model with sequence or optional inputs or outputs
// (their structure comes from the data, so each data set compiles on its own), runs it and
// compares every declared output element by element.
absl::Status RunStructuredDataSet(JitEngine& engine, const std::string& model_path,
                                  const DeclaredModelIo& io, const DataSet& ds,
                                  const Tolerance& tol) {
  if (ds.inputs.size() < io.inputs.size()) {
    return absl::InvalidArgumentError("data set lacks an input");
  }
  if (ds.outputs.size() != io.outputs.size()) {
    return absl::InvalidArgumentError("data set's outputs do not match the model's");
  }
  CompileOptions options;
  options.import.allow_structured_io = true;
  std::vector<OutputLayout> layout;
  options.import.output_layout = &layout;
  for (size_t i = 0; i < io.inputs.size(); ++i) {
    const DataValue& v = ds.inputs[i];
    if (io.inputs[i].kind == IoKind::kTensor) {
      // The data fixes the elements' shapes anyway: fix the tensor inputs' shapes too.
      options.import.input_shapes[io.inputs[i].name] = v.tensors[0].shape();
      continue;
    }
    StructuredInput s;
    s.present = v.present;
    for (const HostTensor& t : v.tensors) s.element_shapes.push_back(t.shape());
    options.import.structured_inputs[io.inputs[i].name] = std::move(s);
  }
  // Positions, trip counts and conditions that decide a structure come from the data: bind them
  // as constants, as shape operands are.
  std::vector<std::string> to_bind;
  absl::StatusOr<CompiledModel> model = absl::UnknownError("not compiled");
  for (int round = 0; round < 8; ++round) {
    CompileOptions bound = options;
    std::vector<std::string> again;
    bound.needs_binding = &again;
    for (size_t i = 0; i < io.inputs.size(); ++i) {
      if (std::find(to_bind.begin(), to_bind.end(), io.inputs[i].name) != to_bind.end()) {
        bound.import.bound_inputs[io.inputs[i].name] = ds.inputs[i].tensors[0];
      }
    }
    model = CompileOnnxFile(model_path, bound);
    if (model.ok()) break;
    bool added = false;
    for (const std::string& name : again) {
      if (std::find(to_bind.begin(), to_bind.end(), name) == to_bind.end()) {
        to_bind.push_back(name);
        added = true;
      }
    }
    if (!added) break;
  }
  if (!model.ok()) return model.status();
  auto loaded = engine.Load(absl::StrCat("case/", namespace_counter++), std::move(*model));
  if (!loaded.ok()) return loaded.status();
  const CompiledModel& compiled = (*loaded)->model();

  std::vector<HostTensor> inputs;
  for (size_t i = 0; i < io.inputs.size(); ++i) {
    if (std::find(to_bind.begin(), to_bind.end(), io.inputs[i].name) != to_bind.end()) continue;
    for (const HostTensor& t : ds.inputs[i].tensors) {
      size_t k = inputs.size();
      DType want = k < compiled.inputs.size() ? compiled.inputs[k].dtype : DType::kUndefined;
      inputs.push_back(AsBFloat16IfBits(t, want));
    }
  }
  if (inputs.size() != compiled.inputs.size()) {
    return absl::InternalError(absl::StrCat("the data gives ", inputs.size(),
                                            " input tensors, the model takes ",
                                            compiled.inputs.size()));
  }
  auto outputs = (*loaded)->Run(inputs);
  if (!outputs.ok()) return outputs.status();
  if (layout.size() != io.outputs.size()) {
    return absl::InternalError("the output layout does not match the declared outputs");
  }
  std::string set = fs::path(ds.dir).filename().string();
  for (size_t j = 0; j < layout.size(); ++j) {
    const OutputLayout& e = layout[j];
    const DataValue& want = ds.outputs[j];
    if (e.present != want.present) {
      return absl::InternalError(absl::StrCat(set, " output ", e.name, ": ",
                                              e.present ? "present" : "empty", ", expected ",
                                              want.present ? "present" : "empty"));
    }
    if (e.count != want.tensors.size() || e.first + e.count > outputs->size()) {
      return absl::InternalError(absl::StrCat(set, " output ", e.name, ": ", e.count,
                                              " tensors, expected ", want.tensors.size()));
    }
    for (size_t k = 0; k < e.count; ++k) {
      const HostTensor& got = (*outputs)[e.first + k];
      HostTensor w = AsBFloat16IfBits(want.tensors[k], got.dtype());
      if (auto s = CompareTensors(got, w, tol); !s.ok()) {
        return absl::InternalError(
            absl::StrCat(set, " output ", e.name,
                         e.kind == IoKind::kTensor ? std::string() : absl::StrCat("[", k, "]"),
                         ": ", s.message()));
      }
    }
  }
  return absl::OkStatus();
}

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
  if (want.dtype() == DType::kString) {
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      if (got.string_at(i) != want.string_at(i)) {
        return absl::InternalError(absl::StrCat("element ", i, " is \"",
                                                std::string(got.string_at(i)), "\", expected \"",
                                                std::string(want.string_at(i)), "\""));
      }
    }
    return absl::OkStatus();
  }
  bool exact = !IsFloat(want.dtype());
  double scale_atol = 0;
  if (!exact && tol.scale_rtol > 0) {
    double scale = 0;
    for (int64_t i = 0; i < want.num_elements(); ++i) {
      const double w = std::fabs(want.GetAsDouble(i));
      if (std::isfinite(w)) scale = std::max(scale, w);
    }
    scale_atol = tol.scale_rtol * scale;
  }
  auto close = [&](double g, double w) {
    if (exact) return g == w;
    const double diff = std::fabs(g - w);
    return diff <= tol.atol + tol.rtol * std::fabs(w) || diff <= scale_atol;
  };
  if (tol.unordered_rows && !want.shape().empty() && want.shape()[0] > 1) {
    // Element i of row r is at r * row + i in both tensors; rows are sorted by their values.
    const int64_t rows = want.shape()[0];
    const int64_t row = want.num_elements() / rows;
    auto sorted_rows = [&](const HostTensor& t) {
      std::vector<int64_t> order(static_cast<size_t>(rows));
      for (int64_t r = 0; r < rows; ++r) order[r] = r;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        for (int64_t i = 0; i < row; ++i) {
          const double x = t.GetAsDouble(a * row + i), y = t.GetAsDouble(b * row + i);
          if (x != y) return x < y;
        }
        return false;
      });
      return order;
    };
    const std::vector<int64_t> g_rows = sorted_rows(got), w_rows = sorted_rows(want);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < row; ++i) {
        const double g = got.GetAsDouble(g_rows[r] * row + i);
        const double w = want.GetAsDouble(w_rows[r] * row + i);
        if (std::isnan(w) && std::isnan(g)) continue;
        if (std::isinf(w) && g == w) continue;
        if (close(g, w)) continue;
        return absl::InternalError(absl::StrCat("sorted row ", r, " (row ", g_rows[r],
                                                " here, row ", w_rows[r], " expected) element ", i,
                                                " is ", g, ", expected ", w));
      }
    }
    return absl::OkStatus();
  }
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    double g = got.GetAsDouble(i), w = want.GetAsDouble(i);
    if (std::isnan(w) && std::isnan(g)) continue;
    if (std::isinf(w) && g == w) continue;
    if (!close(g, w)) {
      return absl::InternalError(absl::StrCat("element ", i, " is ", g, ", expected ", w));
    }
  }
  return absl::OkStatus();
}

absl::Status RunCase(JitEngine& engine, const std::string& case_dir, const Tolerance& tol,
                     const std::map<std::string, int64_t>& dim_multiples) {
  std::string model_path = case_dir + "/model.onnx";
  auto io = ReadDeclaredIo(model_path);
  if (!io.ok()) return io.status();
  auto sets = ReadDataSets(case_dir, *io);
  if (!sets.ok()) return sets.status();
  bool structured = false;
  for (const auto* list : {&io->inputs, &io->outputs}) {
    for (const DeclaredIo& d : *list) structured |= d.kind != IoKind::kTensor;
  }
  if (structured) {
    for (const DataSet& ds : *sets) {
      if (auto s = RunStructuredDataSet(engine, model_path, *io, ds, tol); !s.ok()) return s;
    }
    return absl::OkStatus();
  }
  // Model input order: the non-initializer graph inputs, which data files follow.
  ImportOptions probe;
  auto graph = ImportOnnxFile(model_path, probe);
  std::vector<std::string> input_names;
  std::map<std::string, std::vector<int64_t>> first_shapes;
  if (graph.ok()) {
    for (size_t i = 0; i < (*graph)->inputs.size(); ++i) {
      input_names.push_back((*graph)->inputs[i]->name);
      if (i < (*sets)[0].inputs.size())
        first_shapes[input_names.back()] = (*sets)[0].inputs[i].tensors[0].shape();
    }
  } else if (!absl::IsUnimplemented(graph.status()) ||
             graph.status().message().find("symbolic dimension") == std::string::npos) {
    return graph.status();
  }

  CompileOptions options;
  options.import.dim_multiples = dim_multiples;
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
          bound.import.bound_inputs[input_names[i]] = ds.inputs[i].tensors[0];
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
