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
#include "internal_attrs.h"

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

// Constant 8-bit weights `w` (int8 or uint8) minus their zero points `zp` (absent, one, or one per
// index of `channel_axis`, of w's type) as int8 weights with zero point 0, when every difference
// fits in int8 (then the integer kernels compute exactly the same products); else nullopt.
std::optional<HostTensor> CenteredWeights(const ir::Value* w, const ir::Value* zp,
                                          int64_t channel_axis) {
  if (w == nullptr || !w->is_constant() || !IsQuantType(w->constant->dtype())) return std::nullopt;
  const HostTensor& wt = *w->constant;
  const std::vector<int64_t>& shape = wt.shape();
  if (channel_axis < 0 || channel_axis >= static_cast<int64_t>(shape.size())) return std::nullopt;
  const int64_t channels = shape[static_cast<size_t>(channel_axis)];
  int64_t inner = 1;
  for (size_t d = static_cast<size_t>(channel_axis) + 1; d < shape.size(); ++d) inner *= shape[d];
  const HostTensor* z = zp != nullptr && zp->is_constant() ? &*zp->constant : nullptr;
  if (zp != nullptr && (z == nullptr || z->dtype() != wt.dtype() ||
                        (z->num_elements() != 1 && z->num_elements() != channels))) {
    return std::nullopt;
  }
  HostTensor out(DType::kInt8, shape);
  int8_t* o = out.data_as<int8_t>();
  for (int64_t i = 0; i < wt.num_elements(); ++i) {
    const int64_t c = inner > 0 && channels > 0 ? (i / inner) % channels : 0;
    const int64_t zero = z == nullptr ? 0 : IntAt(*z, z->num_elements() == 1 ? 0 : c);
    const int64_t d = IntAt(wt, i) - zero;
    if (d < -128 || d > 127) return std::nullopt;
    o[i] = static_cast<int8_t>(d);
  }
  return out;
}

// Constant 8-bit weights `w` with constant float scales `ws` per tensor or per index of
// `channel_axis` and as many zero points `wz` (or none): the weights CenteredWeights makes.
std::optional<HostTensor> CenteredScaledWeights(const ir::Value* w, const ir::Value* ws,
                                                const ir::Value* wz, int64_t channel_axis) {
  if (w == nullptr || !w->is_constant() || ws == nullptr || !ws->is_constant() ||
      ws->constant->dtype() != DType::kFloat32 || channel_axis < 0 ||
      channel_axis >= static_cast<int64_t>(w->constant->shape().size())) {
    return std::nullopt;
  }
  const int64_t nscale = ws->constant->num_elements();
  const int64_t channels = w->constant->shape()[static_cast<size_t>(channel_axis)];
  if ((nscale != 1 && nscale != channels) ||
      (wz != nullptr && (!wz->is_constant() || wz->constant->num_elements() != nscale))) {
    return std::nullopt;
  }
  return CenteredWeights(w, wz, channel_axis);
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

// What follows an integer kernel's float result: [Add of a residual computed earlier] ->
// [Relu | Clip] -> [QuantizeLinear], each the sole consumer of the value before it.
struct Epilogue {
  std::vector<ir::Node*> dead;  // The nodes the kernel absorbs.
  ir::Value* out = nullptr;     // The last absorbed node's output (the kernel's new output).
  ir::Value* residual = nullptr;
  float act_lo = -kInf, act_hi = kInf;
  std::optional<PerTensorQ> yq;
  DType ydt = DType::kFloat32;
};

// The epilogue after `start` (the output of `anchor`); a residual only with `allow_residual`.
Epilogue FollowEpilogue(const ir::Graph& graph, ir::Value* start, const ir::Node* anchor,
                        const std::map<const ir::Value*, int>& uses,
                        const std::map<const ir::Node*, size_t>& order, bool allow_residual) {
  Epilogue e;
  ir::Value* cur = start;
  ir::Node* next = SoleConsumer(graph, cur, uses);
  if (allow_residual && next != nullptr && next->op_type == "Add" && next->inputs.size() == 2 &&
      next->outputs.size() == 1) {
    ir::Value* other = next->inputs[0] == cur ? next->inputs[1] : next->inputs[0];
    const bool before =
        other != nullptr && other != cur &&
        (other->producer == nullptr || order.at(other->producer) < order.at(anchor));
    if (before && other->type.dtype == DType::kFloat32 && other->type.shape == cur->type.shape &&
        next->outputs[0]->type.shape == cur->type.shape) {
      e.residual = other;
      e.dead.push_back(next);
      cur = next->outputs[0];
      next = SoleConsumer(graph, cur, uses);
    }
  }
  if (next != nullptr && next->outputs.size() == 1 && !next->inputs.empty() &&
      next->inputs[0] == cur) {
    bool has_act = false;
    if (next->op_type == "Relu") {
      e.act_lo = 0;
      has_act = true;
    } else if (next->op_type == "Clip") {
      if (auto b = ClipBounds(*next)) {
        e.act_lo = b->first;
        e.act_hi = b->second;
        has_act = true;
      }
    }
    if (has_act) {
      e.dead.push_back(next);
      cur = next->outputs[0];
      next = SoleConsumer(graph, cur, uses);
    }
  }
  if (e.residual == nullptr && next != nullptr && next->inputs[0] == cur) {
    e.yq = ScalarParams(next, "QuantizeLinear");
    if (e.yq) {
      e.ydt = next->outputs[0]->type.dtype;
      e.dead.push_back(next);
      cur = next->outputs[0];
    }
  }
  e.out = cur;
  return e;
}

// The constant inputs and clamp of the shared epilogue (cuvil_uk_qconv2d's formula) for m output
// channels: comp = x's zero point (uint8 domain) * the channel's weight sum, mult and bias with
// the scales folded in; nullopt when a compensation overflows int32 or the clamp is empty.
struct Requantisation {
  HostTensor comp, mult, bias;
  float lo, hi;
  int64_t out_type;
};

// comp[o] = x's zero point in the kernel's uint8 domain times output channel o's weight sum;
// nullopt when one overflows int32.
std::optional<HostTensor> Compensation(const PerTensorQ& xq, const std::vector<int32_t>& sums) {
  const int64_t m = static_cast<int64_t>(sums.size());
  const int64_t zero_u8 = xq.zero + (xq.data->type.dtype == DType::kInt8 ? 128 : 0);
  HostTensor comp(DType::kInt32, {m});
  for (int64_t o = 0; o < m; ++o) {
    const int64_t c = zero_u8 * sums[o];
    if (c < std::numeric_limits<int32_t>::min() || c > std::numeric_limits<int32_t>::max()) {
      return std::nullopt;
    }
    comp.data_as<int32_t>()[o] = static_cast<int32_t>(c);
  }
  return comp;
}

std::optional<Requantisation> Requantise(const PerTensorQ& xq, const std::vector<int32_t>& sums,
                                         const float* w_scale, int64_t nscale, const float* bias,
                                         const Epilogue& e) {
  const int64_t m = static_cast<int64_t>(sums.size());
  std::optional<HostTensor> comp = Compensation(xq, sums);
  if (!comp) return std::nullopt;
  Requantisation r{*std::move(comp),
                   HostTensor(DType::kFloat32, {m}),
                   HostTensor(DType::kFloat32, {m}),
                   e.act_lo,
                   e.act_hi,
                   CUVIL_UK_QOUT_FLOAT};
  for (int64_t o = 0; o < m; ++o) {
    const double scale = static_cast<double>(xq.scale) * w_scale[nscale == 1 ? 0 : o];
    const double bo = bias != nullptr ? bias[o] : 0.0;
    if (e.yq) {
      r.mult.data_as<float>()[o] = static_cast<float>(scale / e.yq->scale);
      r.bias.data_as<float>()[o] = static_cast<float>(bo / e.yq->scale + e.yq->zero);
    } else {
      r.mult.data_as<float>()[o] = static_cast<float>(scale);
      r.bias.data_as<float>()[o] = static_cast<float>(bo);
    }
  }
  if (e.yq) {
    const float qmin = e.ydt == DType::kUInt8 ? 0 : -128, qmax = e.ydt == DType::kUInt8 ? 255 : 127;
    // QuantizeLinear is monotonic: Q(clamp(y, a, b)) = clamp(Q(y), Q(a), Q(b)).
    auto quantize = [&](float v) {
      return std::isinf(v) ? v : std::nearbyint(v / e.yq->scale) + static_cast<float>(e.yq->zero);
    };
    r.lo = std::clamp(quantize(e.act_lo), qmin, qmax);
    r.hi = std::clamp(quantize(e.act_hi), qmin, qmax);
    if (r.lo > r.hi) return std::nullopt;
    r.out_type = e.ydt == DType::kUInt8 ? CUVIL_UK_QOUT_U8 : CUVIL_UK_QOUT_S8;
  }
  return r;
}

// A DequantizeLinear of constant 8-bit weights with `rank` dims, a constant float scale per tensor
// or per entry of `channel_axis`, and zero points that CenteredWeights removes: the centered
// int8 weights and the scales.
struct QuantWeights {
  HostTensor q;
  const ir::Value* scale;
  int64_t nscale;
  std::string name;
};

std::optional<QuantWeights> ConstantWeights(const ir::Value* wf, size_t rank,
                                            int64_t channel_axis) {
  const ir::Node* wdq = wf != nullptr ? wf->producer : nullptr;
  if (wdq == nullptr || wdq->op_type != "DequantizeLinear" || wdq->inputs.size() < 2) {
    return std::nullopt;
  }
  const ir::Value* wq = wdq->inputs[0];
  const ir::Value* ws = wdq->inputs[1];
  const ir::Value* wz = wdq->has_input(2) ? wdq->inputs[2] : nullptr;
  if (wq == nullptr || !wq->is_constant() || wq->constant->shape().size() != rank ||
      ws == nullptr || !ws->is_constant()) {
    return std::nullopt;
  }
  const int64_t nscale = ws->constant->num_elements();
  int64_t axis = wdq->attr_int("axis", 1);
  if (axis < 0) axis += static_cast<int64_t>(rank);
  if (nscale != 1 && axis != channel_axis) return std::nullopt;
  std::optional<HostTensor> centered = CenteredScaledWeights(wq, ws, wz, channel_axis);
  if (!centered) return std::nullopt;
  return QuantWeights{*std::move(centered), ws, nscale, wq->name};
}

// A constant float bias of n values ([n] or [1, n]).
bool IsBiasOf(const ir::Value* b, int64_t n) {
  return b != nullptr && b->is_constant() && b->constant->dtype() == DType::kFloat32 &&
         b->constant->num_elements() == n && !b->constant->shape().empty() &&
         b->constant->shape().back() == n;
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
  // Weights: constant 8-bit [M, C, KH, KW], scale per tensor or per output channel, zero points
  // that centre them in int8.
  auto weights = ConstantWeights(wf, 4, 0);
  if (!weights) return {};
  const std::vector<int64_t>& wshape = weights->q.shape();
  const int64_t m = wshape[0], k = wshape[1] * wshape[2] * wshape[3];
  if (m <= 0 || k <= 0) return {};
  const ir::Value* bias = conv->has_input(2) ? conv->inputs[2] : nullptr;
  if (bias != nullptr && !IsBiasOf(bias, m)) return {};

  Epilogue e = FollowEpilogue(graph, conv->outputs[0], conv, uses, order, /*allow_residual=*/true);
  const int64_t wbytes = cuvil_uk_qconv_weights_size(m, k);
  if (wbytes < 0 || wbytes > ir::kMaxTensorBytes) return {};
  HostTensor packed(DType::kInt8, {wbytes});
  std::vector<int32_t> sums(m);
  cuvil_uk_pack_qconv_weights(weights->q.data_as<int8_t>(), m, k, packed.data_as<int8_t>(),
                              sums.data());
  auto r = Requantise(*xq, sums, weights->scale->constant->data_as<float>(), weights->nscale,
                      bias != nullptr ? bias->constant->data_as<float>() : nullptr, e);
  if (!r) return {};

  // A float result whose only reader is a GlobalAveragePool: the kernel averages it in place of
  // writing it (CUVIL_UK_QOUT_FLOAT_MEAN), so the [N, M, OH, OW] float map, often the largest
  // tensor of a small network, is never stored.
  if (r->out_type == CUVIL_UK_QOUT_FLOAT && e.residual == nullptr) {
    ir::Node* gap = SoleConsumer(graph, e.out, uses);
    if (gap != nullptr && gap->op_type == "GlobalAveragePool" && gap->inputs.size() == 1 &&
        gap->outputs.size() == 1) {
      e.dead.push_back(gap);
      e.out = gap->outputs[0];
      r->out_type = CUVIL_UK_QOUT_FLOAT_MEAN;
    }
  }

  // Rewrite the Conv in place.
  const std::string base = conv->name.empty() ? weights->name : conv->name;
  std::vector<ir::Value*> inputs = {xq->data,
                                    NewConstant(graph, base + ".qweights", std::move(packed)),
                                    NewConstant(graph, base + ".qcomp", std::move(r->comp)),
                                    NewConstant(graph, base + ".qmult", std::move(r->mult)),
                                    NewConstant(graph, base + ".qbias", std::move(r->bias))};
  if (e.residual != nullptr) inputs.push_back(e.residual);
  conv->op_type = "CuvilQConv";
  conv->inputs = inputs;
  conv->attrs.erase("group");
  conv->attrs[attr::kOutChannels] = m;
  conv->attrs[attr::kXZero] = xq->zero;
  conv->attrs[attr::kOutType] = r->out_type;
  conv->attrs[attr::kQLo] = r->lo;
  conv->attrs[attr::kQHi] = r->hi;
  conv->outputs[0] = e.out;
  e.out->producer = conv;
  return e.dead;
}

// Fuses DequantizeLinear(x [M, K]) -> MatMul(x, DequantizeLinear(int8 [K, N])) [-> Add(bias)] or
// -> Gemm (alpha 1, beta 1, no transA, any transB) with its C, then the epilogue without residual,
// into one CuvilQMatMul; returns the nodes it made dead (empty if it does not match).
std::vector<ir::Node*> TryFuseMatMul(ir::Graph& graph, ir::Node* mm,
                                     const std::map<const ir::Value*, int>& uses,
                                     const std::map<const ir::Node*, size_t>& order) {
  const bool gemm = mm->op_type == "Gemm";
  if ((mm->op_type != "MatMul" && !gemm) || mm->inputs.size() < 2 ||
      mm->inputs.size() > (gemm ? 3u : 2u) || mm->outputs.size() != 1) {
    return {};
  }
  if (gemm && (mm->attr_int("transA", 0) != 0 || mm->attr_float("alpha", 1.0f) != 1.0f ||
               (mm->has_input(2) && mm->attr_float("beta", 1.0f) != 1.0f))) {
    return {};
  }
  const bool trans_b = gemm && mm->attr_int("transB", 0) != 0;
  ir::Value* xf = mm->inputs[0];
  ir::Value* y = mm->outputs[0];
  if (xf == nullptr || xf->type.rank() != 2 || !xf->type.shape[1].IsStatic() ||
      y->type.rank() != 2 || !y->type.shape[1].IsStatic()) {
    return {};
  }
  auto xq = ScalarParams(xf->producer, "DequantizeLinear");
  if (!xq) return {};
  const int64_t k = xf->type.shape[1].coef(), n = y->type.shape[1].coef();
  // Per-column scales run along N: axis 1 of [K, N], axis 0 of a transposed [N, K].
  auto weights = ConstantWeights(mm->inputs[1], 2, trans_b ? 0 : 1);
  if (!weights || k <= 0 || n <= 0) return {};
  const std::vector<int64_t>& wshape = weights->q.shape();
  if (wshape != (trans_b ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n})) return {};
  std::vector<ir::Node*> dead;
  const ir::Value* bias = gemm && mm->has_input(2) ? mm->inputs[2] : nullptr;
  ir::Value* start = y;
  if (bias != nullptr && !IsBiasOf(bias, n)) return {};
  if (!gemm) {  // MatMul then Add of a constant bias: PyTorch's Linear as exported.
    ir::Node* add = SoleConsumer(graph, y, uses);
    if (add != nullptr && add->op_type == "Add" && add->inputs.size() == 2 &&
        add->outputs.size() == 1) {
      const ir::Value* other = add->inputs[0] == y ? add->inputs[1] : add->inputs[0];
      if (other != y && IsBiasOf(other, n) && add->outputs[0]->type.shape == y->type.shape) {
        bias = other;
        dead.push_back(add);
        start = add->outputs[0];
      }
    }
  }
  Epilogue e = FollowEpilogue(graph, start, mm, uses, order, /*allow_residual=*/false);
  const int64_t wbytes = cuvil_uk_qmatmul_weights_size(k, n);
  if (wbytes < 0 || wbytes > ir::kMaxTensorBytes) return {};
  HostTensor packed(DType::kInt8, {wbytes});
  std::vector<int32_t> sums(n);
  cuvil_uk_pack_qmatmul_weights(weights->q.data_as<int8_t>(), k, n, trans_b ? 1 : 0,
                                packed.data_as<int8_t>(), sums.data());
  auto r = Requantise(*xq, sums, weights->scale->constant->data_as<float>(), weights->nscale,
                      bias != nullptr ? bias->constant->data_as<float>() : nullptr, e);
  if (!r) return {};
  const std::string base = mm->name.empty() ? weights->name : mm->name;
  mm->op_type = "CuvilQMatMul";
  mm->inputs = {xq->data, NewConstant(graph, base + ".qweights", std::move(packed)),
                NewConstant(graph, base + ".qcomp", std::move(r->comp)),
                NewConstant(graph, base + ".qmult", std::move(r->mult)),
                NewConstant(graph, base + ".qbias", std::move(r->bias))};
  mm->attrs.clear();
  mm->attrs[attr::kOutColumns] = n;
  mm->attrs[attr::kOutType] = r->out_type;
  mm->attrs[attr::kQLo] = r->lo;
  mm->attrs[attr::kQHi] = r->hi;
  mm->outputs[0] = e.out;
  e.out->producer = mm;
  dead.insert(dead.end(), e.dead.begin(), e.dead.end());
  return dead;
}

// A QLinear op's operands, its bias already float (or null), and its weights' channel axis.
struct QdqOperands {
  ir::Value *x, *xs, *xz, *w, *ws, *wz;
  int64_t w_axis;
  ir::Value* bias;
  ir::Value *ys, *yz;
};

// Replaces the QLinear op at nodes[i] by DequantizeLinear(x), DequantizeLinear(w) along `w_axis`
// -> `op` (with `attrs`, and the bias when set) -> QuantizeLinear -> y, in its place; returns the
// index of the last of the four new nodes.
size_t ReplaceWithQdq(ir::Graph& graph, size_t i, const QdqOperands& o, const std::string& op,
                      const std::map<std::string, ir::Attribute>& attrs) {
  std::vector<std::unique_ptr<ir::Node>>& nodes = graph.mutable_nodes();
  ir::Node* q = nodes[i].get();
  ir::Value* y = q->outputs[0];
  const std::string base = q->name.empty() ? y->name : q->name;
  auto float_value = [&](const std::string& name, const ir::TensorType& like) {
    ir::Value* v = graph.NewValue(name);
    v->type = like;
    v->type.dtype = DType::kFloat32;
    return v;
  };
  ir::Value* xd = float_value(base + "/x_dequantized", o.x->type);
  ir::Value* wd = float_value(base + "/w_dequantized", o.w->type);
  ir::Value* yf = float_value(base + "/y_float", y->type);
  ir::Node* dqx = graph.NewNode("DequantizeLinear", base + "/dequantize_x");
  dqx->inputs = {o.x, o.xs, o.xz};
  dqx->outputs = {xd};
  ir::Node* dqw = graph.NewNode("DequantizeLinear", base + "/dequantize_w");
  dqw->inputs = {o.w, o.ws};
  if (o.wz != nullptr) dqw->inputs.push_back(o.wz);
  dqw->attrs["axis"] = o.w_axis;
  dqw->outputs = {wd};
  ir::Node* main = graph.NewNode(op, base + "/" + op);
  main->attrs = attrs;
  main->inputs = {xd, wd};
  if (o.bias != nullptr) main->inputs.push_back(o.bias);
  main->outputs = {yf};
  ir::Node* qy = graph.NewNode("QuantizeLinear", base + "/quantize_y");
  qy->inputs = {yf, o.ys, o.yz};
  qy->outputs = {y};
  for (ir::Node* n : {dqx, dqw, main, qy}) {
    for (ir::Value* out : n->outputs) out->producer = n;
  }
  // The four new nodes (appended by NewNode) take the QLinear op's place, in order.
  std::vector<std::unique_ptr<ir::Node>> made;
  for (int k = 0; k < 4; ++k) {
    made.push_back(std::move(nodes.back()));
    nodes.pop_back();
  }
  std::reverse(made.begin(), made.end());
  nodes.erase(nodes.begin() + static_cast<std::ptrdiff_t>(i));
  nodes.insert(nodes.begin() + static_cast<std::ptrdiff_t>(i),
               std::make_move_iterator(made.begin()), std::make_move_iterator(made.end()));
  return i + made.size() - 1;
}

}  // namespace

std::unordered_set<const ir::Value*> QdqWeightCandidates(const ir::Graph& graph) {
  std::unordered_set<const ir::Value*> out;
  for (const auto& n : graph.nodes()) {
    if ((n->op_type != "Conv" && n->op_type != "MatMul" && n->op_type != "Gemm") ||
        !n->has_input(1) || !n->has_input(0)) {
      continue;
    }
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
    std::vector<ir::Node*> d;
    if (n->op_type == "Conv") {
      d = TryFuse(graph, n, uses, order);
      if (n->op_type != "CuvilQConv") continue;  // not rewritten
    } else if (n->op_type == "MatMul" || n->op_type == "Gemm") {
      d = TryFuseMatMul(graph, n, uses, order);
      if (n->op_type != "CuvilQMatMul") continue;
    } else {
      continue;
    }
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
        w == nullptr || !w->is_constant() || w->constant->shape().size() != 4) {
      continue;
    }
    const int64_t m = w->constant->shape()[0];
    if (!CenteredScaledWeights(w, ws, wz, 0) ||
        (b != nullptr && (!b->is_constant() || b->constant->dtype() != DType::kInt32 ||
                          b->constant->num_elements() != m))) {
      continue;
    }
    // The float graph the spec defines: B is in units of x_scale * w_scale.
    const float sx = xs->constant->data_as<float>()[0];
    const float* sw = ws->constant->data_as<float>();
    const int64_t nscale = ws->constant->num_elements();
    HostTensor bias(DType::kFloat32, {m});
    for (int64_t o = 0; o < m; ++o) {
      const double bo = b != nullptr ? b->constant->data_as<int32_t>()[o] : 0;
      bias.data_as<float>()[o] = static_cast<float>(bo * sx * sw[nscale == 1 ? 0 : o]);
    }
    const std::string base = q->name.empty() ? y->name : q->name;
    ir::Value* bf = NewConstant(graph, base + "/bias_float", std::move(bias));
    i = ReplaceWithQdq(graph, i, QdqOperands{x, xs, xz, w, ws, wz, 0, bf, ys, yz}, "Conv",
                       q->attrs);
    ++expanded;
  }
  return expanded;
}

int ExpandQLinearMatMuls(ir::Graph& graph) {
  int expanded = 0;
  std::vector<std::unique_ptr<ir::Node>>& nodes = graph.mutable_nodes();
  for (size_t i = 0; i < nodes.size(); ++i) {
    ir::Node* q = nodes[i].get();
    if (q->op_type != "QLinearMatMul" || q->inputs.size() != 8 || q->outputs.size() != 1) continue;
    ir::Value *a = q->inputs[0], *as = q->inputs[1], *az = q->inputs[2], *w = q->inputs[3],
              *ws = q->inputs[4], *wz = q->inputs[5], *ys = q->inputs[6], *yz = q->inputs[7];
    ir::Value* y = q->outputs[0];
    if (a == nullptr || a->type.rank() != 2 || !a->type.shape[1].IsStatic() ||
        !IsConstScalar(as, DType::kFloat32) || !IsConstScalar(az, a->type.dtype) ||
        !IsConstScalar(ys, DType::kFloat32) || !IsConstScalar(yz, y->type.dtype) || w == nullptr ||
        !w->is_constant() || w->constant->shape().size() != 2 ||
        !CenteredScaledWeights(w, ws, wz, 1)) {
      continue;
    }
    // Per-column scales of [K, N] weights run along axis 1.
    i = ReplaceWithQdq(graph, i, QdqOperands{a, as, az, w, ws, wz, 1, nullptr, ys, yz}, "MatMul",
                       {});
    ++expanded;
  }
  return expanded;
}

int LowerIntegerProducts(ir::Graph& graph) {
  int lowered = 0;
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* n = node.get();
    const bool conv = n->op_type == "ConvInteger";
    if ((!conv && n->op_type != "MatMulInteger") || n->inputs.size() < 2 ||
        n->outputs.size() != 1 || (conv && n->attr_int("group", 1) != 1)) {
      continue;
    }
    ir::Value* x = n->inputs[0];
    const ir::Value* w = n->inputs[1];
    const ir::Value* xz = n->has_input(2) ? n->inputs[2] : nullptr;
    const ir::Value* wz = n->has_input(3) ? n->inputs[3] : nullptr;
    if (x == nullptr || !IsQuantType(x->type.dtype) || w == nullptr || !w->is_constant() ||
        (xz != nullptr && !IsConstScalar(xz, x->type.dtype))) {
      continue;
    }
    const std::vector<int64_t>& wshape = w->constant->shape();
    bool shapes_fit = false;
    int64_t rows = 0, k = 0;  // Output channels (columns) and reduction length.
    if (conv) {
      shapes_fit = Static4d(x) && Static4d(n->outputs[0]) && wshape.size() == 4;
      if (shapes_fit) rows = wshape[0], k = wshape[1] * wshape[2] * wshape[3];
    } else {
      shapes_fit = x->type.rank() == 2 && x->type.shape[1].IsStatic() && wshape.size() == 2 &&
                   wshape[0] == x->type.shape[1].coef();
      if (shapes_fit) k = wshape[0], rows = wshape[1];
    }
    if (!shapes_fit || rows <= 0 || k <= 0) continue;
    // Weight zero points: scalar, or one per output channel (ConvInteger's M, MatMulInteger's N).
    std::optional<HostTensor> centered = CenteredWeights(w, wz, conv ? 0 : 1);
    if (!centered) continue;
    const int64_t wbytes =
        conv ? cuvil_uk_qconv_weights_size(rows, k) : cuvil_uk_qmatmul_weights_size(k, rows);
    if (wbytes < 0 || wbytes > ir::kMaxTensorBytes) continue;
    HostTensor packed(DType::kInt8, {wbytes});
    std::vector<int32_t> sums(rows);
    if (conv) {
      cuvil_uk_pack_qconv_weights(centered->data_as<int8_t>(), rows, k, packed.data_as<int8_t>(),
                                  sums.data());
    } else {
      cuvil_uk_pack_qmatmul_weights(centered->data_as<int8_t>(), k, rows, 0,
                                    packed.data_as<int8_t>(), sums.data());
    }
    // The exact int32 result is acc - comp (CUVIL_UK_QOUT_S32); mult and bias go unread.
    const PerTensorQ xq{x, 1.0f, xz != nullptr ? IntAt(*xz->constant, 0) : 0};
    std::optional<HostTensor> comp = Compensation(xq, sums);
    if (!comp) continue;
    const std::string base = n->name.empty() ? n->outputs[0]->name : n->name;
    n->inputs = {x, NewConstant(graph, base + ".qweights", std::move(packed)),
                 NewConstant(graph, base + ".qcomp", *std::move(comp)),
                 NewConstant(graph, base + ".qmult", HostTensor(DType::kFloat32, {rows})),
                 NewConstant(graph, base + ".qbias", HostTensor(DType::kFloat32, {rows}))};
    if (conv) {
      n->op_type = "CuvilQConv";
      n->attrs.erase("group");
      n->attrs[attr::kOutChannels] = rows;
      n->attrs[attr::kXZero] = xq.zero;
    } else {
      n->op_type = "CuvilQMatMul";
      n->attrs.clear();
      n->attrs[attr::kOutColumns] = rows;
    }
    n->attrs[attr::kOutType] = int64_t{CUVIL_UK_QOUT_S32};
    n->attrs[attr::kQLo] = 0.0f;
    n->attrs[attr::kQHi] = 0.0f;
    ++lowered;
  }
  return lowered;
}

int FuseQdqDepthwiseConvs(ir::Graph& graph) {
  int fused = 0;
  std::vector<ir::Node*> dead;
  auto uses = ir::UseCounts(graph);
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* conv = node.get();
    if (conv->op_type != "Conv" || attr::UkernelOf(*conv) != attr::UkernelKind::kDepthwise ||
        conv->inputs.size() > 3 || conv->has_attr(attr::kQXScale) || conv->outputs.size() != 1 ||
        !conv->has_input(0)) {
      continue;
    }
    ir::Node* dq = conv->inputs[0]->producer;
    auto xq = ScalarParams(dq, "DequantizeLinear");

    ir::Node* q = SoleConsumer(graph, conv->outputs[0], uses);
    auto yq = ScalarParams(q, "QuantizeLinear");
    if (!xq || !yq || q->inputs[0] != conv->outputs[0]) continue;
    conv->attrs[attr::kQXScale] = xq->scale;
    conv->attrs[attr::kQXZero] = xq->zero;
    conv->attrs[attr::kQXSigned] = int64_t{xq->data->type.dtype == DType::kInt8 ? 1 : 0};
    conv->attrs[attr::kQYScale] = yq->scale;
    conv->attrs[attr::kQYZero] = yq->zero;
    conv->attrs[attr::kQYSigned] = int64_t{q->outputs[0]->type.dtype == DType::kInt8 ? 1 : 0};
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
