#include "pass_pipeline.h"

#include <chrono>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cuvil {
namespace {

std::string Name(const ir::Value* v) {
  return v->name.empty() ? absl::StrCat("#", v->id) : v->name;
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
