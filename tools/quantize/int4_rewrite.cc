#include "int4_rewrite.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "onnx_access.h"
#include "qdq_rewrite.h"
#include "quant_params.h"

namespace cuvil::quantize {
namespace {

constexpr char kMicrosoftDomain[] = "com.microsoft";

// W as [N][K] (row n holds output n's weights) from B = [K, N], or [N, K] when transposed.
std::vector<float> ColumnsOf(const std::vector<float>& b, int64_t rows, int64_t cols,
                             bool transposed) {
  if (transposed) return b;  // Already [N][K].
  std::vector<float> w(b.size());
  for (int64_t k = 0; k < rows; ++k) {
    for (int64_t n = 0; n < cols; ++n) w[n * rows + k] = b[k * cols + n];
  }
  return w;
}

struct Quantized {
  std::vector<uint8_t> q4;         // [N][blocks][block / 2]
  std::vector<float> scales;       // [N * blocks]
  std::vector<uint8_t> zeros;      // [N][ceil(blocks / 2)]
  std::vector<float> dequantised;  // [N][K], what the model now computes with
};

Quantized QuantizeColumns(const std::vector<float>& w, int64_t n_dim, int64_t k_dim,
                          int64_t block) {
  const int64_t blocks = (k_dim + block - 1) / block;
  const int64_t per_column = (blocks + 1) / 2;
  Quantized out;
  out.q4.assign(static_cast<size_t>(n_dim * blocks * block / 2), 0);
  out.scales.resize(static_cast<size_t>(n_dim * blocks));
  out.zeros.assign(static_cast<size_t>(n_dim * per_column), 0);
  out.dequantised.resize(w.size());
  for (int64_t n = 0; n < n_dim; ++n) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t k0 = b * block, k1 = std::min(k_dim, k0 + block);
      float lo = 0, hi = 0;  // The range always holds 0, so 0 stays exact.
      for (int64_t k = k0; k < k1; ++k) {
        lo = std::min(lo, w[n * k_dim + k]);
        hi = std::max(hi, w[n * k_dim + k]);
      }
      const float scale = hi > lo ? (hi - lo) / 15.0f : 1.0f;
      const int zero = std::clamp(static_cast<int>(std::lround(-lo / scale)), 0, 15);
      out.scales[n * blocks + b] = scale;
      out.zeros[n * per_column + b / 2] |= static_cast<uint8_t>(b % 2 == 0 ? zero : zero << 4);
      for (int64_t k = k0; k < k0 + block; ++k) {
        // Padding past K holds the zero point (a zero weight); MatMulNBits ignores it anyway.
        int q = zero;
        if (k < k1) {
          q = std::clamp(static_cast<int>(std::lround(w[n * k_dim + k] / scale)) + zero, 0, 15);
          out.dequantised[n * k_dim + k] = static_cast<float>(q - zero) * scale;
        }
        uint8_t& byte = out.q4[(n * blocks * block + k) / 2];
        byte |= static_cast<uint8_t>(k % 2 == 0 ? q : q << 4);
      }
    }
  }
  return out;
}

onnx::AttributeProto IntAttr(const char* name, int64_t v) {
  onnx::AttributeProto a;
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
  return a;
}

}  // namespace

absl::StatusOr<std::vector<Int4Layer>> RewriteWeightsInt4(onnx::ModelProto& model,
                                                          const Int4Options& options) {
  if (options.block < 16 || options.block % 16 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("int4 block size ", options.block, " is not a positive multiple of 16"));
  }
  onnx::GraphProto* g = model.mutable_graph();
  std::unordered_set<std::string> ids;
  for (const auto& n : g->node()) ids.insert(NodeId(n));
  for (const std::string& e : options.exclude) {
    if (ids.count(e) == 0)
      return absl::InvalidArgumentError(absl::StrCat("no node named '", e, "'"));
  }
  std::map<std::string, int> initializer;
  for (int i = 0; i < g->initializer_size(); ++i) initializer[g->initializer(i).name()] = i;
  std::vector<Int4Layer> layers;
  std::vector<onnx::TensorProto> added;
  // Weights several nodes read are packed once per layout (B name, transB): prefix and SQNR.
  std::map<std::pair<std::string, bool>, std::pair<std::string, double>> packed;
  for (onnx::NodeProto& node : *g->mutable_node()) {
    const bool gemm = node.op_type() == "Gemm";
    if ((!gemm && node.op_type() != "MatMul") || !node.domain().empty() ||
        options.exclude.count(NodeId(node)) != 0 || node.input_size() < 2) {
      continue;
    }
    auto it = initializer.find(node.input(1));
    if (it == initializer.end()) continue;
    const onnx::TensorProto& b = g->initializer(it->second);
    if (b.dims_size() != 2) continue;
    const bool trans_b = gemm && AttrInt(node, "transB", 0) != 0;
    if (gemm && (AttrInt(node, "transA", 0) != 0 || AttrFloat(node, "alpha", 1.0f) != 1.0f)) {
      continue;
    }
    auto values = FloatValues(b);
    if (!values.ok()) continue;
    const int64_t k_dim = trans_b ? b.dims(1) : b.dims(0);
    const int64_t n_dim = trans_b ? b.dims(0) : b.dims(1);
    std::string bias;
    if (gemm && node.input_size() > 2 && !node.input(2).empty()) {
      auto c = initializer.find(node.input(2));
      if (c == initializer.end() || AttrFloat(node, "beta", 1.0f) != 1.0f) continue;
      const onnx::TensorProto& ct = g->initializer(c->second);
      if (ct.data_type() != onnx::TensorProto::FLOAT || ct.dims_size() != 1 ||
          ct.dims(0) != n_dim) {
        continue;
      }
      bias = node.input(2);
    }
    auto [entry, first] = packed.try_emplace({node.input(1), trans_b});
    if (first) {
      // The other layout of the same weights, when a node read it first, gets its own names.
      const bool other_layout = packed.count({node.input(1), !trans_b}) != 0;
      const std::string prefix = absl::StrCat(node.input(1), other_layout ? ".int4t" : ".int4");
      const std::vector<float> w = ColumnsOf(*values, b.dims(0), b.dims(1), trans_b);
      Quantized q = QuantizeColumns(w, n_dim, k_dim, options.block);
      const int64_t blocks = (k_dim + options.block - 1) / options.block;
      added.push_back(
          MakeTensor(prefix, onnx::TensorProto::UINT8, {n_dim, blocks, options.block / 2}, q.q4));
      added.push_back(
          MakeTensor(prefix + ".scales", onnx::TensorProto::FLOAT, {n_dim * blocks}, q.scales));
      added.push_back(MakeTensor(prefix + ".zero_points", onnx::TensorProto::UINT8,
                                 {static_cast<int64_t>(q.zeros.size())}, q.zeros));
      entry->second = {prefix, Sqnr(w, q.dequantised)};
    }
    const std::string prefix = entry->second.first;
    Int4Layer layer{NodeId(node), node.op_type(), k_dim, n_dim, entry->second.second};
    const std::string a = node.input(0);
    node.clear_input();
    node.clear_attribute();
    node.set_op_type("MatMulNBits");
    node.set_domain(kMicrosoftDomain);
    for (const std::string& in : {a, prefix, prefix + ".scales", prefix + ".zero_points"}) {
      node.add_input(in);
    }
    if (!bias.empty()) {
      node.add_input("");  // g_idx
      node.add_input(bias);
    }
    *node.add_attribute() = IntAttr("K", k_dim);
    *node.add_attribute() = IntAttr("N", n_dim);
    *node.add_attribute() = IntAttr("bits", 4);
    *node.add_attribute() = IntAttr("block_size", options.block);
    layers.push_back(std::move(layer));
  }
  if (layers.empty()) return layers;
  for (onnx::TensorProto& t : added) *g->add_initializer() = std::move(t);
  // Drop the float weights nothing reads any more (graph inputs and outputs count as readers).
  std::unordered_set<std::string> read;
  for (const auto& n : g->node()) read.insert(n.input().begin(), n.input().end());
  for (const auto& o : g->output()) read.insert(o.name());
  std::unordered_set<std::string> dropped;
  for (const auto& t : g->initializer()) {
    if (read.count(t.name()) == 0) dropped.insert(t.name());
  }
  auto* inits = g->mutable_initializer();
  inits->erase(std::remove_if(inits->begin(), inits->end(),
                              [&](const onnx::TensorProto& t) { return dropped.count(t.name()); }),
               inits->end());
  // Below IR 4 initializers are listed as graph inputs too: those entries go with them.
  auto* inputs = g->mutable_input();
  inputs->erase(
      std::remove_if(inputs->begin(), inputs->end(),
                     [&](const onnx::ValueInfoProto& v) { return dropped.count(v.name()); }),
      inputs->end());
  bool has_domain = false;
  for (const auto& op : model.opset_import()) has_domain |= op.domain() == kMicrosoftDomain;
  if (!has_domain) {
    auto* op = model.add_opset_import();
    op->set_domain(kMicrosoftDomain);
    op->set_version(1);
  }
  return layers;
}

}  // namespace cuvil::quantize
