#include "pass_pipeline.h"

#include <chrono>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "internal_attrs.h"
#include "onnx/defs/schema.h"
#include "op_table.h"

namespace cuvil {
namespace {

std::string Name(const ir::Value* v) {
  return v->name.empty() ? absl::StrCat("#", v->id) : v->name;
}

// The ONNX domain name of `domain`'s ops ("" for ai.onnx), or nullptr for Cuvil's own (no schema).
const char* OnnxDomainName(OpDomain domain) {
  switch (domain) {
    case OpDomain::kOnnx:
      return "";
    case OpDomain::kTraining:
      return "ai.onnx.preview.training";
    case OpDomain::kMicrosoft:
      return "com.microsoft";
    case OpDomain::kInternal:
      return nullptr;
  }
  return nullptr;
}

// The attribute names ONNX's schemas give `op_type` in `domain`, over every opset version (a
// model of an older opset keeps its attributes), or nullptr when ONNX has no schema for it
// (com.microsoft's ops, Cuvil's own). Built once. Thread-safe.
const std::set<std::string>* OnnxAttributes(const std::string& domain, const std::string& op_type) {
  static const auto* const table = [] {
    auto* t = new std::map<std::pair<std::string, std::string>, std::set<std::string>>();
    for (const onnx::OpSchema& schema : onnx::OpSchemaRegistry::get_all_schemas_with_history()) {
      std::set<std::string>& names = (*t)[{schema.domain(), schema.Name()}];
      for (const auto& [name, unused] : schema.attributes()) names.insert(name);
    }
    return t;
  }();
  auto it = table->find({domain == "ai.onnx" ? "" : domain, op_type});
  return it == table->end() ? nullptr : &it->second;
}

// Whether `name` may sit on `node`: one of Cuvil's internal attributes (attr::kAll, or a name
// made from an attr::kAllPrefixes entry), an ONNX attribute of the node's op in its domain, or
// one its row declares (OpDef::attributes).
bool KnownAttribute(const ir::Node& node, const std::string& name) {
  for (const char* internal : attr::kAll) {
    if (name == internal) return true;
  }
  for (const char* prefix : attr::kAllPrefixes) {
    if (name.starts_with(prefix)) return true;
  }
  const OpDef* def = OpTable::Get().Find(node.op_type);
  const char* domain = OnnxDomainName(def == nullptr ? OpDomain::kOnnx : def->domain);
  if (domain != nullptr) {
    if (const std::set<std::string>* onnx = OnnxAttributes(domain, node.op_type)) {
      if (onnx->count(name) != 0) return true;
    }
  }
  if (def != nullptr) {
    for (const std::string& declared : def->attributes) {
      if (name == declared) return true;
    }
  }
  return false;
}

}  // namespace

absl::Status VerifyGraph(const ir::Graph& graph, bool shapes_known, const std::string& after) {
  auto fail = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("the graph is malformed after pass '", after, "': ", what));
  };
  std::unordered_set<const ir::Value*> owned;
  for (const auto& v : graph.values()) owned.insert(v.get());
  std::unordered_set<const ir::Value*> defined, produced;
  for (const ir::Value* in : graph.inputs) {
    if (in == nullptr || owned.count(in) == 0)
      return fail("a graph input is not one of its values");
    defined.insert(in);
  }
  auto usable = [&](const ir::Value* v) { return v->is_constant() || defined.count(v) != 0; };
  auto typed = [&](const ir::Value* v) {
    return v->type.dtype != DType::kUndefined && v->type.shape_known;
  };
  for (const auto& node : graph.nodes()) {
    for (const ir::Value* in : node->inputs) {
      if (in == nullptr) continue;  // an omitted optional input
      if (owned.count(in) == 0) {
        return fail(absl::StrCat(node->Describe(), " reads a value that is not the graph's"));
      }
      if (!usable(in)) {
        return fail(absl::StrCat(node->Describe(), " reads '", Name(in),
                                 "' before any node produces it (not in topological order)"));
      }
      if (shapes_known && !typed(in)) {
        return fail(absl::StrCat(node->Describe(), " reads '", Name(in),
                                 "', whose type or shape is unknown"));
      }
    }
    for (const auto& [name, unused] : node->attrs) {
      if (!KnownAttribute(*node, name)) {
        return fail(absl::StrCat(node->Describe(), " carries attribute '", name,
                                 "', neither an ONNX attribute of ", node->op_type,
                                 " nor an internal one (internal_attrs.h, attr::kAll)"));
      }
    }
    for (const ir::Value* out : node->outputs) {
      if (out == nullptr) continue;
      if (owned.count(out) == 0) {
        return fail(absl::StrCat(node->Describe(), " writes a value that is not the graph's"));
      }
      if (out->producer != node.get()) {
        return fail(absl::StrCat("'", Name(out), "', an output of ", node->Describe(),
                                 ", names another producer"));
      }
      if (!produced.insert(out).second || out->is_constant()) {
        return fail(absl::StrCat("'", Name(out), "' is produced twice (", node->Describe(), ")"));
      }
      defined.insert(out);
    }
  }
  for (const ir::Value* out : graph.outputs) {
    if (out == nullptr || owned.count(out) == 0)
      return fail("a graph output is not one of its values");
    if (!usable(out)) return fail(absl::StrCat("graph output '", Name(out), "' is never defined"));
    if (shapes_known && !typed(out)) {
      return fail(absl::StrCat("graph output '", Name(out), "' has no known type and shape"));
    }
  }
  return absl::OkStatus();
}

std::string GraphText(const ir::Graph& graph) {
  const std::string symbol = graph.symbol.empty() ? "batch" : graph.symbol;
  auto value = [&](const ir::Value* v) {
    if (v == nullptr) return std::string("_");
    return absl::StrCat("%", Name(v), v->is_constant() ? "(const)" : "");
  };
  auto typed = [&](const ir::Value* v) {
    return absl::StrCat(value(v), ":", v == nullptr ? "" : v->type.ToString(symbol));
  };
  std::string out =
      absl::StrCat("graph '", graph.name, "' (",
                   absl::StrJoin(graph.inputs, ", ",
                                 [&](std::string* o, const ir::Value* v) { o->append(typed(v)); }),
                   ")\n");
  for (const auto& n : graph.nodes()) {
    absl::StrAppend(&out, "  ",
                    absl::StrJoin(n->outputs, ", ",
                                  [&](std::string* o, const ir::Value* v) { o->append(typed(v)); }),
                    " = ", n->op_type, " '", n->name, "'(",
                    absl::StrJoin(n->inputs, ", ",
                                  [&](std::string* o, const ir::Value* v) { o->append(value(v)); }),
                    ")\n");
  }
  absl::StrAppend(&out, "  return ",
                  absl::StrJoin(graph.outputs, ", ",
                                [&](std::string* o, const ir::Value* v) { o->append(value(v)); }),
                  "\n");
  return out;
}

absl::Status RunGraphPasses(ir::Graph& graph, std::span<const GraphPass> passes,
                            const PassOptions& options, std::vector<PhaseTiming>* timings) {
  for (const GraphPass& pass : passes) {
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = pass.run(graph); !s.ok()) return s;
    if (auto s = VerifyGraph(graph, pass.shapes_known, pass.name); !s.ok()) {
      return absl::InternalError(s.message());
    }
    if (timings != nullptr) {
      timings->push_back(
          {absl::StrCat("pass:", pass.name),
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
               .count()});
    }
    if (options.print_to != nullptr && options.print_after == pass.name) {
      *options.print_to << "; after pass " << pass.name << "\n" << GraphText(graph);
    }
  }
  return absl::OkStatus();
}

}  // namespace cuvil
