// Shape inference, constant folding of shape arithmetic, Identity/Dropout removal and dead code
// elimination.
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "constant_fold.h"
#include "cuvil/compiler/compiler.h"
#include "fold_dequantize.h"
#include "fuse_qdq.h"
#include "infer_context.h"
#include "op_table.h"

namespace cuvil {
namespace {

// Largest folded constant: shape-like tensors only, never activations.
constexpr size_t kMaxFoldElements = 64;

HostTensor TensorFromKnown(const ir::TensorType& type, const std::vector<SymDim>& values) {
  std::vector<int64_t> shape;
  for (const SymDim& d : type.shape) shape.push_back(d.coef());
  HostTensor t(type.dtype, shape);
  for (size_t i = 0; i < values.size() && static_cast<int64_t>(i) < t.num_elements(); ++i) {
    t.SetFromInt64(static_cast<int64_t>(i), values[i].coef());
  }
  return t;
}

// A float tensor's rational known values: num / den divided in the tensor's own precision, as
// the Div that produced them rounds (CanFold admits only numerators and denominators exact in it).
HostTensor TensorFromRational(const ir::TensorType& type, const std::vector<SymDim>& nums,
                              int64_t den) {
  std::vector<int64_t> shape;
  for (const SymDim& d : type.shape) shape.push_back(d.coef());
  HostTensor t(type.dtype, shape);
  for (size_t i = 0; i < nums.size() && static_cast<int64_t>(i) < t.num_elements(); ++i) {
    if (type.dtype == DType::kFloat64) {
      t.data_as<double>()[i] = static_cast<double>(nums[i].coef()) / static_cast<double>(den);
    } else {
      t.data_as<float>()[i] = static_cast<float>(nums[i].coef()) / static_cast<float>(den);
    }
  }
  return t;
}

// True when every output of `node` has fully static known values matching its static shape.
bool CanFold(const ir::Node& node) {
  if (node.outputs.empty()) return false;
  for (const ir::Value* out : node.outputs) {
    if (out == nullptr) continue;
    if (!out->known.has_value() || !IsStaticShape(out->type.shape)) return false;
    if (out->known->size() > kMaxFoldElements) return false;
    if (static_cast<int64_t>(out->known->size()) != SymNumElements(out->type.shape).coef())
      return false;
    for (const SymDim& d : *out->known) {
      if (!d.IsStatic()) return false;
    }
    if (IsFloat(out->type.dtype)) {
      // Fold floats only where num / den rounds once in the tensor's precision: numerators and
      // denominator exact in it (24 bits for float32).
      if (out->type.dtype != DType::kFloat32 && out->type.dtype != DType::kFloat64) return false;
      const int64_t limit =
          out->type.dtype == DType::kFloat32 ? int64_t{1} << 24 : int64_t{1} << 53;
      if (out->known_den > limit) return false;
      for (const SymDim& d : *out->known) {
        if (d.coef() > limit || d.coef() < -limit) return false;
      }
    }
  }
  return true;
}

absl::Status InferAndFold(ir::Graph& graph, std::vector<std::string>* needs_binding,
                          bool integer_qdq) {
  const OpTable& table = OpTable::Get();
  std::vector<ir::Node*> folded;
  absl::Status first_binding_error;
  // Weights the QDQ convolution fusion may read as int8: folded after it (FoldQdqWeights).
  const std::unordered_set<const ir::Value*> qdq_weights =
      integer_qdq ? QdqWeightCandidates(graph) : std::unordered_set<const ir::Value*>{};
  for (auto& node_ptr : graph.mutable_nodes()) {
    ir::Node& node = *node_ptr;
    const OpDef* op = table.Find(node.op_type);
    if (op == nullptr) {
      return absl::UnimplementedError(absl::StrCat("unsupported op ", node.Describe(), " (",
                                                   table.WhyMissing(node.op_type), ")"));
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] != nullptr && !node.inputs[i]->type.shape_known) {
        return absl::InvalidArgumentError(absl::StrCat(
            node.Describe(), ": input ", i, " ('", node.inputs[i]->name, "') has unknown shape"));
      }
    }
    if (!op->takes_strings) {
      for (const ir::Value* in : node.inputs) {
        if (in != nullptr && in->type.dtype == DType::kString) {
          return absl::UnimplementedError(absl::StrCat(
              node.Describe(), ": string tensors are not supported by this op (strings reach ",
              "Cast, CastLike, StringNormalizer and the reshaping ops)"));
        }
      }
    }
    ir::InferContext ctx(graph, node, needs_binding);
    absl::Status s = op->infer(ctx);
    if (!s.ok()) {
      // Keep going after a binding request so one pass reports every input to bind.
      if (absl::IsFailedPrecondition(s) && needs_binding != nullptr && !needs_binding->empty()) {
        if (first_binding_error.ok()) first_binding_error = s;
        for (ir::Value* out : node.outputs) {
          if (out != nullptr) out->type.shape_known = false;
        }
        continue;
      }
      return s;
    }
    if (!op->rewrites_to.empty() && node.op_type != op->rewrites_to) {
      return absl::InternalError(absl::StrCat(
          node.Describe(), ": shape function did not rewrite it into ", op->rewrites_to));
    }
    for (ir::Value* out : node.outputs) {
      if (out == nullptr) continue;
      if (!out->type.shape_known) {
        return absl::InternalError(
            absl::StrCat(node.Describe(), ": shape inference left an output untyped"));
      }
      // Every later size computation (memory plan, codegen) relies on this bound.
      if (auto v = ir::ValidateTensorType(
              out->type, absl::StrCat(node.Describe(), ": output '", out->name, "'"),
              graph.symbol.empty() ? "batch" : graph.symbol);
          !v.ok()) {
        return v;
      }
    }
    if (CanFold(node)) {
      for (ir::Value* out : node.outputs) {
        if (out == nullptr) continue;
        graph.MakeConstant(out, out->known_den == 1
                                    ? TensorFromKnown(out->type, *out->known)
                                    : TensorFromRational(out->type, *out->known, out->known_den));
      }
      folded.push_back(&node);
    } else if (TryFoldOnHost(graph, node)) {  // Tiny float arithmetic and casts.
      folded.push_back(&node);
    } else if (!(node.outputs.size() == 1 && qdq_weights.count(node.outputs[0])) &&
               TryFoldDequantize(graph, node)) {  // Quantized weights become float constants.
      folded.push_back(&node);
    }
  }
  if (!first_binding_error.ok()) return first_binding_error;
  graph.EraseNodes(folded);
  return absl::OkStatus();
}

bool IsUsed(const ir::Graph& graph, const ir::Value* v);

// QDQ Convs become integer CuvilQConv nodes; the weight DequantizeLinear nodes InferAndFold kept
// for them are then folded where a float node still reads them.
void FuseQdq(ir::Graph& graph) {
  ExpandQLinearConvs(graph);
  ExpandQLinearMatMuls(graph);
  LowerIntegerProducts(graph);
  FuseQdqConvs(graph);
  std::vector<ir::Node*> folded;
  for (auto& node : graph.mutable_nodes()) {
    if (node->op_type != "DequantizeLinear" || node->outputs.size() != 1) continue;
    if (IsUsed(graph, node->outputs[0]) && TryFoldDequantize(graph, *node)) {
      folded.push_back(node.get());
    }
  }
  graph.EraseNodes(folded);
}

bool IsUsed(const ir::Graph& graph, const ir::Value* v) {
  if (v == nullptr) return false;
  if (v->is_graph_output) return true;
  for (const auto& n : graph.nodes()) {
    for (const ir::Value* in : n->inputs) {
      if (in == v) return true;
    }
  }
  return false;
}

void RemovePassThroughs(ir::Graph& graph) {
  std::vector<ir::Node*> dead;
  for (auto& node : graph.mutable_nodes()) {
    bool pass_through = node->op_type == "Identity";
    if (node->op_type == "Dropout") {
      pass_through = node->outputs.size() < 2 || !IsUsed(graph, node->outputs[1]);
    }
    if (!pass_through || node->inputs.empty() || node->inputs[0] == nullptr) continue;
    ir::Value* out = node->outputs[0];
    graph.ReplaceAllUses(out, node->inputs[0]);
    if (out->is_graph_output) node->inputs[0]->is_graph_output = true;
    dead.push_back(node.get());
  }
  graph.EraseNodes(dead);
}

void EliminateDeadCode(ir::Graph& graph) {
  std::unordered_set<const ir::Value*> live(graph.outputs.begin(), graph.outputs.end());
  std::vector<ir::Node*> dead;
  auto& nodes = graph.mutable_nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    ir::Node* n = nodes[i].get();
    bool needed = false;
    for (const ir::Value* out : n->outputs) needed |= out != nullptr && live.count(out);
    if (!needed) {
      dead.push_back(n);
      continue;
    }
    for (const ir::Value* in : n->inputs) {
      if (in != nullptr) live.insert(in);
    }
  }
  graph.EraseNodes(dead);
}

}  // namespace

absl::Status OptimizeGraph(ir::Graph& graph, std::vector<std::string>* needs_binding,
                           bool integer_qdq) {
  if (auto s = InferAndFold(graph, needs_binding, integer_qdq); !s.ok()) return s;
  if (integer_qdq) FuseQdq(graph);
  RemovePassThroughs(graph);
  EliminateDeadCode(graph);
  return absl::OkStatus();
}

std::vector<std::string> UnsupportedOps(const ir::Graph& graph) {
  std::vector<std::string> out;
  const OpTable& table = OpTable::Get();
  for (const auto& n : graph.nodes()) {
    if (table.Find(n->op_type) == nullptr) out.push_back(n->Describe());
  }
  return out;
}

}  // namespace cuvil
