// Convolution fusion: BatchNormalization folding, residual Add and activation epilogues, weight
// packing for the runtime microkernels (runtime/ukernels). Each fused node disappears and the
// Conv takes over its output value, so the memory plan and the kernel table only ever see the
// surviving nodes.
#include "fuse_conv.h"

#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/str_cat.h"
#include "cuvil/runtime/ukernels.h"
#include "internal_attrs.h"

namespace cuvil {
namespace {

// Float32 with static channels (dim 1); the batch and the spatial dims may be symbolic (the
// microkernel takes the geometry at run time).
bool IsStaticFloat32(const ir::Value* v) {
  if (v == nullptr || v->type.dtype != DType::kFloat32) return false;
  return v->type.shape.size() >= 2 && v->type.shape[1].IsStatic();
}

bool IsConstFloat32(const ir::Value* v, int64_t elements) {
  return v != nullptr && v->is_constant() && v->constant->dtype() == DType::kFloat32 &&
         v->constant->num_elements() == elements;
}

// A 2-D float32 Conv with constant weights, constant (or no) bias and nothing fused yet.
bool IsPlainConv(const ir::Node* n) {
  if (n == nullptr || n->op_type != "Conv" || n->has_attr(attr::kUkernel)) return false;
  if (n->has_attr(attr::kFusedAct) || n->has_attr(attr::kFusedResidual)) return false;
  if (n->inputs.size() < 2 || n->inputs.size() > 3 || n->outputs.size() != 1) return false;
  const ir::Value* x = n->inputs[0];
  const ir::Value* w = n->inputs[1];
  if (!IsStaticFloat32(x) || x->type.rank() != 4 || !IsStaticFloat32(n->outputs[0])) return false;
  if (w == nullptr || !w->is_constant() || w->constant->dtype() != DType::kFloat32 ||
      w->constant->shape().size() != 4) {
    return false;
  }
  int64_t m = w->constant->shape()[0];
  return !n->has_input(2) || IsConstFloat32(n->inputs[2], m);
}

// The Conv producing `v` when `v` feeds only one node and is not a graph output.
ir::Node* SoleUseConv(const ir::Value* v, const std::map<const ir::Value*, int>& uses) {
  if (v == nullptr || v->is_graph_output || v->producer == nullptr) return nullptr;
  auto it = uses.find(v);
  if (it == uses.end() || it->second != 1) return nullptr;
  return v->producer->op_type == "Conv" ? v->producer : nullptr;
}

// The Conv takes over `fused`'s output; `fused` is erased by the caller.
void TakeOverOutput(ir::Node* conv, ir::Node* fused) {
  ir::Value* out = fused->outputs[0];
  conv->outputs[0] = out;
  out->producer = conv;
}

ir::Value* NewConstant(ir::Graph& graph, const std::string& name, HostTensor t) {
  ir::Value* v = graph.NewValue(name);
  graph.MakeConstant(v, std::move(t));
  return v;
}

// Conv -> BatchNormalization: W'[m] = W[m] * s[m], b'[m] = (b[m] - mean[m]) * s[m] + beta[m] with
// s = scale / sqrt(var + epsilon), computed in double.
bool FoldBatchNorms(ir::Graph& graph) {
  auto uses = ir::UseCounts(graph);
  std::vector<ir::Node*> dead;
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* bn = node.get();
    if (bn->op_type != "BatchNormalization" || bn->inputs.size() != 5) continue;
    if (bn->outputs.empty() || bn->outputs[0] == nullptr) continue;
    bool extra_outputs = false;
    for (size_t i = 1; i < bn->outputs.size(); ++i) extra_outputs |= bn->outputs[i] != nullptr;
    ir::Node* conv = SoleUseConv(bn->inputs[0], uses);
    if (extra_outputs || !IsPlainConv(conv)) continue;
    const HostTensor& w = *conv->inputs[1]->constant;
    const int64_t m = w.shape()[0], per = w.num_elements() / std::max<int64_t>(m, 1);
    bool ok = true;
    for (size_t i = 1; i < 5; ++i) ok &= IsConstFloat32(bn->inputs[i], m);
    if (!ok) continue;
    const float* scale = bn->inputs[1]->constant->data_as<float>();
    const float* shift = bn->inputs[2]->constant->data_as<float>();
    const float* mean = bn->inputs[3]->constant->data_as<float>();
    const float* var = bn->inputs[4]->constant->data_as<float>();
    const double eps = bn->attr_float("epsilon", 1e-5f);
    HostTensor nw(DType::kFloat32, w.shape());
    HostTensor nb(DType::kFloat32, {m});
    const float* old_b = conv->has_input(2) ? conv->inputs[2]->constant->data_as<float>() : nullptr;
    for (int64_t o = 0; o < m; ++o) {
      double s = scale[o] / std::sqrt(static_cast<double>(var[o]) + eps);
      for (int64_t i = 0; i < per; ++i) {
        nw.data_as<float>()[o * per + i] = static_cast<float>(w.data_as<float>()[o * per + i] * s);
      }
      double b = old_b != nullptr ? old_b[o] : 0.0;
      nb.data_as<float>()[o] = static_cast<float>((b - mean[o]) * s + shift[o]);
    }
    conv->inputs.resize(3);
    conv->inputs[1] = NewConstant(graph, conv->inputs[1]->name + ".bn", std::move(nw));
    conv->inputs[2] = NewConstant(graph, bn->name + ".bias", std::move(nb));
    TakeOverOutput(conv, bn);
    dead.push_back(bn);
  }
  graph.EraseNodes(dead);
  return !dead.empty();
}

// Inference BatchNormalization -> Relu: the Relu becomes the BatchNormalization's `fused_relu`
// (DenseNet's pre-activation BN + ReLU before each conv: one pass over the tensor, not two).
bool FuseBatchNormRelu(ir::Graph& graph) {
  auto uses = ir::UseCounts(graph);
  std::vector<ir::Node*> dead;
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* relu = node.get();
    if (relu->op_type != "Relu" || relu->inputs.size() != 1 || relu->outputs.size() != 1) continue;
    const ir::Value* v = relu->inputs[0];
    if (v == nullptr || v->is_graph_output || v->producer == nullptr) continue;
    ir::Node* bn = v->producer;
    auto use = uses.find(v);
    if (bn->op_type != "BatchNormalization" || bn->outputs.size() != 1 ||
        bn->attr_int("training_mode", 0) != 0 || bn->has_attr(attr::kFusedRelu) ||
        use == uses.end() || use->second != 1 || !IsFloat(v->type.dtype)) {
      continue;
    }
    bn->attrs[attr::kFusedRelu] = int64_t{1};
    TakeOverOutput(bn, relu);
    dead.push_back(relu);
  }
  graph.EraseNodes(dead);
  return !dead.empty();
}

// Add(conv, other) -> Conv with `other` as input 3, when `other` is computed before the Conv
// runs. With two candidate Convs the later one takes the residual (PyTorch exports a ResNet
// downsample branch after the main branch).
bool FuseResidualAdds(ir::Graph& graph) {
  auto uses = ir::UseCounts(graph);
  std::map<const ir::Node*, size_t> order;
  for (size_t i = 0; i < graph.nodes().size(); ++i) order[graph.nodes()[i].get()] = i;
  auto before = [&](const ir::Value* v, const ir::Node* conv) {
    return v->producer == nullptr || order.at(v->producer) < order.at(conv);
  };
  std::vector<ir::Node*> dead;
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* add = node.get();
    if (add->op_type != "Add" || add->inputs.size() != 2 || add->outputs.size() != 1) continue;
    ir::Value* a = add->inputs[0];
    ir::Value* b = add->inputs[1];
    if (a == nullptr || b == nullptr || a == b || a->type.dtype != DType::kFloat32 ||
        b->type.dtype != DType::kFloat32 || !(a->type.shape == b->type.shape)) {
      continue;
    }
    ir::Node* best = nullptr;
    ir::Value* other = nullptr;
    for (auto [mine, theirs] : {std::pair{a, b}, std::pair{b, a}}) {
      ir::Node* conv = SoleUseConv(mine, uses);
      if (!IsPlainConv(conv) || !before(theirs, conv)) continue;
      if (best == nullptr || order.at(conv) > order.at(best)) {
        best = conv;
        other = theirs;
      }
    }
    if (best == nullptr) continue;
    best->inputs.resize(4);
    best->inputs[3] = other;
    best->attrs[attr::kFusedResidual] = int64_t{1};
    TakeOverOutput(best, add);
    dead.push_back(add);
  }
  graph.EraseNodes(dead);
  return !dead.empty();
}

// Reads a Clip bound: an attribute before opset 11, else an optional constant scalar input.
std::optional<float> ClipBound(const ir::Node& clip, size_t input, const char* attr, float none) {
  if (clip.opset < 11) return clip.attr_float(attr, none);
  if (!clip.has_input(input)) return none;
  if (!IsConstFloat32(clip.inputs[input], 1)) return std::nullopt;
  return clip.inputs[input]->constant->data_as<float>()[0];
}

// Mul(c, Sigmoid(c)) -> SiLU and Mul(c, HardSigmoid(c) with alpha 1/6, beta 1/2) -> HardSwish, as
// exporters write them (EfficientNet's and RegNet's SiLU, MobileNetV3's hardswish before opset
// 14), when c is a Conv's output read only by the two. Returns the activation and the gate node,
// or nullopt.
std::optional<std::pair<int64_t, ir::Node*>> GatedActivation(
    const ir::Node& mul, const std::map<const ir::Value*, int>& uses) {
  if (mul.op_type != "Mul" || mul.inputs.size() != 2 || mul.outputs.size() != 1)
    return std::nullopt;
  for (int side = 0; side < 2; ++side) {
    const ir::Value* c = mul.inputs[side];
    const ir::Value* g = mul.inputs[1 - side];
    if (c == nullptr || g == nullptr || c == g || g->is_graph_output || c->is_graph_output)
      continue;
    ir::Node* gate = g->producer;
    if (gate == nullptr || gate->inputs.size() != 1 || gate->inputs[0] != c) continue;
    auto cu = uses.find(c), gu = uses.find(g);
    if (cu == uses.end() || cu->second != 2 || gu == uses.end() || gu->second != 1) continue;
    if (c->producer == nullptr || c->producer->op_type != "Conv") continue;
    if (gate->op_type == "Sigmoid") return std::make_pair(int64_t{CUVIL_UK_ACT_SILU}, gate);
    if (gate->op_type == "HardSigmoid" &&
        std::fabs(gate->attr_float("alpha", 0.2f) - 1.0f / 6.0f) < 1e-6f &&
        gate->attr_float("beta", 0.5f) == 0.5f) {
      return std::make_pair(int64_t{CUVIL_UK_ACT_HARDSWISH}, gate);
    }
  }
  return std::nullopt;
}

bool FuseActivations(ir::Graph& graph) {
  auto uses = ir::UseCounts(graph);
  std::vector<ir::Node*> dead;
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* act = node.get();
    if (act->inputs.empty() || act->outputs.size() != 1 || act->outputs[0] == nullptr) continue;
    if (auto gated = GatedActivation(*act, uses)) {
      ir::Node* conv = gated->second->inputs[0]->producer;
      if (conv->has_attr(attr::kFusedAct) || conv->has_attr(attr::kUkernel)) continue;
      if (!IsPlainConv(conv) && !conv->has_attr(attr::kFusedResidual)) continue;
      conv->attrs[attr::kFusedAct] = gated->first;
      conv->attrs[attr::kFusedAlpha] = 0.0f;
      conv->attrs[attr::kFusedBeta] = 0.0f;
      TakeOverOutput(conv, act);
      dead.push_back(gated->second);
      dead.push_back(act);
      continue;
    }
    ir::Node* conv = SoleUseConv(act->inputs[0], uses);
    if (conv == nullptr || conv->has_attr(attr::kFusedAct) || conv->has_attr(attr::kUkernel))
      continue;
    if (!IsPlainConv(conv) && !conv->has_attr(attr::kFusedResidual)) continue;
    int64_t kind;
    float alpha = 0, beta = 0;
    const std::string& op = act->op_type;
    if (op == "Relu") {
      kind = CUVIL_UK_ACT_RELU;
    } else if (op == "Clip") {
      constexpr float kInf = std::numeric_limits<float>::infinity();
      auto lo = ClipBound(*act, 1, "min", -kInf), hi = ClipBound(*act, 2, "max", kInf);
      if (!lo || !hi) continue;
      kind = CUVIL_UK_ACT_CLIP;
      alpha = *lo;
      beta = *hi;
    } else if (op == "HardSigmoid") {
      kind = CUVIL_UK_ACT_HARDSIGMOID;
      alpha = act->attr_float("alpha", 0.2f);
      beta = act->attr_float("beta", 0.5f);
    } else if (op == "HardSwish") {
      kind = CUVIL_UK_ACT_HARDSWISH;
    } else if (op == "Sigmoid") {
      kind = CUVIL_UK_ACT_SIGMOID;
    } else {
      continue;
    }
    conv->attrs[attr::kFusedAct] = kind;
    conv->attrs[attr::kFusedAlpha] = alpha;
    conv->attrs[attr::kFusedBeta] = beta;
    TakeOverOutput(conv, act);
    dead.push_back(act);
  }
  graph.EraseNodes(dead);
  return !dead.empty();
}

// Input channels below which the Winograd transforms cost more than the multiplies they save:
// with a short reduction each of the 16 GEMMs stores as many M values as it multiplies into,
// and the output transform runs over every output channel. Min of 3-4 alternating runs on a
// Zen 5 thread, batch 1, Winograd against packed direct: SqueezeNet's 16 -> 64 at 55x55 0.49
// against 0.35 ms, 32 -> 128 at 27x27 0.35 against 0.335, Inception-v3's 32 -> 64 at 147x147
// 5.4 against 4.8; 48 -> 192 at 13x13 0.17 against 0.19 and 64 -> 256 0.26 against 0.33.
constexpr int64_t kWinogradMinChannels = 48;
// Output channels below which the packed direct kernel wins: the 16 small GEMMs per tile block
// have too few rows to amortise the input and output transforms. DenseNet-121's 3x3 layers (128
// in, 32 out) at batch 1 on a Zen 5 host, all layers of a size together: 28x28 4.6 ms packed
// against 5.3 Winograd, 14x14 2.5 against 3.3, 56x56 8.5 against 8.7.
constexpr int64_t kWinogradMinOutputChannels = 64;

// 2x2 output tiles per image below which Winograd loses to the packed direct kernel: its
// transformed weights are 16/9 the size of the plain ones, and with few tiles to reuse them on
// (resnet's 7x7 layers: 16 tiles) a layer streams weights instead of multiplying. At batch 1 on
// a Zen 5 host a 7x7x512 layer took 2.2 ms in Winograd form with cold weights, 1.6 ms packed;
// 14x14x256 (49 tiles) took 0.79 ms against 1.35 ms.
constexpr int64_t kWinogradMinTilesPerImage = 32;

// A 3x3, stride-1, undilated, ungrouped Conv with enough channels and output tiles: Winograd
// F(2x2, 3x3) does 16 / 36 of its multiplies (the runtime handles any padding and output size).
// Output sizes not known at compile time count as large.
bool WinogradPays(const ir::Node& conv, int64_t groups, int64_t c, int64_t m) {
  const std::vector<int64_t> one = {1, 1};
  const std::vector<int64_t>& shape = conv.inputs[1]->constant->shape();
  if (groups != 1 || shape.size() != 4 || shape[2] != 3 || shape[3] != 3 ||
      conv.attr_ints("strides", one) != one || conv.attr_ints("dilations", one) != one ||
      c < kWinogradMinChannels || m < kWinogradMinOutputChannels) {
    return false;
  }
  const auto& out = conv.outputs[0]->type.shape;
  if (out.size() == 4 && out[2].IsStatic() && out[3].IsStatic()) {
    const int64_t tiles = ((out[2].coef() + 1) / 2) * ((out[3].coef() + 1) / 2);
    if (tiles < kWinogradMinTilesPerImage) return false;
  }
  return true;
}

// Share of the taps x outputs multiply-adds that read input (not padding) below which a conv runs
// on the live-tap kernel: DeepLab's ASPP, 3x3 at dilation 12 over 14x14, reads input in 18% of
// them, and 7.4-8.1 ms of GEMM over all taps became 1.7-2.0 ms over live ones on a Zen 5 thread;
// an ordinary 3x3 pad-1 conv on 14x14 reads input in 91%.
constexpr double kMaxLiveTapShare = 0.5;

// The taps x outputs of one dimension that read input: sum over outputs of their live taps.
int64_t LiveTapOutputs(int64_t kernel, int64_t dilation, int64_t stride, int64_t pad, int64_t in,
                       int64_t out) {
  int64_t live = 0;
  for (int64_t o = 0; o < out; ++o) {
    for (int64_t t = 0; t < kernel; ++t) {
      const int64_t at = o * stride - pad + t * dilation;
      live += at >= 0 && at < in ? 1 : 0;
    }
  }
  return live;
}

// A 2-D Conv of static spatial size whose taps read mostly padding (wide dilations, pads as large
// as the map): the runtime computes each tap over its live outputs only (CUVIL_UK_CONV_TAP_MAJOR).
bool LiveTapsPay(const ir::Node& conv) {
  const std::vector<int64_t>& w = conv.inputs[1]->constant->shape();
  const auto& in = conv.inputs[0]->type.shape;
  const auto& out = conv.outputs[0]->type.shape;
  if (w.size() != 4 || in.size() != 4 || out.size() != 4 || conv.has_attr("auto_pad")) {
    return false;
  }
  for (size_t d : {2, 3}) {
    if (!in[d].IsStatic() || !out[d].IsStatic()) return false;
  }
  const std::vector<int64_t> one = {1, 1};
  const std::vector<int64_t> strides = conv.attr_ints("strides", one);
  const std::vector<int64_t> dilations = conv.attr_ints("dilations", one);
  const std::vector<int64_t> pads = conv.attr_ints("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4) return false;
  double share = 1;
  for (size_t d = 0; d < 2; ++d) {
    const int64_t outs = out[d + 2].coef(), kernel = w[d + 2];
    if (outs <= 0 || kernel <= 0) return false;
    share *= static_cast<double>(LiveTapOutputs(kernel, dilations[d], strides[d], pads[d],
                                                in[d + 2].coef(), outs)) /
             static_cast<double>(outs * kernel);
  }
  return share < kMaxLiveTapShare;
}

// Packs the weights of every eligible Conv (depthwise ones keep ONNX's layout): into `images`
// when given and the weights have no other reader, else into a new constant.
absl::Status PackWeights(ir::Graph& graph, ConstantImages* images) {
  const auto uses = ir::UseCounts(graph);
  for (auto& node : graph.mutable_nodes()) {
    ir::Node* conv = node.get();
    if (conv->op_type != "Conv" || conv->has_attr(attr::kUkernel)) continue;
    bool fused = conv->has_attr(attr::kFusedAct) || conv->has_attr(attr::kFusedResidual);
    // IsPlainConv rejects fused nodes and the residual input; check them without those.
    std::vector<ir::Value*> saved = conv->inputs;
    std::map<std::string, ir::Attribute> saved_attrs = conv->attrs;
    if (conv->inputs.size() > 3) conv->inputs.resize(3);
    conv->attrs.erase(attr::kFusedAct);
    conv->attrs.erase(attr::kFusedResidual);
    bool eligible = IsPlainConv(conv);
    conv->inputs = saved;
    conv->attrs = saved_attrs;
    if (!eligible) {
      if (fused) return absl::InternalError(conv->Describe() + ": fused but not packable");
      continue;
    }
    const HostTensor& w = *conv->inputs[1]->constant;
    const int64_t groups = conv->attr_int("group", 1);
    const int64_t c = conv->inputs[0]->type.shape[1].coef(), m = w.shape()[0];
    if (groups == c && groups == m && w.shape()[1] == 1) {
      attr::SetUkernel(*conv, attr::UkernelKind::kDepthwise);
      continue;
    }
    const ir::Value* weights = conv->inputs[1];
    auto use = uses.find(weights);
    const bool sole_reader =
        images != nullptr && !weights->is_graph_output && use != uses.end() && use->second == 1;
    if (WinogradPays(*conv, groups, c, m)) {
      const int64_t size = cuvil_uk_winograd_weights_size(m, c);
      if (size < 0 || size > ir::kMaxTensorBytes / 4) {
        return absl::InvalidArgumentError(conv->Describe() + ": weights too large");
      }
      attr::SetUkernel(*conv, attr::UkernelKind::kWinograd);
      if (sole_reader) {
        (*images)[weights] = {size * 4, [m, c](const uint8_t* src, uint8_t* dst) {
                                cuvil_uk_pack_winograd_weights(reinterpret_cast<const float*>(src),
                                                               m, c, reinterpret_cast<float*>(dst));
                              }};
        continue;
      }
      HostTensor packed(DType::kFloat32, {size});
      cuvil_uk_pack_winograd_weights(w.data_as<float>(), m, c, packed.data_as<float>());
      conv->inputs[1] = NewConstant(graph, conv->inputs[1]->name + ".winograd", std::move(packed));
      continue;
    }
    const int64_t k = w.num_elements() / m;
    const int64_t size = cuvil_uk_packed_conv_weights_size(groups, m / groups, k);
    if (size < 0 || size > ir::kMaxTensorBytes / 4) {
      return absl::InvalidArgumentError(conv->Describe() + ": weights too large");
    }
    const bool live_taps = LiveTapsPay(*conv);
    const int64_t cg = w.shape()[1], taps = k / cg;
    // The one packing both paths share: tap-major rows for the live-tap kernel.
    auto pack = [groups, mg = m / groups, k, cg, taps, live_taps](const float* src, float* dst) {
      if (live_taps) {
        cuvil_uk_pack_conv_weights_tap_major(src, groups, mg, cg, taps, dst);
      } else {
        cuvil_uk_pack_conv_weights(src, groups, mg, k, dst);
      }
    };
    attr::SetUkernel(
        *conv, live_taps ? attr::UkernelKind::kPackedLiveTaps : attr::UkernelKind::kPackedGemm);
    if (sole_reader) {
      (*images)[weights] = {size * 4, [pack](const uint8_t* src, uint8_t* dst) {
                              pack(reinterpret_cast<const float*>(src),
                                   reinterpret_cast<float*>(dst));
                            }};
      continue;
    }
    HostTensor packed(DType::kFloat32, {size});
    pack(w.data_as<float>(), packed.data_as<float>());
    conv->inputs[1] = NewConstant(graph, conv->inputs[1]->name + ".packed", std::move(packed));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FuseConvolutions(ir::Graph& graph, ConstantImages* images) {
  FoldBatchNorms(graph);
  FuseBatchNormRelu(graph);
  FuseResidualAdds(graph);
  FuseActivations(graph);
  return PackWeights(graph, images);
}

}  // namespace cuvil
