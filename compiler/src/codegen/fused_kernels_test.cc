// Accuracy of the vectorised transcendental approximations (KernelContext::Fast*) and agreement
// of the fused kernels (fuse_patterns.h), the run-time packed MatMul and the threaded Concat and
// Split with plain references.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/parallel.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

// Builds graphs node by node: every value is float32 with a shape given per value.
// Not thread-safe.
class GraphBuilder {
 public:
  GraphBuilder() {
    g_.opset = 13;
    g_.symbol = "batch";
  }
  ir::Value* Input(const std::string& name, SymShape shape) {
    ir::Value* v = g_.NewValue(name);
    v->type = {DType::kFloat32, std::move(shape), true};
    v->is_graph_input = true;
    g_.inputs.push_back(v);
    return v;
  }
  ir::Value* Const(const std::string& name, std::vector<int64_t> shape, std::vector<float> data) {
    HostTensor t(DType::kFloat32, std::move(shape));
    std::copy(data.begin(), data.end(), t.data_as<float>());
    ir::Value* v = g_.NewValue(name);
    g_.MakeConstant(v, std::move(t));
    return v;
  }
  ir::Value* Op(const std::string& op, std::vector<ir::Value*> ins,
                std::map<std::string, ir::Attribute> attrs = {}) {
    ir::Node* n = g_.NewNode(op, absl_name(op));
    n->opset = 13;
    ir::Value* v = g_.NewValue(n->name);
    v->producer = n;
    n->inputs = std::move(ins);
    n->outputs = {v};
    n->attrs = std::move(attrs);
    return v;
  }
  void Output(ir::Value* v) {
    v->is_graph_output = true;
    g_.outputs.push_back(v);
    g_.output_names.push_back("y");
  }
  ir::Graph& graph() { return g_; }

 private:
  std::string absl_name(const std::string& op) { return op + std::to_string(++count_); }
  ir::Graph g_;
  int count_ = 0;
};

struct Compiled {
  std::unique_ptr<JitEngine> engine;
  std::unique_ptr<LoadedModel> model;
};

Compiled Compile(ir::Graph& g) {
  auto model = CompileGraph(g);
  EXPECT_TRUE(model.ok()) << model.status();
  auto engine = JitEngine::Create();
  EXPECT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("test/1", std::move(*model));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  return {std::move(*engine), std::move(*loaded)};
}

HostTensor Floats(std::vector<int64_t> shape, const std::vector<float>& data) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::copy(data.begin(), data.end(), t.data_as<float>());
  return t;
}

std::vector<float> Sweep() {
  std::vector<float> xs;
  for (double x = -110; x <= 110; x += 0.00731) xs.push_back(static_cast<float>(x));
  for (double m = 1e-38; m < 10; m *= 1.37) {
    xs.push_back(static_cast<float>(m));
    xs.push_back(static_cast<float>(-m));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {0.0f, -0.0f, inf, -inf, 88.72f, 89.0f, -87.33f, -103.9f, 1e-45f, 0.625f, -0.625f,
                  1.0f, -1.0f, 4.0f, 3.9999f, 0.99999f}) {
    xs.push_back(x);
  }
  return xs;
}

void CheckUnary(const std::string& op, double (*ref)(double), double rel, double abs_large) {
  std::vector<float> xs = Sweep();
  xs.push_back(std::numeric_limits<float>::quiet_NaN());
  GraphBuilder b;
  ir::Value* x = b.Input("x", {SymDim::Batch()});
  b.Output(b.Op(op, {x}));
  Compiled c = Compile(b.graph());
  auto out = c.model->Run({Floats({static_cast<int64_t>(xs.size())}, xs)});
  ASSERT_TRUE(out.ok()) << out.status();
  const float* y = (*out)[0].data_as<float>();
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    double want = ref(xs[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(y[i])) << op << "(" << xs[i] << ")";
      continue;
    }
    if (std::isinf(static_cast<float>(want))) {  // Beyond FLT_MAX: float32 overflows to inf.
      want = static_cast<float>(want);
      EXPECT_EQ(y[i], want) << op << "(" << xs[i] << ")";
      continue;
    }
    double err = std::abs(y[i] - want);
    double tol = rel * std::abs(want) + (std::abs(xs[i]) >= 1 ? abs_large : 0) + 2e-38;
    worst = std::max(worst, err / (std::abs(want) + 1e-30));
    EXPECT_LE(err, tol) << op << "(" << xs[i] << ") = " << y[i] << ", want " << want;
  }
  std::printf("%s: %zu points, worst relative error %.3g\n", op.c_str(), xs.size(), worst);
}

double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double Exp(double x) { return std::exp(x); }
double Erf(double x) { return std::erf(x); }
double Tanh(double x) { return std::tanh(x); }

TEST(FastMathTest, Exp) { CheckUnary("Exp", Exp, 2.5e-7, 0); }
TEST(FastMathTest, Erf) { CheckUnary("Erf", Erf, 3e-7, 2e-7); }
TEST(FastMathTest, Tanh) { CheckUnary("Tanh", Tanh, 3.5e-7, 0); }
TEST(FastMathTest, Sigmoid) { CheckUnary("Sigmoid", Sigmoid, 4e-7, 0); }

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<std::string> KernelOps(const LoadedModel& m) {
  std::vector<std::string> ops;
  for (const auto& k : m.model().kernels) ops.push_back(k.op_type);
  return ops;
}

// NCHW convolution with symmetric padding `pad`, stride 1, in double.
std::vector<double> ReferenceConv(const std::vector<double>& x, int64_t n, int64_t c, int64_t h,
                                  int64_t w, const std::vector<float>& wt,
                                  const std::vector<float>& bias, int64_t m, int64_t k,
                                  int64_t pad) {
  const int64_t oh = h + 2 * pad - k + 1, ow = w + 2 * pad - k + 1;
  std::vector<double> y(n * m * oh * ow);
  for (int64_t b = 0; b < n; ++b) {
    for (int64_t o = 0; o < m; ++o) {
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          double s = bias[o];
          for (int64_t ci = 0; ci < c; ++ci) {
            for (int64_t ki = 0; ki < k; ++ki) {
              for (int64_t kj = 0; kj < k; ++kj) {
                const int64_t yi = i + ki - pad, xj = j + kj - pad;
                if (yi < 0 || yi >= h || xj < 0 || xj >= w) continue;
                s += wt[((o * c + ci) * k + ki) * k + kj] * x[((b * c + ci) * h + yi) * w + xj];
              }
            }
          }
          y[((b * m + o) * oh + i) * ow + j] = s;
        }
      }
    }
  }
  return y;
}

// Exporters write SiLU as Mul(x, Sigmoid(x)) and, before opset 14, hardswish as
// Mul(HardSigmoid(x; 1/6, 1/2), x): after a Conv both become its epilogue, in either operand
// order. A HardSigmoid with other parameters is not hardswish and stays as it is.
TEST(FusedKernelsTest, ConvGatedActivationsBecomeEpilogues) {
  constexpr int64_t kC = 4, kM = 8, kH = 9, kW = 9;
  std::vector<float> w1 = Random(kM * kC * 9, 11), b1 = Random(kM, 12);
  std::vector<float> w2 = Random(kM * kM, 13), b2 = Random(kM, 14);
  std::vector<float> w3 = Random(kM * kM, 15), b3 = Random(kM, 16);
  GraphBuilder b;
  ir::Value* x =
      b.Input("x", {SymDim::Batch(), SymDim::Const(kC), SymDim::Const(kH), SymDim::Const(kW)});
  auto conv = [&](ir::Value* in, const std::string& name, const std::vector<float>& w,
                  const std::vector<float>& bias, int64_t c, int64_t k) {
    return b.Op("Conv",
                {in, b.Const(name + ".w", {kM, c, k, k}, w), b.Const(name + ".b", {kM}, bias)},
                {{"kernel_shape", std::vector<int64_t>{k, k}},
                 {"pads", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2}}});
  };
  ir::Value* c1 = conv(x, "c1", w1, b1, kC, 3);
  ir::Value* silu = b.Op("Mul", {c1, b.Op("Sigmoid", {c1})});
  ir::Value* c2 = conv(silu, "c2", w2, b2, kM, 1);
  auto hard = [&](ir::Value* v, float alpha) {
    return b.Op("HardSigmoid", {v}, {{"alpha", alpha}, {"beta", 0.5f}});
  };
  ir::Value* hswish = b.Op("Mul", {hard(c2, 1.0f / 6.0f), c2});
  ir::Value* c3 = conv(hswish, "c3", w3, b3, kM, 1);
  b.Output(b.Op("Mul", {c3, hard(c3, 0.2f)}));
  Compiled c = Compile(b.graph());
  EXPECT_EQ(KernelOps(*c.model),
            (std::vector<std::string>{"Conv", "Conv", "Conv", "HardSigmoid", "Mul"}));

  constexpr int64_t kBatch = 2;
  std::vector<float> in = Random(kBatch * kC * kH * kW, 17, 3);
  auto out = c.model->Run({Floats({kBatch, kC, kH, kW}, in)});
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<double> v(in.begin(), in.end());
  v = ReferenceConv(v, kBatch, kC, kH, kW, w1, b1, kM, 3, 1);
  for (double& e : v) e = e / (1 + std::exp(-e));
  v = ReferenceConv(v, kBatch, kM, kH, kW, w2, b2, kM, 1, 0);
  for (double& e : v) e = e * std::min(1.0, std::max(0.0, e / 6 + 0.5));
  v = ReferenceConv(v, kBatch, kM, kH, kW, w3, b3, kM, 1, 0);
  for (double& e : v) e = e * std::min(1.0, std::max(0.0, 0.2 * e + 0.5));
  ASSERT_EQ((*out)[0].num_elements(), static_cast<int64_t>(v.size()));
  const float* got = (*out)[0].data_as<float>();
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_NEAR(got[i], v[i], 1e-4 + 1e-4 * std::abs(v[i])) << "at " << i;
  }
}

// DenseNet's pre-activation BatchNormalization -> Relu is one kernel; a BatchNormalization whose
// output has another reader keeps its Relu.
TEST(FusedKernelsTest, BatchNormReluIsOneKernel) {
  constexpr int64_t kC = 5, kH = 7, kW = 9;
  std::vector<float> scale = Random(kC, 21), shift = Random(kC, 22), mean = Random(kC, 23);
  std::vector<float> var = Random(kC, 24);
  for (float& v : var) v = std::fabs(v) + 0.1f;
  GraphBuilder b;
  ir::Value* x =
      b.Input("x", {SymDim::Batch(), SymDim::Const(kC), SymDim::Const(kH), SymDim::Const(kW)});
  auto bn = [&](ir::Value* in, const std::string& name) {
    return b.Op("BatchNormalization",
                {in, b.Const(name + ".s", {kC}, scale), b.Const(name + ".b", {kC}, shift),
                 b.Const(name + ".m", {kC}, mean), b.Const(name + ".v", {kC}, var)},
                {{"epsilon", 1e-3f}});
  };
  ir::Value* first = b.Op("Relu", {bn(x, "bn1")});
  ir::Value* second = bn(first, "bn2");
  b.Output(b.Op("Add", {b.Op("Relu", {second}), second}));
  Compiled c = Compile(b.graph());
  EXPECT_EQ(KernelOps(*c.model),
            (std::vector<std::string>{"BatchNormalization", "BatchNormalization", "Relu", "Add"}));

  constexpr int64_t kBatch = 3;
  std::vector<float> in = Random(kBatch * kC * kH * kW, 25, 2);
  auto out = c.model->Run({Floats({kBatch, kC, kH, kW}, in)});
  ASSERT_TRUE(out.ok()) << out.status();
  const float* got = (*out)[0].data_as<float>();
  for (int64_t i = 0; i < kBatch * kC * kH * kW; ++i) {
    const int64_t ch = (i / (kH * kW)) % kC;
    auto norm = [&](double v) {
      return (v - mean[ch]) / std::sqrt(var[ch] + 1e-3) * scale[ch] + shift[ch];
    };
    const double h = std::max(0.0, norm(in[i])), y = norm(h);
    EXPECT_NEAR(got[i], std::max(0.0, y) + y, 1e-5 + 1e-5 * std::abs(y)) << "at " << i;
  }
}

// The PyTorch export of nn.LayerNorm over the last axis, then GELU, becomes two kernels.
TEST(FusedKernelsTest, LayerNormAndGeluMatchTheUnfusedFormula) {
  constexpr int64_t kC = 40;
  GraphBuilder b;
  ir::Value* x = b.Input("x", {SymDim::Batch(), SymDim::Const(3), SymDim::Const(kC)});
  std::vector<float> gamma = Random(kC, 1), beta = Random(kC, 2);
  auto axes = std::map<std::string, ir::Attribute>{{"axes", std::vector<int64_t>{-1}}};
  ir::Value* mean = b.Op("ReduceMean", {x}, axes);
  ir::Value* dev = b.Op("Sub", {x, mean});
  ir::Value* sq = b.Op("Pow", {dev, b.Const("two", {}, {2})});
  ir::Value* var = b.Op("ReduceMean", {sq}, axes);
  ir::Value* std = b.Op("Sqrt", {b.Op("Add", {var, b.Const("eps", {}, {1e-5f})})});
  ir::Value* norm = b.Op("Div", {dev, std});
  ir::Value* ln =
      b.Op("Add", {b.Op("Mul", {norm, b.Const("g", {kC}, gamma)}), b.Const("b", {kC}, beta)});
  ir::Value* e = b.Op("Erf", {b.Op("Div", {ln, b.Const("sqrt2", {}, {1.4142135f})})});
  ir::Value* y = b.Op("Mul", {b.Op("Mul", {ln, b.Op("Add", {e, b.Const("one", {}, {1})})}),
                              b.Const("half", {}, {0.5f})});
  b.Output(y);
  Compiled c = Compile(b.graph());
  EXPECT_EQ(KernelOps(*c.model), (std::vector<std::string>{"LayerNormalization", "Gelu"}));

  constexpr int64_t kBatch = 2;
  std::vector<float> in = Random(kBatch * 3 * kC, 3, 4);
  auto out = c.model->Run({Floats({kBatch, 3, kC}, in)});
  ASSERT_TRUE(out.ok()) << out.status();
  const float* got = (*out)[0].data_as<float>();
  for (int64_t row = 0; row < kBatch * 3; ++row) {
    double m = 0, v = 0;
    for (int64_t i = 0; i < kC; ++i) m += in[row * kC + i];
    m /= kC;
    for (int64_t i = 0; i < kC; ++i) v += std::pow(in[row * kC + i] - m, 2);
    v /= kC;
    for (int64_t i = 0; i < kC; ++i) {
      double l = (in[row * kC + i] - m) / std::sqrt(v + 1e-5) * gamma[i] + beta[i];
      double want = l * 0.5 * (1 + std::erf(l / std::sqrt(2.0)));
      EXPECT_NEAR(got[row * kC + i], want, 1e-5 + 1e-5 * std::abs(want)) << row << "," << i;
    }
  }
}

// MatMul with a constant B, bias Add and GELU become one MatMul kernel with a fused epilogue;
// N = 37 leaves a partial last panel.
TEST(FusedKernelsTest, MatMulBiasGeluEpilogue) {
  constexpr int64_t kK = 23, kN = 37;
  std::vector<float> w = Random(kK * kN, 4), bias = Random(kN, 5);
  for (const char* act : {"Gelu", "Relu"}) {
    GraphBuilder b;
    ir::Value* x = b.Input("x", {SymDim::Batch(), SymDim::Const(kK)});
    ir::Value* mm = b.Op("MatMul", {x, b.Const("w", {kK, kN}, w)});
    ir::Value* biased = b.Op("Add", {b.Const("bias", {kN}, bias), mm});
    ir::Value* y;
    if (std::string(act) == "Relu") {
      y = b.Op("Relu", {biased});
    } else {
      ir::Value* e = b.Op("Erf", {b.Op("Mul", {biased, b.Const("r", {}, {0.70710678f})})});
      y = b.Op("Mul", {b.Op("Mul", {biased, b.Const("h", {}, {0.5f})}),
                       b.Op("Add", {b.Const("one", {}, {1}), e})});
    }
    b.Output(y);
    Compiled c = Compile(b.graph());
    EXPECT_EQ(KernelOps(*c.model), (std::vector<std::string>{"MatMul"})) << act;
    constexpr int64_t kBatch = 9;
    std::vector<float> in = Random(kBatch * kK, 6);
    auto out = c.model->Run({Floats({kBatch, kK}, in)});
    ASSERT_TRUE(out.ok()) << out.status();
    const float* got = (*out)[0].data_as<float>();
    for (int64_t m = 0; m < kBatch; ++m) {
      for (int64_t n = 0; n < kN; ++n) {
        double s = bias[n];
        for (int64_t k = 0; k < kK; ++k) s += static_cast<double>(in[m * kK + k]) * w[k * kN + n];
        double want = std::string(act) == "Relu" ? std::max(s, 0.0)
                                                 : s * 0.5 * (1 + std::erf(s / std::sqrt(2.0)));
        EXPECT_NEAR(got[m * kN + n], want, 1e-5 + 1e-5 * std::abs(want)) << act << m << "," << n;
      }
    }
  }
}

// Both operands are activations (attention): B is packed at run time. M = 6 and N = 19 leave
// partial row blocks and panels.
TEST(FusedKernelsTest, BatchedMatMulOfTwoActivations) {
  constexpr int64_t kH = 3, kM = 6, kK = 7, kN = 19, kBatch = 2;
  GraphBuilder b;
  ir::Value* a =
      b.Input("a", {SymDim::Batch(), SymDim::Const(kH), SymDim::Const(kM), SymDim::Const(kK)});
  ir::Value* bb =
      b.Input("b", {SymDim::Batch(), SymDim::Const(kH), SymDim::Const(kK), SymDim::Const(kN)});
  b.Output(b.Op("MatMul", {a, bb}));
  Compiled c = Compile(b.graph());
  std::vector<float> av = Random(kBatch * kH * kM * kK, 7), bv = Random(kBatch * kH * kK * kN, 8);
  auto out = c.model->Run({Floats({kBatch, kH, kM, kK}, av), Floats({kBatch, kH, kK, kN}, bv)});
  ASSERT_TRUE(out.ok()) << out.status();
  const float* got = (*out)[0].data_as<float>();
  for (int64_t mat = 0; mat < kBatch * kH; ++mat) {
    for (int64_t m = 0; m < kM; ++m) {
      for (int64_t n = 0; n < kN; ++n) {
        double s = 0;
        for (int64_t k = 0; k < kK; ++k) {
          s += static_cast<double>(av[(mat * kM + m) * kK + k]) * bv[(mat * kK + k) * kN + n];
        }
        EXPECT_NEAR(got[(mat * kM + m) * kN + n], s, 1e-5) << mat << "," << m << "," << n;
      }
    }
  }
}

// Concat and Split move flat ranges split over the intra-op threads: the ranges cut through
// images and parts at places no row boundary marks, and every element still lands where one
// thread's copy puts it.
TEST(FusedKernelsTest, ThreadedConcatAndSplitMoveEveryElement) {
  // One image (a batch of several would be split between the threads by whole images instead),
  // 64 parts' worth along the axis: 589,824 floats, enough for two chunks.
  constexpr int64_t kBatch = 1, kH = 96, kW = 96;
  const std::vector<int64_t> channels = {5, 17, 1, 41};
  for (int threads : {1, 2}) {
    SetIntraOpThreads(threads);
    for (int64_t axis : {1, 3}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", axis " + std::to_string(axis));
      // Part i has channels[i] along `axis` (the other dims as above), the concat their sum.
      auto shape_of = [&](int64_t along) {
        std::vector<int64_t> s = {kBatch, axis == 1 ? along : kW, kH, axis == 3 ? along : kW};
        return s;
      };
      GraphBuilder b;
      std::vector<ir::Value*> parts;
      int64_t total = 0;
      for (size_t i = 0; i < channels.size(); ++i) {
        std::vector<int64_t> s = shape_of(channels[i]);
        parts.push_back(b.Input(
            "x" + std::to_string(i),
            {SymDim::Batch(), SymDim::Const(s[1]), SymDim::Const(s[2]), SymDim::Const(s[3])}));
        total += channels[i];
      }
      ir::Value* cat = b.Op("Concat", parts, {{"axis", axis}});
      ir::Graph& g = b.graph();
      // Split the concat back, at other points (opset 13: equal parts without a split input).
      ir::Node* split = g.NewNode("Split", "split");
      split->opset = 13;
      split->inputs = {cat};
      split->attrs = {{"axis", axis}};
      for (int i = 0; i < 2; ++i) {
        ir::Value* v = g.NewValue("half" + std::to_string(i));
        v->producer = split;
        split->outputs.push_back(v);
      }
      b.Output(cat);
      for (ir::Value* v : split->outputs) b.Output(v);
      g.output_names = {"cat", "half0", "half1"};
      Compiled c = Compile(g);
      ASSERT_NE(c.model, nullptr);

      std::vector<HostTensor> in;
      std::vector<std::vector<float>> data;
      for (size_t i = 0; i < channels.size(); ++i) {
        std::vector<int64_t> s = shape_of(channels[i]);
        // Other values in every round: an output buffer the allocator hands out again must not
        // hold the right answer already.
        data.push_back(Random(s[0] * s[1] * s[2] * s[3], 40 + i + 10 * threads + 100 * axis));
        in.push_back(Floats(s, data.back()));
      }
      auto out = c.model->Run(in);
      ASSERT_TRUE(out.ok()) << out.status();
      ASSERT_EQ(out->size(), 3u);
      // Element (n, c, h, w) of the concat, from the part holding index `along` of the axis.
      const std::vector<int64_t> whole = shape_of(total);
      auto expected = [&](int64_t n, int64_t c1, int64_t h, int64_t w) {
        int64_t along = axis == 1 ? c1 : w;
        size_t i = 0;
        while (along >= channels[i]) along -= channels[i++];
        const std::vector<int64_t> s = shape_of(channels[i]);
        const int64_t cc = axis == 1 ? along : c1, ww = axis == 3 ? along : w;
        return data[i][((n * s[1] + cc) * s[2] + h) * s[3] + ww];
      };
      const float* got = (*out)[0].data_as<float>();
      int64_t wrong = 0;
      for (int64_t n = 0, at = 0; n < whole[0]; ++n) {
        for (int64_t c1 = 0; c1 < whole[1]; ++c1) {
          for (int64_t h = 0; h < whole[2]; ++h) {
            for (int64_t w = 0; w < whole[3]; ++w, ++at) {
              wrong += got[at] != expected(n, c1, h, w);
            }
          }
        }
      }
      EXPECT_EQ(wrong, 0);
      // Each half holds `total / 2` along the axis: half k's element is the concat's at k * 32.
      for (int k = 0; k < 2; ++k) {
        const HostTensor& half = (*out)[1 + k];
        const std::vector<int64_t> hs = shape_of(total / 2);
        ASSERT_EQ(half.shape(), hs);
        const float* h_data = half.data_as<float>();
        int64_t half_wrong = 0;
        for (int64_t n = 0, at = 0; n < hs[0]; ++n) {
          for (int64_t c1 = 0; c1 < hs[1]; ++c1) {
            for (int64_t h = 0; h < hs[2]; ++h) {
              for (int64_t w = 0; w < hs[3]; ++w, ++at) {
                const int64_t shift = k * (total / 2);
                half_wrong += h_data[at] != expected(n, axis == 1 ? c1 + shift : c1, h,
                                                     axis == 3 ? w + shift : w);
              }
            }
          }
        }
        EXPECT_EQ(half_wrong, 0) << "half " << k;
      }
    }
  }
  SetIntraOpThreads(1);
}

// A bilinear Resize of static size splits its rows over the intra-op threads (a segmentation
// head's 16x upsampling): every element matches the half_pixel reference at one and two threads.
TEST(FusedKernelsTest, ThreadedResizeMatchesTheReference) {
  constexpr int64_t kC = 8, kIn = 14, kOut = 224;
  for (int threads : {1, 2}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    SetIntraOpThreads(threads);
    GraphBuilder b;
    ir::Value* x =
        b.Input("x", {SymDim::Const(1), SymDim::Const(kC), SymDim::Const(kIn), SymDim::Const(kIn)});
    ir::Value* scales = b.Const("scales", {4}, {1.0f, 1.0f, 16.0f, 16.0f});
    b.Output(b.Op("Resize", {x, nullptr, scales}, {{"mode", std::string("linear")}}));
    Compiled c = Compile(b.graph());
    ASSERT_NE(c.model, nullptr);
    const std::vector<float> in = Random(kC * kIn * kIn, 60 + threads);
    auto out = c.model->Run({Floats({1, kC, kIn, kIn}, in)});
    ASSERT_TRUE(out.ok()) << out.status();
    ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{1, kC, kOut, kOut}));
    // half_pixel: source = (o + 0.5) / 16 - 0.5, clamped taps, linear weights.
    auto taps = [&](int64_t o, int64_t* lo, int64_t* hi, double* w) {
      const double src = (static_cast<double>(o) + 0.5) / 16.0 - 0.5;
      const double f = std::floor(src);
      *w = src - f;
      *lo = std::clamp<int64_t>(static_cast<int64_t>(f), 0, kIn - 1);
      *hi = std::clamp<int64_t>(static_cast<int64_t>(f) + 1, 0, kIn - 1);
    };
    const float* got = (*out)[0].data_as<float>();
    int64_t wrong = 0;
    for (int64_t ch = 0; ch < kC; ++ch) {
      const float* plane = in.data() + ch * kIn * kIn;
      for (int64_t oy = 0; oy < kOut; ++oy) {
        int64_t y0, y1;
        double wy;
        taps(oy, &y0, &y1, &wy);
        for (int64_t ox = 0; ox < kOut; ++ox) {
          int64_t x0, x1;
          double wx;
          taps(ox, &x0, &x1, &wx);
          const double want =
              (1 - wy) * ((1 - wx) * plane[y0 * kIn + x0] + wx * plane[y0 * kIn + x1]) +
              wy * ((1 - wx) * plane[y1 * kIn + x0] + wx * plane[y1 * kIn + x1]);
          wrong += std::fabs(got[(ch * kOut + oy) * kOut + ox] - want) > 1e-5;
        }
      }
    }
    EXPECT_EQ(wrong, 0);
  }
  SetIntraOpThreads(1);
}

}  // namespace
}  // namespace cuvil
