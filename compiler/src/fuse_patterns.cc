// Pattern fusion (see fuse_patterns.h). Each rewrite turns the last node of a matched chain into
// the fused node (so it keeps its place in the topological order and its output value) and
// erases the other nodes of the chain.
#include "fuse_patterns.h"

#include <cmath>
#include <map>
#include <unordered_set>

#include "internal_attrs.h"

namespace cuvil {
namespace {

// Consumers of every value: one entry per (node, input slot).
using Uses = std::map<const ir::Value*, std::vector<ir::Node*>>;

Uses CollectUses(const ir::Graph& graph) {
  Uses uses;
  for (const auto& n : graph.nodes()) {
    for (const ir::Value* in : n->inputs) {
      if (in != nullptr) uses[in].push_back(n.get());
    }
  }
  return uses;
}

// Use counts and the nodes a pass has consumed. Not thread-safe: one pass at a time.
class Matcher {
 public:
  explicit Matcher(ir::Graph& graph) : graph_(graph), uses_(CollectUses(graph)) {}

  // The one node consuming `v` when `v` has exactly `count` uses, all by that node, and is not a
  // graph output; nullptr otherwise.
  ir::Node* OnlyUser(const ir::Value* v, const std::string& op, size_t count = 1) const {
    if (v == nullptr || v->is_graph_output) return nullptr;
    auto it = uses_.find(v);
    if (it == uses_.end() || it->second.size() != count) return nullptr;
    ir::Node* n = it->second[0];
    for (ir::Node* u : it->second) {
      if (u != n) return nullptr;
    }
    return n->op_type == op && !dead_.count(n) ? n : nullptr;
  }
  size_t NumUses(const ir::Value* v) const {
    auto it = uses_.find(v);
    return it == uses_.end() ? 0 : it->second.size();
  }
  bool IsDead(const ir::Node* n) const { return dead_.count(n) != 0; }
  void Kill(ir::Node* n) {
    dead_.insert(n);
    dead_list_.push_back(n);
  }
  void EraseDead() { graph_.EraseNodes(dead_list_); }

 private:
  ir::Graph& graph_;
  Uses uses_;
  std::unordered_set<const ir::Node*> dead_;
  std::vector<ir::Node*> dead_list_;
};

bool IsFloat32(const ir::Value* v) { return v != nullptr && v->type.dtype == DType::kFloat32; }

// The value of a one-element float constant.
std::optional<double> ScalarConst(const ir::Value* v) {
  if (v == nullptr || !v->is_constant() || v->constant->num_elements() != 1) return std::nullopt;
  return v->constant->GetAsDouble(0);
}

bool Near(std::optional<double> v, double want) {
  return v.has_value() && std::abs(*v - want) <= 1e-6 * std::abs(want);
}

// For a binary node with input `known` on one side: the other input (nullptr if `known` is not an
// input of the node).
ir::Value* Other(const ir::Node* n, const ir::Value* known) {
  if (n->inputs.size() != 2) return nullptr;
  if (n->inputs[0] == known) return n->inputs[1];
  if (n->inputs[1] == known) return n->inputs[0];
  return nullptr;
}

// A one-element constant among a binary node's inputs: {its value, the other input}.
std::optional<std::pair<double, ir::Value*>> ConstOperand(const ir::Node* n) {
  if (n->inputs.size() != 2) return std::nullopt;
  for (int i = 0; i < 2; ++i) {
    if (auto c = ScalarConst(n->inputs[i])) return std::make_pair(*c, n->inputs[1 - i]);
  }
  return std::nullopt;
}

bool IsLastAxisMean(const ir::Node* n) {
  if (n->op_type != "ReduceMean" || !n->has_input(0)) return false;
  int64_t rank = n->inputs[0]->type.rank();
  std::vector<int64_t> axes = n->attr_ints("axes");
  return rank >= 1 && n->attr_int("keepdims", 1) == 1 && axes.size() == 1 && axes[0] == rank - 1;
}

// A constant float32 vector of the last dim's length (or one element), as LayerNorm's Scale/B.
bool IsAffineParam(const ir::Value* v, const SymDim& last) {
  if (!IsFloat32(v) || !v->is_constant()) return false;
  int64_t n = v->constant->num_elements();
  return v->type.rank() <= 1 && (n == 1 || (last.IsStatic() && n == last.coef()));
}

int FuseLayerNorm(ir::Graph& graph, Matcher& m) {
  int fused = 0;
  for (const auto& node_ptr : graph.nodes()) {
    ir::Node* mean1 = node_ptr.get();
    if (m.IsDead(mean1) || !IsLastAxisMean(mean1) || !IsFloat32(mean1->inputs[0])) continue;
    ir::Value* x = mean1->inputs[0];
    ir::Node* sub = m.OnlyUser(mean1->outputs[0], "Sub");
    if (sub == nullptr || sub->inputs[0] != x || sub->inputs[1] != mean1->outputs[0]) continue;
    ir::Value* dev = sub->outputs[0];
    if (dev->is_graph_output || m.NumUses(dev) != 2) continue;
    // dev feeds Pow(dev, 2) and Div(dev, std), in either order.
    ir::Node* pow = nullptr;
    ir::Node* div = nullptr;
    for (const auto& other : graph.nodes()) {
      if (m.IsDead(other.get())) continue;
      if (other->op_type == "Pow" && other->inputs[0] == dev) pow = other.get();
      if (other->op_type == "Div" && other->inputs[0] == dev) div = other.get();
    }
    if (pow == nullptr || div == nullptr || !Near(ScalarConst(pow->inputs[1]), 2.0)) continue;
    ir::Node* mean2 = m.OnlyUser(pow->outputs[0], "ReduceMean");
    if (mean2 == nullptr || !IsLastAxisMean(mean2)) continue;
    ir::Node* add_eps = m.OnlyUser(mean2->outputs[0], "Add");
    if (add_eps == nullptr) continue;
    auto eps = ConstOperand(add_eps);
    if (!eps || eps->second != mean2->outputs[0] || eps->first < 0) continue;
    ir::Node* sqrt = m.OnlyUser(add_eps->outputs[0], "Sqrt");
    if (sqrt == nullptr || m.OnlyUser(sqrt->outputs[0], "Div") != div ||
        div->inputs[1] != sqrt->outputs[0]) {
      continue;
    }
    ir::Node* mul = m.OnlyUser(div->outputs[0], "Mul");
    if (mul == nullptr) continue;
    const SymDim& last = x->type.shape.back();
    ir::Value* gamma = Other(mul, div->outputs[0]);
    if (!IsAffineParam(gamma, last)) continue;
    ir::Node* add = m.OnlyUser(mul->outputs[0], "Add");
    if (add == nullptr) continue;
    ir::Value* beta = Other(add, mul->outputs[0]);
    if (!IsAffineParam(beta, last) || !(add->outputs[0]->type.shape == x->type.shape)) continue;
    // The final Add becomes the LayerNormalization; it already sits after every input.
    add->op_type = "LayerNormalization";
    add->inputs = {x, gamma, beta};
    add->attrs.clear();
    add->attrs["axis"] = static_cast<int64_t>(x->type.rank() - 1);
    add->attrs["epsilon"] = static_cast<float>(eps->first);
    for (ir::Node* n : {mean1, sub, pow, mean2, add_eps, sqrt, div, mul}) m.Kill(n);
    ++fused;
  }
  return fused;
}

int FuseGelu(ir::Graph& graph, Matcher& m) {
  int fused = 0;
  for (const auto& node_ptr : graph.nodes()) {
    ir::Node* erf = node_ptr.get();
    if (m.IsDead(erf) || erf->op_type != "Erf" || !IsFloat32(erf->inputs[0])) continue;
    ir::Node* scale = erf->inputs[0]->producer;
    if (scale == nullptr || m.OnlyUser(erf->inputs[0], "Erf") != erf) continue;
    auto sc = ConstOperand(scale);
    if (!sc) continue;
    ir::Value* x = sc->second;
    bool scaled = (scale->op_type == "Div" && scale->inputs[1] != x && Near(sc->first, M_SQRT2)) ||
                  (scale->op_type == "Mul" && Near(sc->first, M_SQRT1_2));
    if (!scaled) continue;
    ir::Node* add1 = m.OnlyUser(erf->outputs[0], "Add");
    if (add1 == nullptr) continue;
    auto one = ConstOperand(add1);
    if (!one || one->first != 1.0) continue;
    ir::Node* mul_a = m.OnlyUser(add1->outputs[0], "Mul");
    if (mul_a == nullptr) continue;
    ir::Value* lhs = Other(mul_a, add1->outputs[0]);
    ir::Node* last = nullptr;
    std::vector<ir::Node*> chain = {scale, erf, add1};
    if (lhs == x) {
      // x * (1 + erf) * 0.5
      ir::Node* half = m.OnlyUser(mul_a->outputs[0], "Mul");
      auto h = half ? ConstOperand(half) : std::nullopt;
      if (!h || h->first != 0.5) continue;
      chain.push_back(mul_a);
      last = half;
    } else if (lhs != nullptr && lhs->producer != nullptr && lhs->producer->op_type == "Mul" &&
               m.OnlyUser(lhs, "Mul") == mul_a) {
      // (x * 0.5) * (1 + erf)
      ir::Node* half = lhs->producer;
      auto h = ConstOperand(half);
      if (!h || h->first != 0.5 || h->second != x) continue;
      chain.push_back(half);
      last = mul_a;
    } else {
      continue;
    }
    if (!(last->outputs[0]->type.shape == x->type.shape)) continue;
    last->op_type = "Gelu";
    last->inputs = {x};
    last->attrs.clear();
    for (ir::Node* n : chain) m.Kill(n);
    ++fused;
  }
  return fused;
}

// A constant float32 vector of n elements (shape [n] or [1, n]) zero padded to whole panels of
// `panel` columns, so the tile's epilogue loads whole vectors of it; nullptr when `v` is not one.
ir::Value* PaddedBias(ir::Graph& graph, const ir::Value* v, int64_t n, int64_t panel) {
  if (!IsFloat32(v) || !v->is_constant() || v->type.rank() > 2 ||
      v->constant->num_elements() != n || (v->type.rank() == 2 && v->constant->shape()[0] != 1)) {
    return nullptr;
  }
  int64_t padded = (n + panel - 1) / panel * panel;
  HostTensor t(DType::kFloat32, {padded});
  std::fill(t.data_as<float>(), t.data_as<float>() + padded, 0.0f);
  std::copy(v->constant->data_as<float>(), v->constant->data_as<float>() + n, t.data_as<float>());
  ir::Value* pb = graph.NewValue(v->name + ".padded");
  graph.MakeConstant(pb, std::move(t));
  return pb;
}

// MatMul/Gemm with a panel-packed B followed by Add of a constant [N] vector, or a Gemm whose own
// C is such a vector (alpha = beta = 1): the vector, zero padded to whole panels, becomes the
// node's bias input.
int FuseBias(ir::Graph& graph, Matcher& m) {
  int fused = 0;
  for (const auto& node_ptr : graph.nodes()) {
    ir::Node* mm = node_ptr.get();
    if (m.IsDead(mm) || !mm->has_attr(attr::kPackedN) || mm->has_attr(attr::kFusedBias)) continue;
    int64_t n = mm->attr_int(attr::kPackedN, 0);
    int64_t panel = mm->attr_int(attr::kPackedPanel, 16);
    if (mm->op_type == "Gemm" && mm->has_input(2) && mm->attr_float("alpha", 1.0f) == 1.0f &&
        mm->attr_float("beta", 1.0f) == 1.0f) {
      if (ir::Value* pb = PaddedBias(graph, mm->inputs[2], n, panel)) {
        mm->inputs[2] = pb;
        mm->attrs[attr::kFusedBias] = int64_t{1};
        ++fused;
      }
      continue;
    }
    if (mm->op_type != "MatMul" &&
        !(mm->op_type == "Gemm" && !mm->has_input(2) && mm->attr_float("alpha", 1.0f) == 1.0f)) {
      continue;
    }
    ir::Node* add = m.OnlyUser(mm->outputs[0], "Add");
    if (add == nullptr) continue;
    ir::Value* bias = Other(add, mm->outputs[0]);
    if (bias == nullptr || bias->type.rank() > 1 ||
        !(add->outputs[0]->type.shape == mm->outputs[0]->type.shape)) {
      continue;
    }
    ir::Value* pb = PaddedBias(graph, bias, n, panel);
    if (pb == nullptr) continue;
    mm->inputs.resize(3, nullptr);
    mm->inputs[2] = pb;
    mm->attrs[attr::kFusedBias] = int64_t{1};
    ir::Value* out = add->outputs[0];
    mm->outputs[0] = out;
    out->producer = mm;
    m.Kill(add);
    ++fused;
  }
  return fused;
}

// A packed MatMul/Gemm whose only consumer is Relu or Gelu applies it in its epilogue.
int FuseActivation(ir::Graph& graph, Matcher& m) {
  int fused = 0;
  for (const auto& node_ptr : graph.nodes()) {
    ir::Node* mm = node_ptr.get();
    if (m.IsDead(mm) || !mm->has_attr(attr::kPackedN) || mm->has_attr(attr::kFusedActivation))
      continue;
    if (mm->op_type != "MatMul" && mm->op_type != "Gemm") continue;
    if (mm->op_type == "Gemm" && (mm->has_input(2) || mm->attr_float("alpha", 1.0f) != 1.0f) &&
        !mm->has_attr(attr::kFusedBias)) {
      continue;  // Gemm's own C/alpha pass would run after the activation.
    }
    for (const char* act : {attr::kEpilogueRelu, attr::kEpilogueGelu}) {
      ir::Node* a = m.OnlyUser(mm->outputs[0], act);
      if (a == nullptr || !IsFloat32(a->outputs[0])) continue;
      ir::Value* out = a->outputs[0];
      mm->outputs[0] = out;
      out->producer = mm;
      mm->attrs[attr::kFusedActivation] = std::string(act);
      m.Kill(a);
      ++fused;
      break;
    }
  }
  return fused;
}

}  // namespace

absl::Status FusePatterns(ir::Graph& graph, int* fused) {
  int count = 0;
  // Each rewrite changes uses, so each pattern family gets a fresh matcher.
  for (auto* pass : {FuseGelu, FuseLayerNorm, FuseBias, FuseActivation}) {
    Matcher m(graph);
    count += pass(graph, m);
    m.EraseDead();
  }
  if (fused != nullptr) *fused = count;
  return absl::OkStatus();
}

}  // namespace cuvil
