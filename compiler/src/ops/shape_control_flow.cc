// Shape inference for the control-flow ops If, Loop and Scan (opset 9+ Scan).
//
// Each subgraph (imported by subgraph_import.cc; its inputs are its formal ONNX inputs followed by
// the node's captured outer values) gets its input types from the node and is then optimised like
// a model of its own, so code generation sees typed, canonical subgraphs. Shapes must be fixed:
// If's branches agree, loop-carried and scan state values keep their shape across iterations,
// and a Loop's scan outputs need a trip count known at compile time and a condition that cannot
// stop the loop early (their leading dim is the trip count). Anything else is refused with
// Unimplemented naming the value.
//
// Canonical form for code generation: an opset-8 Scan is rewritten to opset 9's attributes on
// one batch item (kScanBatchedAttr set; see ScanBatched). Scan's scan_input_axes / scan_output_axes
// / scan_input_directions / scan_output_directions are full-length and the axes non-negative.
#include <memory>

#include "cuvil/compiler/compiler.h"
#include "infer_context.h"
#include "subgraph_import.h"

namespace cuvil::ir {
namespace {

bool SameType(const TensorType& a, const TensorType& b) {
  return a.dtype == b.dtype && a.shape == b.shape;
}

absl::StatusOr<Graph*> Subgraph(InferContext& ctx, const char* key) {
  auto it = ctx.node().attrs.find(key);
  if (it != ctx.node().attrs.end()) {
    if (auto* g = std::get_if<std::shared_ptr<Graph>>(&it->second); g != nullptr && *g) {
      return g->get();
    }
  }
  return ctx.Error(absl::StrCat("missing graph attribute '", key, "'"));
}

int64_t ExplicitInputs(InferContext& ctx) {
  return ctx.node().attr_int(kExplicitInputsAttr, static_cast<int64_t>(ctx.num_inputs()));
}

// Types `sub`'s inputs (`formal`, then the node's captured values) and optimises it.
absl::Status PrepareSubgraph(InferContext& ctx, Graph& sub, const char* key,
                             const std::vector<TensorType>& formal, bool is_if_branch = false) {
  int64_t explicit_inputs = ExplicitInputs(ctx);
  size_t captures = ctx.num_inputs() - static_cast<size_t>(explicit_inputs);
  if (sub.inputs.size() != formal.size() + captures) {
    return ctx.Error(absl::StrCat("subgraph '", key, "' has ", sub.inputs.size() - captures,
                                  " inputs, the op gives it ", formal.size()));
  }
  for (size_t i = 0; i < formal.size(); ++i) {
    sub.inputs[i]->type = formal[i];
    sub.inputs[i]->type.shape_known = true;
  }
  for (size_t j = 0; j < captures; ++j) {
    const Value* outer = ctx.input(explicit_inputs + j);
    Value* v = sub.inputs[formal.size() + j];
    v->type = outer->type;
    // Known values fold shape arithmetic; the constant itself stays outside (read at run time).
    v->known = outer->known;
  }
  sub.symbol = ctx.graph().symbol;
  sub.symbols = ctx.graph().symbols;
  sub.data_dependent = ctx.graph().data_dependent;
  sub.allow_assumptions = false;
  sub.allow_data_dependent = is_if_branch && ctx.graph().allow_data_dependent;
  if (auto s = cuvil::OptimizeGraph(sub); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat(ctx.node().Describe(), ": in subgraph '", key, "': ", s.message()));
  }
  // Symbols the body's data decides take the ids after the parent's: the parent keeps their
  // slots (and upper bounds), so the next body's start after them.
  Graph& parent = ctx.graph();
  for (size_t i = parent.symbols.size(); i < sub.symbols.size(); ++i) {
    parent.symbols.push_back(sub.symbols[i]);
  }
  for (size_t i = parent.data_dependent.size(); i < sub.data_dependent.size(); ++i) {
    parent.data_dependent.push_back(sub.data_dependent[i]);
  }
  return absl::OkStatus();
}

TensorType Scalar(DType dtype) {
  TensorType t;
  t.dtype = dtype;
  t.shape_known = true;
  return t;
}

bool AllTrue(const std::optional<std::vector<SymDim>>& known) {
  if (!known.has_value() || known->empty()) return false;
  for (const SymDim& d : *known) {
    if (!d.IsStatic() || d.coef() == 0) return false;
  }
  return true;
}

absl::Status If(InferContext& ctx) {
  if (ExplicitInputs(ctx) != 1 || !ctx.has_input(0)) return ctx.Error("expects one cond input");
  if (SymNumElements(ctx.in_shape(0)) != SymDim::Const(1)) {
    return ctx.Error("cond must hold exactly one element");
  }
  auto then_g = Subgraph(ctx, "then_branch");
  if (!then_g.ok()) return then_g.status();
  auto else_g = Subgraph(ctx, "else_branch");
  if (!else_g.ok()) return else_g.status();
  if (auto s = PrepareSubgraph(ctx, **then_g, "then_branch", {}, true); !s.ok()) return s;
  if (auto s = PrepareSubgraph(ctx, **else_g, "else_branch", {}, true); !s.ok()) return s;
  const Graph& t = **then_g;
  const Graph& e = **else_g;
  if (t.outputs.size() != e.outputs.size() || ctx.num_outputs() > t.outputs.size()) {
    return ctx.Error(absl::StrCat("the branches have ", t.outputs.size(), " and ", e.outputs.size(),
                                  " outputs, the node ", ctx.num_outputs()));
  }
  const std::string& sym = ctx.graph().symbol;
  // Dims that differ between the branches (SSD's empty then-branch beside NonMaxSuppression's
  // data-dependent count): a data-dependent symbol each, bounded by the larger branch's bound,
  // which the kernel sets from the branch that ran. Attribute kIfDataDependentDims lists them
  // as (output, dim, symbol id) triples.
  std::vector<int64_t> decided;
  for (size_t i = 0; i < ctx.num_outputs(); ++i) {
    const TensorType& a = t.outputs[i]->type;
    const TensorType& b = e.outputs[i]->type;
    if (SameType(a, b)) {
      ctx.SetOutput(i, a.dtype, a.shape);
      continue;
    }
    if (a.dtype != b.dtype || a.shape.size() != b.shape.size() || !a.shape_known ||
        !b.shape_known || !ctx.graph().allow_data_dependent) {
      return absl::UnimplementedError(absl::StrCat(
          ctx.node().Describe(), ": output ", i, " differs between the branches (then ",
          a.ToString(sym), ", else ", b.ToString(sym),
          "); branches producing different types or ranks are not supported"));
    }
    SymShape shape = a.shape;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (a.shape[d] == b.shape[d]) continue;
      auto ta = t.UpperBound(a.shape[d]);
      auto eb = e.UpperBound(b.shape[d]);
      if (!ta || !eb) return ctx.Error("the upper bound of an output size is too large");
      auto bound = DimMax(ta->expr(), eb->expr());
      if (!bound) return ctx.Error("the upper bound of an output size is too large");
      auto decided_dim = ctx.DataDependentDim(absl::StrCat("out", i, "_", d), SymDim(*bound));
      if (!decided_dim.ok()) return decided_dim.status();
      shape[d] = *decided_dim;
      decided.push_back(static_cast<int64_t>(i));
      decided.push_back(static_cast<int64_t>(d));
      decided.push_back(static_cast<int64_t>(*decided_dim->expr().Symbols().begin()));
    }
    ctx.SetOutput(i, a.dtype, shape);
  }
  if (decided.empty()) {
    ctx.node().attrs.erase(kIfDataDependentDims);
  } else {
    ctx.node().attrs[kIfDataDependentDims] = decided;
  }
  return absl::OkStatus();
}

absl::Status Loop(InferContext& ctx) {
  int64_t explicit_inputs = ExplicitInputs(ctx);
  if (explicit_inputs < 2)
    return ctx.Error("expects the inputs M, cond and the loop-carried values");
  size_t n = static_cast<size_t>(explicit_inputs) - 2;
  auto body = Subgraph(ctx, "body");
  if (!body.ok()) return body.status();
  std::vector<TensorType> formal = {Scalar(DType::kInt64), Scalar(DType::kBool)};
  for (size_t j = 0; j < n; ++j) {
    if (!ctx.has_input(2 + j))
      return ctx.Error(absl::StrCat("loop-carried input ", j, " is missing"));
    formal.push_back(ctx.in_type(2 + j));
  }
  for (size_t i : {size_t{0}, size_t{1}}) {
    if (ctx.has_input(i) && SymNumElements(ctx.in_shape(i)) != SymDim::Const(1)) {
      return ctx.Error(absl::StrCat(i == 0 ? "M" : "cond", " must hold exactly one element"));
    }
  }
  if (auto s = PrepareSubgraph(ctx, **body, "body", formal); !s.ok()) return s;
  const Graph& g = **body;
  if (g.outputs.size() < 1 + n) {
    return ctx.Error(
        absl::StrCat("the body has ", g.outputs.size(), " outputs, expected at least ", 1 + n));
  }
  size_t k = g.outputs.size() - 1 - n;
  if (ctx.num_outputs() > n + k) {
    return ctx.Error(absl::StrCat("has ", ctx.num_outputs(), " outputs, the body gives ", n + k));
  }
  const TensorType& cond_out = g.outputs[0]->type;
  if (cond_out.dtype != DType::kBool || SymNumElements(cond_out.shape) != SymDim::Const(1)) {
    return ctx.Error("the body's condition output must be one bool");
  }
  const std::string& sym = ctx.graph().symbol;
  for (size_t j = 0; j < n; ++j) {
    const TensorType& out = g.outputs[1 + j]->type;
    if (!SameType(out, formal[2 + j])) {
      return absl::UnimplementedError(absl::StrCat(
          ctx.node().Describe(), ": loop-carried value ", j, " ('", g.output_names[1 + j],
          "') changes from ", formal[2 + j].ToString(sym), " to ", out.ToString(sym),
          " across an iteration; only loop-carried values of fixed shape are supported"));
    }
    ctx.SetOutput(j, out.dtype, out.shape);
  }
  if (k == 0) return absl::OkStatus();
  // Scan outputs: the leading dim is the number of iterations, which must be M exactly.
  std::string why;
  SymDim trips;
  if (!ctx.has_input(0)) {
    why = "the Loop has no trip count M";
  } else {
    const Value* m = ctx.input(0);
    if (m->known.has_value() || ctx.CouldBeBound(m)) {
      auto known = ctx.Known(0, "trip count M");  // Asks for a binding when M is a model input.
      if (!known.ok()) return known.status();
      trips = (*known)[0];
      if (trips.IsStatic() && trips.coef() < 0) trips = SymDim::Const(0);
    } else {
      why = "its trip count M is computed at run time";
    }
  }
  if (why.empty() && ctx.has_input(1)) {
    const Value* c = ctx.input(1);
    if (c->is_graph_input && !c->known.has_value()) {
      auto known = ctx.Known(1, "condition");
      if (!known.ok()) return known.status();
    }
    if (!AllTrue(c->known)) why = "its initial condition is not known to be true";
  }
  if (why.empty() && g.outputs[0] != g.inputs[1] && !AllTrue(g.outputs[0]->known)) {
    why = "its body may end it before M iterations";
  }
  if (!why.empty()) {
    return absl::UnimplementedError(absl::StrCat(
        ctx.node().Describe(), ": scan outputs whose length is data-dependent are not supported ",
        "yet (", why, "); they need a constant M and a condition that stays true"));
  }
  for (size_t s = 0; s < k; ++s) {
    const TensorType& out = g.outputs[1 + n + s]->type;
    SymShape shape = {trips};
    shape.insert(shape.end(), out.shape.begin(), out.shape.end());
    ctx.SetOutput(n + s, out.dtype, shape);
  }
  return absl::OkStatus();
}

// Opset 8 Scan: input 0 is sequence_lens, every state and scan input has a leading batch dim and
// scan inputs scan axis 1. Canonicalised to the opset 9 attributes on one batch item plus
// kScanBatchedAttr; sequence_lens (rows of different lengths) is refused.
absl::Status ScanBatched(InferContext& ctx) {
  int64_t explicit_inputs = ExplicitInputs(ctx);
  int64_t m = ctx.node().attr_int("num_scan_inputs", -1);
  if (m < 1 || m > explicit_inputs - 1) {
    return ctx.Error("num_scan_inputs is missing or out of range");
  }
  if (ctx.has_input(0)) {
    return absl::UnimplementedError(
        absl::StrCat(ctx.node().Describe(), ": opset-8 Scan with sequence_lens is not supported"));
  }
  size_t n = static_cast<size_t>(explicit_inputs - 1 - m);
  auto body = Subgraph(ctx, "body");
  if (!body.ok()) return body.status();
  std::vector<int64_t> dirs = ctx.node().attr_ints("directions", std::vector<int64_t>(m, 0));
  if (dirs.size() != static_cast<size_t>(m)) {
    return ctx.Error("directions needs one entry per scan input");
  }
  std::optional<SymDim> batch, length;
  std::vector<TensorType> formal;
  for (size_t i = 1; i < static_cast<size_t>(explicit_inputs); ++i) {
    bool scanned = i > n;
    if (!ctx.has_input(i) || ctx.in_rank(i) < (scanned ? 2 : 1)) {
      return ctx.Error(absl::StrCat("input ", i, " is missing or lacks the batch/sequence axes"));
    }
    TensorType item = ctx.in_type(i);
    if (batch.has_value() && *batch != item.shape[0]) return ctx.Error("inputs differ in batch");
    batch = item.shape[0];
    item.shape.erase(item.shape.begin());
    if (scanned) {
      if (length.has_value() && *length != item.shape[0]) {
        return ctx.Error("the scan inputs differ in their sequence length");
      }
      length = item.shape[0];
      item.shape.erase(item.shape.begin());
    }
    formal.push_back(item);
  }
  if (auto s = PrepareSubgraph(ctx, **body, "body", formal); !s.ok()) return s;
  const Graph& g = **body;
  if (g.outputs.size() < n) return ctx.Error("the body has fewer outputs than there are states");
  size_t k = g.outputs.size() - n;
  if (ctx.num_outputs() > n + k) return ctx.Error("has more outputs than the body");
  const std::string& sym = ctx.graph().symbol;
  for (size_t j = 0; j < n + k; ++j) {
    const TensorType& out = g.outputs[j]->type;
    if (j < n && !SameType(out, formal[j])) {
      return absl::UnimplementedError(
          absl::StrCat(ctx.node().Describe(), ": state ", j, " ('", g.output_names[j],
                       "') changes from ", formal[j].ToString(sym), " to ", out.ToString(sym),
                       " across an iteration; only states of fixed shape are supported"));
    }
    SymShape shape = {*batch};
    if (j >= n) shape.push_back(*length);
    shape.insert(shape.end(), out.shape.begin(), out.shape.end());
    ctx.SetOutput(j, out.dtype, shape);
  }
  ctx.node().attrs[kScanBatchedAttr] = int64_t{1};
  ctx.node().attrs["scan_input_axes"] = std::vector<int64_t>(m, 0);
  ctx.node().attrs["scan_input_directions"] = dirs;
  ctx.node().attrs["scan_output_axes"] = std::vector<int64_t>(k, 0);
  ctx.node().attrs["scan_output_directions"] = std::vector<int64_t>(k, 0);
  return absl::OkStatus();
}

absl::Status Scan(InferContext& ctx) {
  if (ctx.node().opset < 9) return ScanBatched(ctx);
  int64_t explicit_inputs = ExplicitInputs(ctx);
  int64_t m = ctx.node().attr_int("num_scan_inputs", -1);
  if (m < 1 || m > explicit_inputs) return ctx.Error("num_scan_inputs is missing or out of range");
  size_t n = static_cast<size_t>(explicit_inputs - m);
  auto body = Subgraph(ctx, "body");
  if (!body.ok()) return body.status();
  std::vector<int64_t> in_axes =
      ctx.node().attr_ints("scan_input_axes", std::vector<int64_t>(m, 0));
  std::vector<int64_t> in_dirs =
      ctx.node().attr_ints("scan_input_directions", std::vector<int64_t>(m, 0));
  if (in_axes.size() != static_cast<size_t>(m) || in_dirs.size() != static_cast<size_t>(m)) {
    return ctx.Error("scan_input_axes / scan_input_directions need one entry per scan input");
  }
  std::vector<TensorType> formal;
  for (size_t j = 0; j < n; ++j) {
    if (!ctx.has_input(j)) return ctx.Error(absl::StrCat("state input ", j, " is missing"));
    formal.push_back(ctx.in_type(j));
  }
  std::optional<SymDim> length;
  for (int64_t s = 0; s < m; ++s) {
    size_t i = n + s;
    if (!ctx.has_input(i)) return ctx.Error(absl::StrCat("scan input ", s, " is missing"));
    auto axis = ctx.Axis(in_axes[s], ctx.in_rank(i));
    if (!axis.ok()) return axis.status();
    in_axes[s] = *axis;
    SymDim len = ctx.in_shape(i)[*axis];
    if (length.has_value() && *length != len) {
      return ctx.Error("the scan inputs differ in their sequence length");
    }
    length = len;
    TensorType slice = ctx.in_type(i);
    slice.shape.erase(slice.shape.begin() + *axis);
    formal.push_back(slice);
  }
  if (auto s = PrepareSubgraph(ctx, **body, "body", formal); !s.ok()) return s;
  const Graph& g = **body;
  if (g.outputs.size() < n) return ctx.Error("the body has fewer outputs than there are states");
  size_t k = g.outputs.size() - n;
  if (ctx.num_outputs() > n + k) return ctx.Error("has more outputs than the body");
  std::vector<int64_t> out_axes =
      ctx.node().attr_ints("scan_output_axes", std::vector<int64_t>(k, 0));
  std::vector<int64_t> out_dirs =
      ctx.node().attr_ints("scan_output_directions", std::vector<int64_t>(k, 0));
  if (out_axes.size() != k || out_dirs.size() != k) {
    return ctx.Error("scan_output_axes / scan_output_directions need one entry per scan output");
  }
  const std::string& sym = ctx.graph().symbol;
  for (size_t j = 0; j < n; ++j) {
    const TensorType& out = g.outputs[j]->type;
    if (!SameType(out, formal[j])) {
      return absl::UnimplementedError(
          absl::StrCat(ctx.node().Describe(), ": state ", j, " ('", g.output_names[j],
                       "') changes from ", formal[j].ToString(sym), " to ", out.ToString(sym),
                       " across an iteration; only states of fixed shape are supported"));
    }
    ctx.SetOutput(j, out.dtype, out.shape);
  }
  for (size_t s = 0; s < k; ++s) {
    const TensorType& out = g.outputs[n + s]->type;
    auto axis = ctx.Axis(out_axes[s], out.rank() + 1);
    if (!axis.ok()) return axis.status();
    out_axes[s] = *axis;
    SymShape shape = out.shape;
    shape.insert(shape.begin() + *axis, *length);
    ctx.SetOutput(n + s, out.dtype, shape);
  }
  ctx.node().attrs["scan_input_axes"] = in_axes;
  ctx.node().attrs["scan_input_directions"] = in_dirs;
  ctx.node().attrs["scan_output_axes"] = out_axes;
  ctx.node().attrs["scan_output_directions"] = out_dirs;
  return absl::OkStatus();
}

}  // namespace

void RegisterControlFlowShapes(OpTable& r) {
  r.DefineShape("If", If).Batch(BatchClass::kMixes);
  r.DefineShape("Loop", Loop).Batch(BatchClass::kMixes);
  r.DefineShape("Scan", Scan).Batch(BatchClass::kMixes);
}

}  // namespace cuvil::ir
