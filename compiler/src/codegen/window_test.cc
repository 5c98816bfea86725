// Pools and convolutions over symbolic spatial dims (ops/shape_nn.cc, kernels_nn.cc,
// window_dims.h): each case compiles one node once with its spatial dims free, then runs it on
// several input sizes and compares with a scalar reference written here from the ONNX / ONNX
// Runtime rules (ceil_mode's last-window rule, SAME_UPPER / SAME_LOWER pad splits,
// count_include_pad counting the pads but not a ceil_mode overhang, Indices as flat offsets).
// The sizes are chosen so that the ceil_mode clamp and the odd SAME pad both happen.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using Ints = std::vector<int64_t>;
using Floats = std::vector<float>;

// One windowed op: a pool, a global pool or a Conv over [N, C, spatial...].
struct Case {
  std::string op;  // MaxPool, AveragePool, Conv, GlobalMaxPool, GlobalAveragePool
  int64_t channels = 2;
  Ints kernel, strides, dilations, pads;  // empty: the op's defaults
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  bool count_include_pad = false;
  bool indices = false;      // MaxPool's second output
  int64_t out_channels = 0;  // Conv
  int64_t group = 1;         // Conv
  bool bias = true;          // Conv
  std::vector<Ints> sizes;   // spatial sizes to run, one compile
  int opset = 13;
};

size_t Rank(const Case& c) { return c.sizes.front().size(); }

Ints Or(const Ints& v, size_t n, int64_t fallback) { return v.empty() ? Ints(n, fallback) : v; }

// Per-dim geometry as ONNX Runtime computes it for a static input.
struct Geometry {
  Ints out, begin, end;
};

Geometry Reference(const Case& c, const Ints& in) {
  const size_t r = in.size();
  const Ints st = Or(c.strides, r, 1), dl = Or(c.dilations, r, 1), pads = Or(c.pads, 2 * r, 0);
  Geometry g{Ints(r), Ints(r), Ints(r)};
  for (size_t i = 0; i < r; ++i) {
    const int64_t extent = (c.kernel[i] - 1) * dl[i] + 1;
    if (c.auto_pad == "SAME_UPPER" || c.auto_pad == "SAME_LOWER") {
      g.out[i] = (in[i] + st[i] - 1) / st[i];
      const int64_t total = std::max<int64_t>(0, (g.out[i] - 1) * st[i] + extent - in[i]);
      g.begin[i] = c.auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
      g.end[i] = total - g.begin[i];
      continue;
    }
    g.begin[i] = c.auto_pad == "VALID" ? 0 : pads[i];
    g.end[i] = c.auto_pad == "VALID" ? 0 : pads[i + r];
    const int64_t span = in[i] + g.begin[i] + g.end[i] - extent;
    if (c.ceil_mode) {
      g.out[i] = static_cast<int64_t>(std::ceil(static_cast<double>(span) / st[i])) + 1;
      if ((g.out[i] - 1) * st[i] >= in[i] + g.begin[i]) --g.out[i];
    } else {
      g.out[i] = static_cast<int64_t>(std::floor(static_cast<double>(span) / st[i])) + 1;
    }
  }
  return g;
}

Ints RowMajor(const Ints& dims) {
  Ints s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

int64_t Product(const Ints& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// Visits every multi-index of `dims` in row-major order.
template <typename F>
void Each(const Ints& dims, F&& f) {
  if (Product(dims) == 0) return;
  Ints i(dims.size(), 0);
  for (;;) {
    f(i);
    size_t j = dims.size();
    while (j-- > 0) {
      if (++i[j] < dims[j]) break;
      i[j] = 0;
    }
    if (j == static_cast<size_t>(-1)) return;
  }
}

struct Expected {
  Ints shape;
  Floats y;
  std::vector<int64_t> indices;
};

// Pools, global pools and Conv on x [1, C, in...] (w [M, C/group, kernel...], b [M]).
Expected Compute(const Case& c, const Ints& in, const Floats& x, const Floats& w, const Floats& b) {
  const size_t r = in.size();
  const int64_t C = c.channels, plane = Product(in);
  const Ints in_strides = RowMajor(in);
  if (c.op == "GlobalMaxPool" || c.op == "GlobalAveragePool") {
    Expected e{{1, C}, Floats(C), {}};
    for (size_t i = 0; i < r; ++i) e.shape.push_back(1);
    for (int64_t ch = 0; ch < C; ++ch) {
      double acc = c.op == "GlobalMaxPool" ? -INFINITY : 0.0;
      for (int64_t i = 0; i < plane; ++i) {
        const float v = x[ch * plane + i];
        acc = c.op == "GlobalMaxPool" ? std::max<double>(acc, v) : acc + v;
      }
      e.y[ch] = static_cast<float>(c.op == "GlobalMaxPool" ? acc : acc / plane);
    }
    return e;
  }
  const Geometry g = Reference(c, in);
  const Ints st = Or(c.strides, r, 1), dl = Or(c.dilations, r, 1);
  const int64_t M = c.op == "Conv" ? c.out_channels : C, out_plane = Product(g.out);
  Expected e{{1, M}, Floats(M * out_plane), {}};
  e.shape.insert(e.shape.end(), g.out.begin(), g.out.end());
  if (c.indices) e.indices.resize(M * out_plane);
  const Ints out_strides = RowMajor(g.out);
  for (int64_t m = 0; m < M; ++m) {
    Each(g.out, [&](const Ints& o) {
      int64_t y_at = m * out_plane;
      for (size_t j = 0; j < r; ++j) y_at += o[j] * out_strides[j];
      double acc = c.op == "MaxPool" ? -INFINITY : 0.0;
      int64_t count = 0, best = m * plane;  // an empty window points at its plane's start
      auto tap = [&](int64_t ch, const Ints& kk, double weight) {
        bool inside = true, padded = true;
        int64_t at = ch * plane;
        for (size_t j = 0; j < r; ++j) {
          const int64_t pos = o[j] * st[j] + kk[j] * dl[j] - g.begin[j];
          inside = inside && pos >= 0 && pos < in[j];
          padded = padded && pos >= -g.begin[j] && pos < in[j] + g.end[j];
          at += pos * in_strides[j];
        }
        if (c.op == "AveragePool" && (c.count_include_pad ? padded : inside)) ++count;
        if (!inside) return;
        const float v = x[at];
        if (c.op == "MaxPool") {
          if (v > acc) best = at;
          acc = std::max<double>(acc, v);
        } else {
          acc += weight * v;
        }
      };
      if (c.op == "Conv") {
        const int64_t cg = C / c.group, mg = M / c.group, taps = Product(c.kernel);
        const int64_t grp = m / mg;
        acc = c.bias ? b[m] : 0.0;
        for (int64_t ci = 0; ci < cg; ++ci) {
          int64_t t = 0;
          Each(c.kernel, [&](const Ints& kk) {
            tap(grp * cg + ci, kk, w[(m * cg + ci) * taps + t]);
            ++t;
          });
        }
      } else {
        Each(c.kernel, [&](const Ints& kk) { tap(m, kk, 1.0); });
      }
      if (c.op == "AveragePool") acc /= static_cast<double>(count);
      e.y[y_at] = static_cast<float>(acc);
      if (c.indices) e.indices[y_at] = best;
    });
  }
  return e;
}

SymShape Spatial(const Case& c) {
  SymShape s;
  const char* names[] = {"D", "H", "W"};
  for (size_t i = 0; i < Rank(c); ++i) {
    const size_t name = 3 - Rank(c) + i;
    s.push_back(SymDim::Symbol(static_cast<int32_t>(i + 1), names[name]));
  }
  return s;
}

struct Loaded {
  std::unique_ptr<JitEngine> engine;
  std::unique_ptr<LoadedModel> model;
};

HostTensor Tensor(const Ints& shape, const Floats& v) {
  HostTensor t(DType::kFloat32, shape);
  std::copy(v.begin(), v.end(), t.data_as<float>());
  return t;
}

// Builds the one-node graph (batch and every spatial dim free; Conv weights constant), compiles
// and loads it; a null model (after a test failure) when any step fails.
Loaded Load(const Case& c, const Floats& w, const Floats& b) {
  const size_t r = Rank(c);
  ir::Graph g;
  g.opset = c.opset;
  g.symbol = "batch";
  g.symbols = {"batch"};
  const SymShape spatial = Spatial(c);
  const char* names[] = {"D", "H", "W"};
  for (size_t i = 0; i < r; ++i) g.symbols.push_back(names[3 - r + i]);
  ir::Value* x = g.NewValue("x");
  SymShape xs = {SymDim::Batch(), SymDim::Const(c.channels)};
  xs.insert(xs.end(), spatial.begin(), spatial.end());
  x->type = {DType::kFloat32, xs, true};
  x->is_graph_input = true;
  g.inputs.push_back(x);
  ir::Node* node = g.NewNode(c.op, "window");
  node->opset = c.opset;
  node->inputs.push_back(x);
  if (c.op == "Conv") {
    Ints ws = {c.out_channels, c.channels / c.group};
    ws.insert(ws.end(), c.kernel.begin(), c.kernel.end());
    ir::Value* wv = g.NewValue("w");
    g.MakeConstant(wv, Tensor(ws, w));
    node->inputs.push_back(wv);
    if (c.bias) {
      ir::Value* bv = g.NewValue("b");
      g.MakeConstant(bv, Tensor({c.out_channels}, b));
      node->inputs.push_back(bv);
    }
    node->attrs["group"] = c.group;
  }
  if (c.op != "GlobalMaxPool" && c.op != "GlobalAveragePool") {
    node->attrs["kernel_shape"] = c.kernel;
    if (!c.strides.empty()) node->attrs["strides"] = c.strides;
    if (!c.dilations.empty()) node->attrs["dilations"] = c.dilations;
    if (!c.pads.empty()) node->attrs["pads"] = c.pads;
    if (c.auto_pad != "NOTSET") node->attrs["auto_pad"] = c.auto_pad;
    if (c.ceil_mode) node->attrs["ceil_mode"] = int64_t{1};
    if (c.count_include_pad) node->attrs["count_include_pad"] = int64_t{1};
  }
  std::vector<std::string> outs = {"y"};
  if (c.indices) outs.push_back("indices");
  for (const std::string& name : outs) {
    ir::Value* v = g.NewValue(name);
    v->producer = node;
    v->is_graph_output = true;
    node->outputs.push_back(v);
    g.outputs.push_back(v);
    g.output_names.push_back(name);
  }
  auto model = CompileGraph(g);
  EXPECT_TRUE(model.ok()) << model.status();
  if (!model.ok()) return {};
  auto engine = JitEngine::Create();
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return {};
  auto loaded = (*engine)->Load("window/1", std::move(*model));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return {};
  return {std::move(*engine), std::move(*loaded)};
}

Floats Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Floats v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Compiles `c` once and checks it on every size of c.sizes.
void Check(const Case& c) {
  const size_t r = Rank(c);
  Floats w, b;
  if (c.op == "Conv") {
    w = Random(c.out_channels * (c.channels / c.group) * Product(c.kernel), 7);
    b = Random(c.out_channels, 8);
  }
  Loaded loaded = Load(c, w, b);
  ASSERT_NE(loaded.model, nullptr);
  uint32_t seed = 100;
  for (const Ints& in : c.sizes) {
    ASSERT_EQ(in.size(), r);
    std::string what = "input";
    for (int64_t d : in) what += " " + std::to_string(d);
    SCOPED_TRACE(what);
    Ints shape = {1, c.channels};
    shape.insert(shape.end(), in.begin(), in.end());
    const Floats x = Random(c.channels * Product(in), seed++);
    const Expected want = Compute(c, in, x, w, b);
    auto out = loaded.model->Run({Tensor(shape, x)});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ(out->size(), c.indices ? 2u : 1u);
    ASSERT_EQ((*out)[0].shape(), want.shape);
    const float* got = (*out)[0].data_as<float>();
    for (size_t i = 0; i < want.y.size(); ++i) {
      if (got[i] == want.y[i]) continue;  // -inf where a max pool window holds no element
      ASSERT_NEAR(got[i], want.y[i], 1e-5 + 1e-5 * std::abs(want.y[i])) << "y[" << i << "]";
    }
    if (c.indices) {
      ASSERT_EQ((*out)[1].shape(), want.shape);
      const int64_t* idx = (*out)[1].data_as<int64_t>();
      for (size_t i = 0; i < want.indices.size(); ++i) {
        ASSERT_EQ(idx[i], want.indices[i]) << "indices[" << i << "]";
      }
    }
  }
}

// googlenet's stem: 3x3 stride 2 in ceil mode (the float32 2-D microkernel), with an asymmetric
// pad. Sizes where the last window would start in the end pad and is dropped, and where not.
TEST(SymbolicWindowTest, MaxPoolCeilModeAsymmetricPads) {
  Case c;
  c.op = "MaxPool";
  c.kernel = {3, 3};
  c.strides = {2, 2};
  c.pads = {1, 0, 0, 2};
  c.ceil_mode = true;
  c.sizes = {{7, 8}, {6, 9}, {2, 3}, {1, 1}, {12, 5}};
  Check(c);
}

// Kernel 2, stride 2, pads 1/1 in ceil mode: the clamp of ceil((in + 2 - 2) / 2) to
// floor(in / 2) applies for odd sizes only.
TEST(SymbolicWindowTest, MaxPoolCeilModeClampWithIndices) {
  Case c;
  c.op = "MaxPool";
  c.kernel = {2, 2};
  c.strides = {2, 2};
  c.pads = {1, 1, 1, 1};
  c.ceil_mode = true;
  c.indices = true;
  c.opset = 12;
  c.sizes = {{4, 5}, {5, 4}, {3, 3}, {8, 7}};
  Check(c);
}

TEST(SymbolicWindowTest, MaxPoolDilated3dCeilMode) {
  Case c;
  c.op = "MaxPool";
  c.kernel = {2, 3, 2};
  c.strides = {2, 1, 2};
  c.dilations = {1, 2, 2};
  c.pads = {0, 1, 1, 1, 0, 0};
  c.ceil_mode = true;
  c.opset = 12;
  c.sizes = {{4, 6, 7}, {5, 5, 8}, {3, 4, 4}};
  Check(c);
}

TEST(SymbolicWindowTest, MaxPool1dSameLower) {
  Case c;
  c.op = "MaxPool";
  c.kernel = {4};
  c.strides = {3};
  c.auto_pad = "SAME_LOWER";
  c.sizes = {{10}, {11}, {12}, {2}, {1}};
  Check(c);
}

TEST(SymbolicWindowTest, MaxPool2dSameUpperDilatedOnTheMicrokernel) {
  Case c;
  c.op = "MaxPool";
  c.kernel = {3, 2};
  c.strides = {2, 3};
  c.dilations = {2, 1};
  c.auto_pad = "SAME_UPPER";
  c.opset = 12;
  c.sizes = {{7, 8}, {8, 9}, {5, 4}, {1, 2}};
  Check(c);
}

// inception_v3's 3x3 stride-1 pad-1 AveragePool counts the pads (count_include_pad 1).
TEST(SymbolicWindowTest, AveragePoolCountIncludePad) {
  Case c;
  c.op = "AveragePool";
  c.kernel = {3, 3};
  c.pads = {1, 1, 1, 1};
  c.count_include_pad = true;
  c.sizes = {{5, 7}, {8, 8}, {1, 3}};
  Check(c);
}

// ceil_mode's overhang past the end pad is not counted, even with count_include_pad.
TEST(SymbolicWindowTest, AveragePoolCeilModeAsymmetricPadsIncludingPads) {
  Case c;
  c.op = "AveragePool";
  c.kernel = {3, 2};
  c.strides = {2, 2};
  c.pads = {1, 0, 0, 1};
  c.ceil_mode = true;
  c.count_include_pad = true;
  c.sizes = {{6, 5}, {7, 6}, {4, 9}, {2, 2}};
  Check(c);
}

TEST(SymbolicWindowTest, AveragePoolCeilModeExcludingPads) {
  Case c;
  c.op = "AveragePool";
  c.kernel = {2, 2};
  c.strides = {2, 2};
  c.pads = {1, 1, 1, 1};
  c.ceil_mode = true;
  c.sizes = {{4, 5}, {5, 4}, {3, 3}};
  Check(c);
}

TEST(SymbolicWindowTest, AveragePoolSameUpperAndSameLower) {
  for (const char* pad : {"SAME_UPPER", "SAME_LOWER"}) {
    SCOPED_TRACE(pad);
    for (bool include : {false, true}) {
      Case c;
      c.op = "AveragePool";
      c.kernel = {3, 4};
      c.strides = {2, 3};
      c.auto_pad = pad;
      c.count_include_pad = include;
      c.sizes = {{7, 10}, {8, 11}, {6, 12}, {1, 1}};
      Check(c);
    }
  }
}

// densenet's transitions: 2x2 stride 2, VALID here, 1-D and 3-D too.
TEST(SymbolicWindowTest, AveragePoolValidAnyRank) {
  Case c1;
  c1.op = "AveragePool";
  c1.kernel = {2};
  c1.strides = {2};
  c1.auto_pad = "VALID";
  c1.sizes = {{9}, {10}, {2}};
  Check(c1);
  Case c3;
  c3.op = "AveragePool";
  c3.kernel = {2, 2, 2};
  c3.strides = {2, 2, 2};
  c3.sizes = {{4, 6, 5}, {3, 3, 7}};
  Check(c3);
}

// AveragePool's dilations (opset 19) go through the same window code.
TEST(SymbolicWindowTest, AveragePoolDilated3dCeilModeIncludingPads) {
  Case c;
  c.op = "AveragePool";
  c.kernel = {2, 2, 3};
  c.strides = {1, 2, 2};
  c.dilations = {2, 1, 2};
  c.pads = {1, 0, 1, 0, 1, 1};
  c.ceil_mode = true;
  c.count_include_pad = true;
  c.opset = 19;
  c.sizes = {{4, 5, 7}, {5, 6, 8}, {3, 3, 6}};
  Check(c);
}

TEST(SymbolicWindowTest, GlobalPools3d) {
  for (const char* op : {"GlobalMaxPool", "GlobalAveragePool"}) {
    SCOPED_TRACE(op);
    Case c;
    c.op = op;
    c.sizes = {{2, 3, 4}, {1, 5, 2}};
    Check(c);
  }
}

// r3d_18's layout: 3-D Conv with strides, asymmetric pads, dilations and groups.
TEST(SymbolicWindowTest, Conv3dStridedDilatedGrouped) {
  Case c;
  c.op = "Conv";
  c.channels = 4;
  c.kernel = {3, 2, 3};
  c.strides = {1, 2, 2};
  c.dilations = {1, 1, 2};
  c.pads = {1, 0, 2, 1, 1, 0};
  c.out_channels = 6;
  c.group = 2;
  c.sizes = {{4, 5, 9}, {3, 8, 6}, {1, 2, 4}};
  Check(c);
}

TEST(SymbolicWindowTest, Conv3dSameUpperNoBias) {
  Case c;
  c.op = "Conv";
  c.channels = 3;
  c.kernel = {3, 3, 3};
  c.strides = {2, 2, 1};
  c.auto_pad = "SAME_UPPER";
  c.out_channels = 5;
  c.bias = false;
  c.sizes = {{5, 6, 7}, {4, 7, 3}};
  Check(c);
}

TEST(SymbolicWindowTest, Conv1dSameLowerStrided) {
  Case c;
  c.op = "Conv";
  c.channels = 3;
  c.kernel = {4};
  c.strides = {3};
  c.auto_pad = "SAME_LOWER";
  c.out_channels = 2;
  c.sizes = {{10}, {11}, {12}, {1}};
  Check(c);
}

// 2-D float32 Conv with constant weights runs on the microkernel, whose pad words come from the
// run-time SAME split; and a wide row (more than the 1024 positions of one im2col tile) on the
// 3-D generic path with one row per tile.
TEST(SymbolicWindowTest, Conv2dSameLowerOnTheMicrokernel) {
  Case c;
  c.op = "Conv";
  c.channels = 3;
  c.kernel = {3, 4};
  c.strides = {2, 2};
  c.auto_pad = "SAME_LOWER";
  c.out_channels = 4;
  c.sizes = {{7, 9}, {8, 8}, {3, 2}};
  Check(c);
}

TEST(SymbolicWindowTest, Conv3dRowsWiderThanATile) {
  Case c;
  c.op = "Conv";
  c.channels = 2;
  c.kernel = {1, 2, 3};
  c.pads = {0, 1, 1, 0, 0, 1};
  c.out_channels = 3;
  c.sizes = {{2, 3, 1500}, {1, 4, 9}};
  Check(c);
}

}  // namespace
}  // namespace cuvil
