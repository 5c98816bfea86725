#include "observed_model.h"

#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"

namespace cuvil::quantize {

absl::StatusOr<std::unique_ptr<ObservedModel>> ObservedModel::Create(
    JitEngine& engine, const onnx::ModelProto& model, const std::vector<std::string>& tensors,
    const std::string& namespace_name) {
  onnx::ModelProto observed = model;
  onnx::GraphProto& g = *observed.mutable_graph();
  std::unordered_set<std::string> initializers, defined;
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  std::unordered_map<std::string, size_t> input_index, output_index;
  for (const auto& in : g.input()) {
    if (initializers.count(in.name()) == 0) input_index.emplace(in.name(), input_index.size());
  }
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) defined.insert(o);
  }
  for (int i = 0; i < g.output_size(); ++i) output_index.emplace(g.output(i).name(), i);

  std::unique_ptr<ObservedModel> m(new ObservedModel());
  m->num_outputs_ = static_cast<size_t>(g.output_size());
  for (const std::string& t : tensors) {
    if (auto it = input_index.find(t); it != input_index.end()) {
      m->sources_.push_back({true, it->second});
      continue;
    }
    if (auto it = output_index.find(t); it != output_index.end()) {
      m->sources_.push_back({false, it->second});
      continue;
    }
    if (defined.count(t) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", t, "' is not defined"));
    }
    size_t k = output_index.size();
    output_index.emplace(t, k);
    onnx::ValueInfoProto* out = g.add_output();
    out->set_name(t);
    out->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
    m->sources_.push_back({false, k});
  }
  std::string bytes;
  if (!observed.SerializeToString(&bytes)) {
    return absl::InternalError("cannot serialize the observed model");
  }
  CompileOptions options;
  // Added outputs carry no shape; the caller's model is checked when it is compiled on its own.
  options.import.run_checker = false;
  auto compiled = CompileOnnxBytes(bytes, options);
  if (!compiled.ok()) return compiled.status();
  auto loaded = engine.Load(namespace_name, std::move(*compiled));
  if (!loaded.ok()) return loaded.status();
  m->loaded_ = std::move(*loaded);
  return m;
}

absl::StatusOr<ObservedModel::Result> ObservedModel::Run(
    const std::vector<HostTensor>& inputs) const {
  auto outputs = loaded_->Run(inputs);
  if (!outputs.ok()) return outputs.status();
  Result r;
  for (const Source& s : sources_) {
    const std::vector<HostTensor>& from = s.from_input ? inputs : *outputs;
    if (s.index >= from.size()) return absl::InternalError("observed tensor index out of range");
    r.observed.push_back(from[s.index]);
  }
  outputs->resize(num_outputs_);
  r.outputs = std::move(*outputs);
  return r;
}

}  // namespace cuvil::quantize
