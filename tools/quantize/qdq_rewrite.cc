#include "qdq_rewrite.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "onnx_access.h"

namespace cuvil::quantize {
namespace {

bool IsQuantizedOp(const std::string& op) { return op == "Conv" || op == "MatMul" || op == "Gemm"; }

int DefaultOpset(const onnx::ModelProto& model) {
  for (const auto& op : model.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") return static_cast<int>(op.version());
  }
  return 0;
}

// Scalar zero-point tensor of `type` holding `zp`.
onnx::TensorProto ZeroPointTensor(const std::string& name, ActivationType type, int32_t zp) {
  if (type == ActivationType::kUInt8) {
    return MakeTensor<uint8_t>(name, onnx::TensorProto::UINT8, {}, {static_cast<uint8_t>(zp)});
  }
  return MakeTensor<int8_t>(name, onnx::TensorProto::INT8, {}, {static_cast<int8_t>(zp)});
}

// Unique names: every tensor and node name the model uses is taken.
class Namer {
 public:
  explicit Namer(const onnx::GraphProto& g) {
    for (const auto& i : g.input()) taken_.insert(i.name());
    for (const auto& o : g.output()) taken_.insert(o.name());
    for (const auto& t : g.initializer()) taken_.insert(t.name());
    for (const auto& n : g.node()) {
      taken_.insert(n.name());
      for (const auto& o : n.output()) taken_.insert(o);
      for (const auto& i : n.input()) taken_.insert(i);
    }
  }
  std::string Make(const std::string& base) {
    std::string name = base;
    for (int k = 1; taken_.count(name) != 0; ++k) name = absl::StrCat(base, "_", k);
    taken_.insert(name);
    return name;
  }

 private:
  std::unordered_set<std::string> taken_;
};

onnx::NodeProto MakeNode(const std::string& op, const std::string& name,
                         std::vector<std::string> inputs, const std::string& output, int axis) {
  onnx::NodeProto n;
  n.set_op_type(op);
  n.set_name(name);
  for (auto& i : inputs) n.add_input(i);
  n.add_output(output);
  if (axis >= 0) {
    auto* a = n.add_attribute();
    a->set_name("axis");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(axis);
  }
  return n;
}

// Names that subgraphs (If/Loop/Scan bodies) read, at any depth.
void CollectSubgraphInputs(const onnx::GraphProto& g, std::unordered_set<std::string>& out) {
  for (const auto& n : g.node()) {
    for (const auto& a : n.attribute()) {
      auto visit = [&](const onnx::GraphProto& sub) {
        for (const auto& sn : sub.node()) {
          for (const auto& i : sn.input()) out.insert(i);
        }
        CollectSubgraphInputs(sub, out);
      };
      if (a.has_g()) visit(a.g());
      for (const auto& sub : a.graphs()) visit(sub);
    }
  }
}

// The per-channel axis of weight input `k` of `node`, or -1 for per tensor.
int WeightAxis(const onnx::NodeProto& node, int k, int rank, bool per_channel) {
  if (!per_channel || k != 1 || rank < 1) return -1;
  if (node.op_type() == "Conv") return 0;
  if (node.op_type() == "Gemm") return AttrInt(node, "transB", 0) != 0 ? 0 : 1;
  // MatMul: the output columns are B's last dimension.
  return rank >= 2 ? rank - 1 : -1;
}

}  // namespace

std::string NodeId(const onnx::NodeProto& node) {
  if (!node.name().empty()) return node.name();
  return node.output_size() > 0 ? node.output(0) : std::string();
}

absl::StatusOr<QuantPlan> PlanQuantization(const onnx::ModelProto& model,
                                           const QdqOptions& options) {
  int opset = DefaultOpset(model);
  if (opset < 10) {
    return absl::FailedPreconditionError(
        absl::StrCat("opset ", opset, " has no QuantizeLinear (needs >= 10)"));
  }
  if (options.per_channel && opset < 13) {
    return absl::FailedPreconditionError(
        absl::StrCat("per-channel quantization needs opset >= 13, the model has ", opset));
  }
  const onnx::GraphProto& g = model.graph();
  std::unordered_set<std::string> ids, initializers;
  for (const auto& n : g.node()) ids.insert(NodeId(n));
  for (const auto& t : g.initializer()) initializers.insert(t.name());
  for (const std::string& e : options.exclude) {
    if (ids.count(e) == 0)
      return absl::InvalidArgumentError(absl::StrCat("no node named '", e, "'"));
  }
  QuantPlan plan;
  std::unordered_set<std::string> seen;
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& n = g.node(i);
    if (!IsQuantizedOp(n.op_type()) || options.exclude.count(NodeId(n)) != 0) continue;
    if (n.input_size() < 2) continue;
    plan.nodes.push_back(i);
    for (int k = 0; k < 2; ++k) {
      const std::string& in = n.input(k);
      if (initializers.count(in) == 0 && seen.insert(in).second) plan.activations.push_back(in);
    }
  }
  return plan;
}

absl::StatusOr<RewriteResult> RewriteToQdq(onnx::ModelProto& model,
                                           const std::map<std::string, Range>& ranges,
                                           const QdqOptions& options) {
  auto plan = PlanQuantization(model, options);
  if (!plan.ok()) return plan.status();
  onnx::GraphProto& g = *model.mutable_graph();
  std::unordered_map<std::string, int> initializer_index;
  for (int i = 0; i < g.initializer_size(); ++i) initializer_index[g.initializer(i).name()] = i;
  Namer namer(g);
  const ActivationType act = options.activation_type;

  RewriteResult result;
  std::vector<onnx::TensorProto> new_initializers;
  // Nodes to insert before original node i, and input replacements of node i.
  std::map<int, std::vector<onnx::NodeProto>> before;
  std::map<int, std::map<int, std::string>> replace;
  std::map<std::string, QuantParams> act_params;
  // Weight (name, axis) -> its DequantizeLinear output and scales.
  std::map<std::pair<std::string, int>, std::pair<std::string, std::vector<float>>> weight_dq;

  for (int idx : plan->nodes) {
    const onnx::NodeProto& n = g.node(idx);
    QuantizedLayer layer;
    layer.node = NodeId(n);
    layer.op_type = n.op_type();
    // Check every quantizable input first, so a node is quantized entirely or not at all.
    bool ok = true;
    std::vector<std::vector<float>> weight_values(2);
    for (int k = 0; k < 2 && ok; ++k) {
      const std::string& in = n.input(k);
      auto it = initializer_index.find(in);
      if (it == initializer_index.end()) {
        ok = ranges.count(in) != 0;
        continue;
      }
      auto values = FloatValues(g.initializer(it->second));
      ok = values.ok();
      if (ok) weight_values[k] = std::move(*values);
    }
    if (!ok) {
      result.skipped.push_back(layer.node);
      continue;
    }
    float input_scale = 0;
    std::vector<float> w_scales;
    for (int k = 0; k < 2; ++k) {
      const std::string& in = n.input(k);
      auto it = initializer_index.find(in);
      if (it == initializer_index.end()) {
        // Activation: one Q -> DQ pair per tensor, shared by every quantized consumer.
        auto [pit, inserted] = act_params.try_emplace(in);
        if (inserted) {
          pit->second = ActivationParams(ranges.at(in), act);
          std::string scale = namer.Make(in + "_scale");
          std::string zp = namer.Make(in + "_zero_point");
          std::string q = namer.Make(in + "_quantized");
          std::string dq = namer.Make(in + "_dequantized");
          new_initializers.push_back(
              MakeTensor<float>(scale, onnx::TensorProto::FLOAT, {}, {pit->second.scale}));
          new_initializers.push_back(ZeroPointTensor(zp, act, pit->second.zero_point));
          before[idx].push_back(MakeNode("QuantizeLinear", namer.Make(in + "_QuantizeLinear"),
                                         {in, scale, zp}, q, -1));
          before[idx].push_back(MakeNode("DequantizeLinear", namer.Make(in + "_DequantizeLinear"),
                                         {q, scale, zp}, dq, -1));
          result.dequantized[in] = dq;
        }
        replace[idx][k] = result.dequantized[in];
        layer.activations.push_back(in);
        if (k == 0) input_scale = pit->second.scale;
        continue;
      }
      const onnx::TensorProto& t = g.initializer(it->second);
      std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
      int axis = WeightAxis(n, k, static_cast<int>(dims.size()), options.per_channel);
      auto key = std::make_pair(in, axis);
      auto wit = weight_dq.find(key);
      double sqnr = 0;
      if (wit == weight_dq.end()) {
        auto qw = QuantizeWeight(weight_values[k], dims, axis);
        if (!qw.ok()) return qw.status();
        std::vector<float> restored(weight_values[k].size());
        int64_t inner = 1;
        for (size_t d = static_cast<size_t>(axis) + 1; axis >= 0 && d < dims.size(); ++d)
          inner *= dims[d];
        for (size_t i = 0; i < restored.size(); ++i) {
          size_t c =
              axis >= 0 ? (i / static_cast<size_t>(inner)) % static_cast<size_t>(dims[axis]) : 0;
          restored[i] = static_cast<float>(qw->values[i]) * qw->scales[c];
        }
        sqnr = Sqnr(weight_values[k], restored);
        std::vector<int64_t> param_dims;
        if (axis >= 0) param_dims.push_back(static_cast<int64_t>(qw->scales.size()));
        std::string qname = namer.Make(in + "_quantized");
        std::string scale = namer.Make(in + "_scale");
        std::string zp = namer.Make(in + "_zero_point");
        std::string dq = namer.Make(in + "_dequantized");
        new_initializers.push_back(
            MakeTensor<int8_t>(qname, onnx::TensorProto::INT8, dims, qw->values));
        new_initializers.push_back(
            MakeTensor<float>(scale, onnx::TensorProto::FLOAT, param_dims, qw->scales));
        new_initializers.push_back(MakeTensor<int8_t>(zp, onnx::TensorProto::INT8, param_dims,
                                                      std::vector<int8_t>(qw->scales.size(), 0)));
        before[idx].push_back(MakeNode("DequantizeLinear", namer.Make(in + "_DequantizeLinear"),
                                       {qname, scale, zp}, dq, axis));
        wit = weight_dq.emplace(key, std::make_pair(dq, qw->scales)).first;
      }
      replace[idx][k] = wit->second.first;
      if (k == 1) {
        layer.weight = in;
        layer.weight_axis = axis;
        layer.weight_sqnr_db = sqnr;
        w_scales = wit->second.second;
      }
    }
    // Bias: int32 with scale input_scale * weight_scale when X is an activation and W a weight.
    bool bias_ok =
        options.int32_bias && n.input_size() >= 3 && !n.input(2).empty() && input_scale > 0 &&
        !w_scales.empty() &&
        (n.op_type() == "Conv" || (n.op_type() == "Gemm" && AttrFloat(n, "beta", 1.0f) == 1.0f));
    if (bias_ok) {
      auto bit = initializer_index.find(n.input(2));
      absl::StatusOr<std::vector<float>> bias = absl::NotFoundError("not an initializer");
      if (bit != initializer_index.end()) bias = FloatValues(g.initializer(bit->second));
      const size_t channels = w_scales.size();
      if (bias.ok() && g.initializer(bit->second).dims_size() == 1 &&
          (channels == 1 || bias->size() == channels)) {
        std::vector<float> b_scales(channels);
        for (size_t c = 0; c < channels; ++c) b_scales[c] = input_scale * w_scales[c];
        std::vector<int32_t> q(bias->size());
        bool fits = true;
        for (size_t i = 0; i < q.size() && fits; ++i) {
          double v = std::nearbyint(static_cast<double>((*bias)[i]) /
                                    static_cast<double>(b_scales[channels == 1 ? 0 : i]));
          fits = std::isfinite(v) && std::fabs(v) <= 2147483647.0;
          if (fits) q[i] = static_cast<int32_t>(v);
        }
        if (fits) {
          const std::string& in = n.input(2);
          std::vector<int64_t> param_dims;
          int axis = -1;
          if (channels > 1) {
            param_dims.push_back(static_cast<int64_t>(channels));
            axis = 0;
          }
          std::string qname = namer.Make(in + "_quantized");
          std::string scale = namer.Make(in + "_scale");
          std::string zp = namer.Make(in + "_zero_point");
          std::string dq = namer.Make(in + "_dequantized");
          new_initializers.push_back(MakeTensor<int32_t>(qname, onnx::TensorProto::INT32,
                                                         {static_cast<int64_t>(q.size())}, q));
          new_initializers.push_back(
              MakeTensor<float>(scale, onnx::TensorProto::FLOAT, param_dims, b_scales));
          new_initializers.push_back(MakeTensor<int32_t>(zp, onnx::TensorProto::INT32, param_dims,
                                                         std::vector<int32_t>(channels, 0)));
          before[idx].push_back(MakeNode("DequantizeLinear", namer.Make(in + "_DequantizeLinear"),
                                         {qname, scale, zp}, dq, axis));
          replace[idx][2] = dq;
          layer.int32_bias = true;
        }
      }
    }
    result.layers.push_back(std::move(layer));
  }

  // Rebuild the node list in order, each node preceded by the nodes it now reads.
  google::protobuf::RepeatedPtrField<onnx::NodeProto> nodes;
  for (int i = 0; i < g.node_size(); ++i) {
    if (auto it = before.find(i); it != before.end()) {
      for (auto& extra : it->second) *nodes.Add() = std::move(extra);
    }
    onnx::NodeProto* n = nodes.Add();
    *n = g.node(i);
    if (auto it = replace.find(i); it != replace.end()) {
      for (const auto& [k, name] : it->second) n->set_input(k, name);
    }
  }
  g.mutable_node()->Swap(&nodes);

  // Drop initializers nothing reads any more (and their graph-input entries, old IR style).
  std::unordered_set<std::string> used;
  for (const auto& n : g.node()) {
    for (const auto& i : n.input()) used.insert(i);
  }
  for (const auto& o : g.output()) used.insert(o.name());
  CollectSubgraphInputs(g, used);
  std::unordered_set<std::string> removed;
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (auto& t : *g.mutable_initializer()) {
    if (used.count(t.name()) == 0) {
      removed.insert(t.name());
    } else {
      *kept.Add() = std::move(t);
    }
  }
  for (auto& t : new_initializers) *kept.Add() = std::move(t);
  g.mutable_initializer()->Swap(&kept);
  if (!removed.empty()) {
    google::protobuf::RepeatedPtrField<onnx::ValueInfoProto> inputs;
    for (auto& in : *g.mutable_input()) {
      if (removed.count(in.name()) == 0) *inputs.Add() = std::move(in);
    }
    g.mutable_input()->Swap(&inputs);
  }
  return result;
}

}  // namespace cuvil::quantize
