#include "pass_pipeline.h"

#include <chrono>
#include <map>
#include <set>
#include <unordered_set>
#include <utility>
#include <variant>

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

// Bodies nested deeper than this are refused rather than recursed into. A parsed model nests at
// most ~33 (protobuf's parser stops at 100 nested messages, three per body level); this bounds
// the verifier's stack on a graph built some other way.
constexpr int kMaxBodyDepth = 64;

// VerifyGraph over `graph`, a body at nesting `depth` reached through `where` ("" for the
// top-level graph, else "in body 'then_branch' of If 'x': ").
absl::Status VerifyScope(const ir::Graph& graph, bool shapes_known, const std::string& after,
                         const std::string& where, int depth) {
  auto fail = [&](const std::string& what) {
    return absl::FailedPreconditionError(
        absl::StrCat("the graph is malformed after pass '", after, "': ", where, what));
  };
  if (depth > kMaxBodyDepth) return fail("If/Loop/Scan bodies are nested too deeply");
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
    for (const auto& [name, value] : node->attrs) {
      if (!KnownAttribute(*node, name)) {
        return fail(absl::StrCat(node->Describe(), " carries attribute '", name,
                                 "', neither an ONNX attribute of ", node->op_type,
                                 " nor an internal one (internal_attrs.h, attr::kAll)"));
      }
      // An If/Loop/Scan body: the same rules inside it, and one graph input for each value the
      // node captures (subgraph_import.h: captures follow the node's ONNX inputs).
      const auto* body = std::get_if<std::shared_ptr<ir::Graph>>(&value);
      if (body == nullptr) continue;
      if (*body == nullptr)
        return fail(absl::StrCat(node->Describe(), "'s body '", name, "' is null"));
      const int64_t explicit_inputs =
          node->attr_int(attr::kExplicitInputs, static_cast<int64_t>(node->inputs.size()));
      const int64_t captures = static_cast<int64_t>(node->inputs.size()) - explicit_inputs;
      if (captures < 0 || static_cast<int64_t>((*body)->inputs.size()) < captures) {
        return fail(absl::StrCat(node->Describe(), " captures ", captures,
                                 " outer values but its body '", name, "' has ",
                                 (*body)->inputs.size(), " inputs"));
      }
      if (auto s = VerifyScope(
              **body, shapes_known, after,
              absl::StrCat(where, "in body '", name, "' of ", node->Describe(), ": "), depth + 1);
          !s.ok()) {
        return s;
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

}  // namespace

absl::Status VerifyGraph(const ir::Graph& graph, bool shapes_known, const std::string& after) {
  return VerifyScope(graph, shapes_known, after, "", 0);
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
