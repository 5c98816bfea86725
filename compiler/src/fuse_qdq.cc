// QDQ convolution fusion: a quantized activation and int8 weights behind DequantizeLinear, a float
// Conv, its epilogue and the next QuantizeLinear become one integer CuvilQConv node. The Conv node
// itself is rewritten (so it keeps its place in the schedule) and takes over the last fused node's
// output; the fused nodes are erased and the DequantizeLinear nodes left unused are removed by
// dead code elimination.
//
// With acc[m] = sum w_q * x' (x' = x, or x + 128 for int8 x, read as uint8; padding reads x's
// zero point in the same domain: zp'), the float Conv is y[m] = s_x * s_w[m] * (acc[m] -
// zp' * sum(w_q[m])) + b[m]. For a float output the kernel computes that (plus the residual,
// clamped by the activation); for a quantized one it computes round(y / s_y + zp_y) clamped to the
// type, which is QuantizeLinear(y) up to float rounding of the folded multiplier (within one step).
#include "fuse_qdq.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "cuvil/runtime/ukernels.h"

namespace cuvil {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool IsQuantType(DType d) { return d == DType::kUInt8 || d == DType::kInt8; }

// Element i of an int8/uint8/int32 tensor.
int64_t IntAt(const HostTensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt8:
      return t.data_as<int8_t>()[i];
    case DType::kUInt8:
      return t.data_as<uint8_t>()[i];
    case DType::kInt32:
      return t.data_as<int32_t>()[i];
    default:
      return 0;
  }
}

bool IsConstScalar(const ir::Value* v, DType dt) {
  return v != nullptr && v->is_constant() && v->constant->dtype() == dt &&
         v->constant->num_elements() == 1;
}

// A DequantizeLinear's (scale, zero point) of one value each, and its data input.
struct PerTensorQ {
  ir::Value* data;
  float scale;
  int64_t zero;
};

std::optional<PerTensorQ> ScalarParams(const ir::Node* n, const char* op) {
  if (n == nullptr || n->op_type != op || n->inputs.size() < 2 || n->outputs.size() != 1) {
    return std::nullopt;
  }
  ir::Value* data = n->inputs[0];
  const ir::Value* zp = n->has_input(2) ? n->inputs[2] : nullptr;
  if (data == nullptr || !IsConstScalar(n->inputs[1], DType::kFloat32)) return std::nullopt;
  const DType qt =
      std::string(op) == "QuantizeLinear" ? n->outputs[0]->type.dtype : data->type.dtype;
  if (!IsQuantType(qt) || (zp != nullptr && !IsConstScalar(zp, qt))) return std::nullopt;
  const float scale = n->inputs[1]->constant->data_as<float>()[0];
  if (!(scale > 0) || !std::isfinite(scale)) return std::nullopt;
  return PerTensorQ{data, scale, zp != nullptr ? IntAt(*zp->constant, 0) : 0};
}

// The one node reading `v` when `v` has exactly one use and is no graph output.
ir::Node* SoleConsumer(const ir::Graph& graph, const ir::Value* v,
                       const std::map<const ir::Value*, int>& uses) {
  if (v == nullptr || v->is_graph_output) return nullptr;
  auto it = uses.find(v);
  if (it == uses.end() || it->second != 1) return nullptr;
  for (const auto& n : graph.nodes()) {
    for (const ir::Value* in : n->inputs) {
      if (in == v) return n.get();
    }
  }
  return nullptr;
}

// Clip's bounds: attributes before opset 11, else optional constant scalar inputs.
std::optional<std::pair<float, float>> ClipBounds(const ir::Node& clip) {
  if (clip.opset < 11)
    return std::pair{clip.attr_float("min", -kInf), clip.attr_float("max", kInf)};
  float b[2] = {-kInf, kInf};
  for (size_t i = 1; i <= 2; ++i) {
    if (!clip.has_input(i)) continue;
    if (!IsConstScalar(clip.inputs[i], DType::kFloat32)) return std::nullopt;
    b[i - 1] = clip.inputs[i]->constant->data_as<float>()[0];
  }
  return std::pair{b[0], b[1]};
}

bool Static4d(const ir::Value* v) {
  if (v == nullptr || v->type.rank() != 4) return false;
  for (int d = 1; d < 4; ++d) {
    if (!v->type.shape[d].IsStatic()) return false;
  }
  return true;
}

ir::Value* NewConstant(ir::Graph& graph, const std::string& name, HostTensor t) {
  ir::Value* v = graph.NewValue(name);
  graph.MakeConstant(v, std::move(t));
  return v;
}

// Fuses the pattern at `conv` if it matches; returns the nodes it made dead (empty if not).
std::vector<ir::Node*> TryFuse(ir::Graph& graph, ir::Node* conv,
                               const std::map<const ir::Value*, int>& uses,
                               const std::map<const ir::Node*, size_t>& order) {
  if (conv->op_type != "Conv" || conv->inputs.size() < 2 || conv->inputs.size() > 3 ||
      conv->outputs.size() != 1 || conv->attr_int("group", 1) != 1) {
    return {};
  }
  ir::Value* xf = conv->inputs[0];
  ir::Value* wf = conv->inputs[1];
  if (!Static4d(xf) || !Static4d(conv->outputs[0]) || wf == nullptr) return {};
  auto xq = ScalarParams(xf->producer, "DequantizeLinear");
  if (!xq) return {};
  // Weights: constant int8 [M, C, KH, KW], scale per tensor or per output channel, zero points 0.
  const ir::Node* wdq = wf->producer;
  if (wdq == nullptr || wdq->op_type != "DequantizeLinear" || wdq->inputs.size() < 2) return {};
  const ir::Value* wq = wdq->inputs[0];
  const ir::Value* ws = wdq->inputs[1];
  const ir::Value* wz = wdq->has_input(2) ? wdq->inputs[2] : nullptr;
  if (wq == nullptr || !wq->is_constant() || wq->constant->dtype() != DType::kInt8 ||
      wq->constant->shape().size() != 4 || ws == nullptr || !ws->is_constant() ||
      ws->constant->dtype() != DType::kFloat32) {
    return {};
  }
  const std::vector<int64_t>& wshape = wq->constant->shape();
  const int64_t m = wshape[0], k = wshape[1] * wshape[2] * wshape[3];
  const int64_t nscale = ws->constant->num_elements();
  if (m <= 0 || k <= 0 || (nscale != 1 && (nscale != m || wdq->attr_int("axis", 1) != 0))) {
    return {};
  }
  if (wz != nullptr) {
    if (!wz->is_constant() || wz->constant->num_elements() != nscale) return {};
    for (int64_t i = 0; i < nscale; ++i) {
      if (IntAt(*wz->constant, i) != 0) return {};
    }
  }
  const ir::Value* bias = conv->has_input(2) ? conv->inputs[2] : nullptr;
  if (bias != nullptr && (!bias->is_constant() || bias->constant->dtype() != DType::kFloat32 ||
                          bias->constant->num_elements() != m)) {
    return {};
  }

  // The epilogue chain.
  std::vector<ir::Node*> dead;
  ir::Value* cur = conv->outputs[0];
  ir::Value* residual = nullptr;
  float act_lo = -kInf, act_hi = kInf;
  bool has_act = false;
  ir::Node* next = SoleConsumer(graph, cur, uses);
  if (next != nullptr && next->op_type == "Add" && next->inputs.size() == 2 &&
      next->outputs.size() == 1) {
    ir::Value* other = next->inputs[0] == cur ? next->inputs[1] : next->inputs[0];
    const bool before = other != nullptr && other != cur &&
                        (other->producer == nullptr || order.at(other->producer) < order.at(conv));
    if (before && other->type.dtype == DType::kFloat32 && other->type.shape == cur->type.shape &&
        next->outputs[0]->type.shape == cur->type.shape) {
      residual = other;
      dead.push_back(next);
      cur = next->outputs[0];
      next = SoleConsumer(graph, cur, uses);
    }
  }
  if (next != nullptr && next->outputs.size() == 1 && !next->inputs.empty() &&
      next->inputs[0] == cur) {
    if (next->op_type == "Relu") {
      act_lo = 0;
      has_act = true;
    } else if (next->op_type == "Clip") {
      if (auto b = ClipBounds(*next)) {
        act_lo = b->first;
        act_hi = b->second;
        has_act = true;
      }
    }
    if (has_act) {
      dead.push_back(next);
      cur = next->outputs[0];
      next = SoleConsumer(graph, cur, uses);
    }
  }
  std::optional<PerTensorQ> yq;
  DType ydt = DType::kFloat32;
  if (residual == nullptr && next != nullptr && next->inputs[0] == cur) {
    yq = ScalarParams(next, "QuantizeLinear");
    if (yq) {
      ydt = next->outputs[0]->type.dtype;
      dead.push_back(next);
      cur = next->outputs[0];
    }
  }

  // Parameters.
  const bool x_signed = xq->data->type.dtype == DType::kInt8;
  const int64_t zero_u8 = xq->zero + (x_signed ? 128 : 0);
  const int64_t wbytes = cuvil_uk_qconv_weights_size(m, k);
  if (wbytes < 0 || wbytes > ir::kMaxTensorBytes) return {};
  HostTensor packed(DType::kInt8, {wbytes});
  HostTensor comp(DType::kInt32, {m}), mult(DType::kFloat32, {m}), bvec(DType::kFloat32, {m});
  std::vector<int32_t> sums(m);
  cuvil_uk_pack_qconv_weights(wq->constant->data_as<int8_t>(), m, k, packed.data_as<int8_t>(),
                              sums.data());
  const float* sw = ws->constant->data_as<float>();
  const float* b = bias != nullptr ? bias->constant->data_as<float>() : nullptr;
  for (int64_t o = 0; o < m; ++o) {
    const int64_t c = zero_u8 * sums[o];
    if (c < std::numeric_limits<int32_t>::min() || c > std::numeric_limits<int32_t>::max()) {
      return {};
    }
    comp.data_as<int32_t>()[o] = static_cast<int32_t>(c);
    const double scale = static_cast<double>(xq->scale) * sw[nscale == 1 ? 0 : o];
    const double bo = b != nullptr ? b[o] : 0.0;
    if (yq) {
      mult.data_as<float>()[o] = static_cast<float>(scale / yq->scale);
      bvec.data_as<float>()[o] = static_cast<float>(bo / yq->scale + yq->zero);
    } else {
      mult.data_as<float>()[o] = static_cast<float>(scale);
      bvec.data_as<float>()[o] = static_cast<float>(bo);
    }
  }
  float lo = act_lo, hi = act_hi;
  int64_t out_type = CUVIL_UK_QOUT_FLOAT;
  if (yq) {
    const float qmin = ydt == DType::kUInt8 ? 0 : -128, qmax = ydt == DType::kUInt8 ? 255 : 127;
    // QuantizeLinear is monotonic: Q(clamp(y, a, b)) = clamp(Q(y), Q(a), Q(b)).
    auto quantize = [&](float v) {
      return std::isinf(v) ? v : std::nearbyint(v / yq->scale) + static_cast<float>(yq->zero);
    };
    lo = std::clamp(quantize(act_lo), qmin, qmax);
    hi = std::clamp(quantize(act_hi), qmin, qmax);
    if (lo > hi) return {};
    out_type = ydt == DType::kUInt8 ? CUVIL_UK_QOUT_U8 : CUVIL_UK_QOUT_S8;
  }

  // Rewrite the Conv in place.
  const std::string base = conv->name.empty() ? wq->name : conv->name;
  std::vector<ir::Value*> inputs = {xq->data,
                                    NewConstant(graph, base + ".qweights", std::move(packed)),
                                    NewConstant(graph, base + ".qcomp", std::move(comp)),
                                    NewConstant(graph, base + ".qmult", std::move(mult)),
                                    NewConstant(graph, base + ".qbias", std::move(bvec))};
  if (residual != nullptr) inputs.push_back(residual);
  conv->op_type = "CuvilQConv";
  conv->inputs = inputs;
  conv->attrs.erase("group");
  conv->attrs["out_channels"] = m;
  conv->attrs["x_zero"] = xq->zero;
  conv->attrs["out_type"] = out_type;
  conv->attrs["q_lo"] = lo;
  conv->attrs["q_hi"] = hi;
  conv->outputs[0] = cur;
  cur->producer = conv;
  return dead;
}

}  // namespace

std::unordered_set<const ir::Value*> QdqWeightCandidates(const ir::Graph& graph) {
  std::unordered_set<const ir::Value*> out;
  for (const auto& n : graph.nodes()) {
    if (n->op_type != "Conv" || !n->has_input(1) || !n->has_input(0)) continue;
    const ir::Node* w = n->inputs[1]->producer;
    const ir::Node* x = n->inputs[0]->producer;
    if (w != nullptr && w->op_type == "DequantizeLinear" && x != nullptr &&
        x->op_type == "DequantizeLinear") {
      out.insert(n->inputs[1]);
    }
  }
  return out;
}

int FuseQdqConvs(ir::Graph& graph) {
  int fused = 0;
  std::vector<ir::Node*> dead;
  auto uses = ir::UseCounts(graph);
  std::map<const ir::Node*, size_t> order;
  for (size_t i = 0; i < graph.nodes().size(); ++i) order[graph.nodes()[i].get()] = i;
  for (size_t i = 0; i < graph.nodes().size(); ++i) {
    ir::Node* n = graph.mutable_nodes()[i].get();
    if (std::find(dead.begin(), dead.end(), n) != dead.end()) continue;
    if (n->op_type != "Conv") continue;
    std::vector<ir::Node*> d = TryFuse(graph, n, uses, order);
    if (n->op_type != "CuvilQConv") continue;  // not rewritten
    ++fused;
    dead.insert(dead.end(), d.begin(), d.end());
    uses = ir::UseCounts(graph);
  }
  graph.EraseNodes(dead);
  return fused;
}

int ExpandQLinearConvs(ir::Graph& graph) {
  int expanded = 0;
  std::vector<std::unique_ptr<ir::Node>>& nodes = graph.mutable_nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    ir::Node* q = nodes[i].get();
    if (q->op_type != "QLinearConv" || q->inputs.size() < 8 || q->outputs.size() != 1 ||
        q->attr_int("group", 1) != 1) {
      continue;
    }
    auto in = [&](size_t k) { return k < q->inputs.size() ? q->inputs[k] : nullptr; };
    ir::Value *x = in(0), *xs = in(1), *xz = in(2), *w = in(3), *ws = in(4), *wz = in(5),
              *ys = in(6), *yz = in(7), *b = in(8);
    ir::Value* y = q->outputs[0];
    const DType xdt = x->type.dtype, ydt = y->type.dtype;
    if (!Static4d(x) || !Static4d(y) || !IsConstScalar(xs, DType::kFloat32) ||
        !IsConstScalar(xz, xdt) || !IsConstScalar(ys, DType::kFloat32) || !IsConstScalar(yz, ydt) ||
        w == nullptr || !w->is_constant() || w->constant->dtype() != DType::kInt8 ||
        w->constant->shape().size() != 4 || ws == nullptr || !ws->is_constant() ||
        ws->constant->dtype() != DType::kFloat32) {
      continue;
    }
    const int64_t m = w->constant->shape()[0], nscale = ws->constant->num_elements();
    if (nscale != 1 && nscale != m) continue;
    bool zero_w = wz == nullptr || (wz->is_constant() && wz->constant->num_elements() == nscale);
    for (int64_t k = 0; zero_w && wz != nullptr && k < nscale; ++k) {
      zero_w = IntAt(*wz->constant, k) == 0;
    }
    if (!zero_w || (b != nullptr && (!b->is_constant() || b->constant->dtype() != DType::kInt32 ||
                                     b->constant->num_elements() != m))) {
      continue;
    }
    // The float graph the spec defines: B is in units of x_scale * w_scale.
    const float sx = xs->constant->data_as<float>()[0];
    const float* sw = ws->constant->data_as<float>();
    HostTensor bias(DType::kFloat32, {m});
    for (int64_t o = 0; o < m; ++o) {
      const double bo = b != nullptr ? b->constant->data_as<int32_t>()[o] : 0;
      bias.data_as<float>()[o] = static_cast<float>(bo * sx * sw[nscale == 1 ? 0 : o]);
    }
    const std::string base = q->name.empty() ? y->name : q->name;
    auto float_value = [&](const std::string& name, const ir::TensorType& like) {
      ir::Value* v = graph.NewValue(name);
      v->type = like;
      v->type.dtype = DType::kFloat32;
      return v;
    };
    ir::Value* xd = float_value(base + "/x_dequantized", x->type);
    ir::Value* wd = float_value(base + "/w_dequantized", w->type);
    ir::Value* yf = float_value(base + "/y_float", y->type);
    ir::Value* bf = NewConstant(graph, base + "/bias_float", std::move(bias));
    ir::Node* dqx = graph.NewNode("DequantizeLinear", base + "/dequantize_x");
    dqx->inputs = {x, xs, xz};
    dqx->outputs = {xd};
    ir::Node* dqw = graph.NewNode("DequantizeLinear", base + "/dequantize_w");
    dqw->inputs = {w, ws};
    if (wz != nullptr) dqw->inputs.push_back(wz);
    dqw->attrs["axis"] = int64_t{0};
    dqw->outputs = {wd};
    ir::Node* conv = graph.NewNode("Conv", base + "/conv");
    conv->attrs = q->attrs;
    conv->inputs = {xd, wd, bf};
    conv->outputs = {yf};
    ir::Node* qy = graph.NewNode("QuantizeLinear", base + "/quantize_y");
    qy->inputs = {yf, ys, yz};
    qy->outputs = {y};
    for (ir::Node* n : {dqx, dqw, conv, qy}) {
      for (ir::Value* out : n->outputs) out->producer = n;
    }
    // The four new nodes (appended by NewNode) take the QLinearConv's place, in order.
    std::vector<std::unique_ptr<ir::Node>> made;
    for (int k = 0; k < 4; ++k) {
      made.push_back(std::move(nodes.back()));
      nodes.pop_back();
    }
    std::reverse(made.begin(), made.end());
    nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(i));
    nodes.insert(nodes.begin() + static_cast<std::ptrdiff_t>(i),
                 std::make_move_iterator(made.begin()), std::make_move_iterator(made.end()));
    i += 3;
    ++expanded;
  }
  return expanded;
}

int FuseQdqDepthwiseConvs(ir::Graph& graph) {
  int fused = 0;
  std::vector<ir::Node*> dead;
  auto uses = ir::UseCounts(graph);
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* conv = node.get();
    if (conv->op_type != "Conv" || conv->attr_int("ukernel", 0) != 2 || conv->inputs.size() > 3 ||
        conv->has_attr("q_x_scale") || conv->outputs.size() != 1 || !conv->has_input(0)) {
      continue;
    }
    ir::Node* dq = conv->inputs[0]->producer;
    auto xq = ScalarParams(dq, "DequantizeLinear");

    ir::Node* q = SoleConsumer(graph, conv->outputs[0], uses);
    auto yq = ScalarParams(q, "QuantizeLinear");
    if (!xq || !yq || q->inputs[0] != conv->outputs[0]) continue;
    conv->attrs["q_x_scale"] = xq->scale;
    conv->attrs["q_x_zero"] = xq->zero;
    conv->attrs["q_x_signed"] = int64_t{xq->data->type.dtype == DType::kInt8 ? 1 : 0};
    conv->attrs["q_y_scale"] = yq->scale;
    conv->attrs["q_y_zero"] = yq->zero;
    conv->attrs["q_y_signed"] = int64_t{q->outputs[0]->type.dtype == DType::kInt8 ? 1 : 0};
    ir::Value* dq_out = conv->inputs[0];
    conv->inputs[0] = xq->data;
    conv->outputs[0] = q->outputs[0];
    conv->outputs[0]->producer = conv;
    dead.push_back(q);
    if (--uses[dq_out] == 0 && !dq_out->is_graph_output) dead.push_back(dq);
    ++fused;
  }
  graph.EraseNodes(dead);
  return fused;
}

}  // namespace cuvil
