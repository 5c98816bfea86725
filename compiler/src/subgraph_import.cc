#include "subgraph_import.h"

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "onnx_tensor.h"

namespace cuvil {
namespace {

// Imports one subgraph. Free names resolve through the enclosing scope and become captures.
// Not thread-safe.
class SubgraphImporter {
 public:
  SubgraphImporter(int opset, OuterLookup outer, const AttributeConverter& convert)
      : outer_(std::move(outer)), convert_(convert), graph_(std::make_shared<ir::Graph>()) {
    graph_->opset = opset;
  }

  // Imports `g`: formal inputs, initializers, nodes (recursively) and outputs. The captures are
  // listed in captures() but not yet appended to the graph inputs.
  absl::Status Run(const onnx::GraphProto& g) {
    graph_->name = g.name();
    for (const auto& init : g.initializer()) {
      auto t = TensorFromProto(init, "");
      if (!t.ok()) return t.status();
      graph_->MakeConstant(Define(init.name()), std::move(*t));
    }
    for (const auto& input : g.input()) {
      if (local_.count(input.name())) continue;  // An initializer listed as input (IR < 4).
      // The type may be omitted altogether (function expansions): the op's shape function sets it.
      if (input.has_type() && !input.type().has_tensor_type()) {
        return absl::UnimplementedError(
            absl::StrCat("subgraph input '", input.name(), "' is not a tensor"));
      }
      ir::Value* v = Define(input.name());
      // The dtype may be omitted; the control-flow op's shape function sets the full type.
      auto dtype = DTypeFromOnnx(input.type().tensor_type().elem_type());
      if (dtype.ok()) v->type.dtype = *dtype;
      v->is_graph_input = true;
      graph_->inputs.push_back(v);
    }
    for (const auto& np : g.node()) {
      if (auto s = ImportNode(np); !s.ok()) return s;
    }
    if (g.output_size() == 0) return absl::InvalidArgumentError("a subgraph declares no outputs");
    for (const auto& out : g.output()) {
      ir::Value* v = Lookup(out.name());
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("subgraph output '", out.name(), "' is never produced"));
      }
      v->is_graph_output = true;
      graph_->outputs.push_back(v);
      graph_->output_names.push_back(out.name());
    }
    return absl::OkStatus();
  }

  // The local value of `name`, capturing it from the enclosing scopes on first use.
  ir::Value* Lookup(const std::string& name) {
    if (auto it = local_.find(name); it != local_.end()) return it->second;
    ir::Value* outer = outer_(name);
    if (outer == nullptr) return nullptr;
    ir::Value* v = Define(name);
    v->is_graph_input = true;
    captures_.push_back({outer, v});
    return v;
  }

  std::shared_ptr<ir::Graph> graph() const { return graph_; }
  // (outer value, local value) pairs in order of first use.
  const std::vector<std::pair<ir::Value*, ir::Value*>>& captures() const { return captures_; }

 private:
  ir::Value* Define(const std::string& name) {
    ir::Value* v = graph_->NewValue(name);
    local_[name] = v;
    return v;
  }

  absl::Status ImportNode(const onnx::NodeProto& np) {
    if (!np.domain().empty() && np.domain() != "ai.onnx") {
      return absl::UnimplementedError(absl::StrCat("unsupported op ", np.domain(),
                                                   "::", np.op_type(), " (node '", np.name(),
                                                   "' in a subgraph)"));
    }
    std::string name = np.name().empty()
                           ? absl::StrCat(graph_->name, "/", np.op_type(), "_", counter_)
                           : np.name();
    ++counter_;
    ir::Node* node = graph_->NewNode(np.op_type(), name);
    std::vector<const onnx::AttributeProto*> graphs;
    for (const auto& a : np.attribute()) {
      if (a.type() == onnx::AttributeProto::GRAPH) {
        graphs.push_back(&a);
        continue;
      }
      auto attr = convert_(a);
      if (!attr.ok()) {
        return absl::Status(attr.status().code(),
                            absl::StrCat(node->Describe(), ": ", attr.status().message()));
      }
      node->attrs.emplace(a.name(), std::move(*attr));
    }
    for (const auto& in : np.input()) {
      if (in.empty()) {
        node->inputs.push_back(nullptr);
        continue;
      }
      ir::Value* v = Lookup(in);
      if (v == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat(node->Describe(), ": input '", in, "' is undefined"));
      }
      node->inputs.push_back(v);
    }
    while (!node->inputs.empty() && node->inputs.back() == nullptr) node->inputs.pop_back();
    if (!graphs.empty()) {
      // A nested subgraph's free names are captured by this one first.
      auto s = ImportSubgraphAttributes(
          node, np.input_size(), graphs, [this](const std::string& n) { return Lookup(n); },
          convert_);
      if (!s.ok()) return s;
    }
    for (const auto& out : np.output()) {
      if (out.empty()) {
        node->outputs.push_back(nullptr);
        continue;
      }
      if (local_.count(out)) {
        return absl::InvalidArgumentError(
            absl::StrCat(node->Describe(), ": output '", out, "' is defined twice"));
      }
      ir::Value* v = Define(out);
      v->producer = node;
      node->outputs.push_back(v);
    }
    if (node->op_type == "Constant") {
      // Same forms as the top-level importer accepts; only the tensor form occurs in practice.
      auto it = node->attrs.find("value");
      const HostTensor* t =
          it == node->attrs.end() ? nullptr : std::get_if<HostTensor>(&it->second);
      if (t == nullptr || node->outputs.size() != 1 || node->outputs[0] == nullptr) {
        return absl::UnimplementedError(
            absl::StrCat(node->Describe(),
                         ": only Constant nodes with a 'value' tensor are "
                         "supported in subgraphs"));
      }
      graph_->MakeConstant(node->outputs[0], *t);
      graph_->EraseNodes({node});
    }
    return absl::OkStatus();
  }

  OuterLookup outer_;
  const AttributeConverter& convert_;
  std::shared_ptr<ir::Graph> graph_;
  std::unordered_map<std::string, ir::Value*> local_;
  std::vector<std::pair<ir::Value*, ir::Value*>> captures_;
  int counter_ = 0;
};

}  // namespace

absl::Status ImportSubgraphAttributes(ir::Node* node, int explicit_inputs,
                                      const std::vector<const onnx::AttributeProto*>& graphs,
                                      const OuterLookup& outer, const AttributeConverter& convert) {
  std::vector<std::unique_ptr<SubgraphImporter>> subs;
  for (const onnx::AttributeProto* a : graphs) {
    subs.push_back(std::make_unique<SubgraphImporter>(node->opset, outer, convert));
    if (auto s = subs.back()->Run(a->g()); !s.ok()) {
      return absl::Status(
          s.code(), absl::StrCat(node->Describe(), ": attribute '", a->name(), "': ", s.message()));
    }
  }
  // One capture list for the node, shared by all its subgraphs (each gets every capture).
  std::vector<ir::Value*> captured;
  for (const auto& sub : subs) {
    for (const auto& [outer_value, local] : sub->captures()) {
      if (std::find(captured.begin(), captured.end(), outer_value) == captured.end()) {
        captured.push_back(outer_value);
      }
    }
  }
  for (size_t i = 0; i < subs.size(); ++i) {
    ir::Graph& g = *subs[i]->graph();
    for (ir::Value* outer_value : captured) {
      ir::Value* local = nullptr;
      for (const auto& [o, l] : subs[i]->captures()) {
        if (o == outer_value) local = l;
      }
      if (local == nullptr) {  // Captured by a sibling subgraph only: an unused input here.
        local = g.NewValue(outer_value->name);
        local->is_graph_input = true;
      }
      g.inputs.push_back(local);
    }
    node->attrs[graphs[i]->name()] = subs[i]->graph();
  }
  if (node->inputs.size() < static_cast<size_t>(explicit_inputs)) {
    node->inputs.resize(explicit_inputs, nullptr);
  }
  node->inputs.insert(node->inputs.end(), captured.begin(), captured.end());
  node->attrs[kExplicitInputsAttr] = int64_t{explicit_inputs};
  return absl::OkStatus();
}

}  // namespace cuvil
