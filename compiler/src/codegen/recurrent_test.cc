// LSTM, GRU and RNN kernels (kernels_recurrent.cc) against a scalar C++ reference written from
// the ONNX equations: bidirectional runs with sequence_lens shorter than the sequence, both
// layouts, weights as run-time inputs and as compile-time constants, and the optional
// activations, clip, input_forget and linear_before_reset.
#include <cmath>
#include <random>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/parallel.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using Floats = std::vector<float>;

// One recurrent-op configuration; tensors use the ONNX layouts.
struct Config {
  std::string op = "LSTM";
  std::string direction = "forward";
  int64_t seq = 4, batch = 2, input = 3, hidden = 5;
  int layout = 0;
  std::vector<int32_t> lens;  // Empty: no sequence_lens input.
  bool bias = true, initial = true, peepholes = true;
  bool constant_weights = false;
  std::vector<std::string> activations;
  Floats alpha, beta;
  float clip = 0;  // 0: none
  bool input_forget = false;
  bool linear_before_reset = false;

  int gates() const { return op == "LSTM" ? 4 : op == "GRU" ? 3 : 1; }
  int64_t dirs() const { return direction == "bidirectional" ? 2 : 1; }
};

struct Data {
  Floats x, w, r, b, h0, c0, p;
};

Data RandomData(const Config& c, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto fill = [&](int64_t n) {
    Floats v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  int64_t gh = c.gates() * c.hidden, d = c.dirs();
  return {fill(c.seq * c.batch * c.input), fill(d * gh * c.input),
          fill(d * gh * c.hidden),         fill(d * 2 * gh),
          fill(d * c.batch * c.hidden),    fill(d * c.batch * c.hidden),
          fill(d * 3 * c.hidden)};
}

// One activation of the spec with its alpha/beta (defaults as the op schema documents them).
double Act(const std::string& name, double alpha, double beta, double x) {
  if (name == "Sigmoid") return 1 / (1 + std::exp(-x));
  if (name == "Tanh") return std::tanh(x);
  if (name == "Relu") return std::max(0.0, x);
  if (name == "Affine") return alpha * x + beta;
  if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
  if (name == "ThresholdedRelu") return x >= alpha ? x : 0;
  if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
  if (name == "HardSigmoid") return std::min(std::max(alpha * x + beta, 0.0), 1.0);
  if (name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1);
  if (name == "Softsign") return x / (1 + std::abs(x));
  if (name == "Softplus") return std::log1p(std::exp(x));
  ADD_FAILURE() << "unknown activation " << name;
  return 0;
}

struct Outputs {
  Floats y, y_h, y_c;
};

// Scalar reference: Y [seq, dirs, batch, hidden] (layout 0) / [batch, seq, dirs, hidden].
Outputs Reference(const Config& c, const Data& in) {
  int64_t S = c.seq, N = c.batch, I = c.input, H = c.hidden, D = c.dirs(), G = c.gates();
  int64_t GH = G * H;
  std::vector<std::string> acts = c.activations;
  size_t per_dir = c.op == "LSTM" ? 3 : c.op == "GRU" ? 2 : 1;
  if (acts.empty()) {
    std::vector<std::string> def = c.op == "LSTM"
                                       ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
                                   : c.op == "GRU" ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                   : std::vector<std::string>{"Tanh"};
    for (int64_t d = 0; d < D; ++d) acts.insert(acts.end(), def.begin(), def.end());
  }
  // The test configurations give alpha/beta per activation explicitly (or none).
  // clip bounds the gates' pre-activations, not the cell state LSTM's h() sees (as ONNX Runtime).
  auto act = [&](int64_t d, size_t which, double x, bool clip = true) {
    size_t i = d * per_dir + which;
    double a = i < c.alpha.size() ? c.alpha[i] : 1.0, b = i < c.beta.size() ? c.beta[i] : 0.0;
    if (clip && c.clip > 0) x = std::min<double>(std::max<double>(x, -c.clip), c.clip);
    return Act(acts[i], a, b, x);
  };
  auto xat = [&](int64_t t, int64_t n, int64_t i) {
    return c.layout == 0 ? in.x[(t * N + n) * I + i] : in.x[(n * S + t) * I + i];
  };
  auto state_at = [&](int64_t d, int64_t n, int64_t j) {
    return c.layout == 0 ? (d * N + n) * H + j : (n * D + d) * H + j;
  };
  auto y_at = [&](int64_t t, int64_t d, int64_t n, int64_t j) {
    return c.layout == 0 ? ((t * D + d) * N + n) * H + j : ((n * S + t) * D + d) * H + j;
  };
  Outputs out{Floats(S * D * N * H, 0.0f), Floats(D * N * H), Floats(D * N * H)};
  for (int64_t d = 0; d < D; ++d) {
    bool reverse = c.direction == "reverse" || d == 1;
    const float* W = &in.w[d * GH * I];
    const float* R = &in.r[d * GH * H];
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> h(H, 0.0), cell(H, 0.0);
      if (c.initial) {
        for (int64_t j = 0; j < H; ++j) {
          h[j] = in.h0[state_at(d, n, j)];
          cell[j] = in.c0[state_at(d, n, j)];
        }
      }
      int64_t len = c.lens.empty() ? S : c.lens[n];
      for (int64_t s = 0; s < len; ++s) {
        int64_t t = reverse ? len - 1 - s : s;
        // xw[g] = X_t W^T + Wb, hr[g] = H R^T + Rb for every gate row g.
        std::vector<double> xw(GH, 0.0), hr(GH, 0.0);
        for (int64_t g = 0; g < GH; ++g) {
          for (int64_t i = 0; i < I; ++i) xw[g] += xat(t, n, i) * W[g * I + i];
          for (int64_t k = 0; k < H; ++k) hr[g] += h[k] * R[g * H + k];
          if (c.bias) {
            xw[g] += in.b[d * 2 * GH + g];
            hr[g] += in.b[d * 2 * GH + GH + g];
          }
        }
        std::vector<double> nh(H);
        if (c.op == "RNN") {
          for (int64_t j = 0; j < H; ++j) nh[j] = act(d, 0, xw[j] + hr[j]);
        } else if (c.op == "LSTM") {
          auto p = [&](int which, int64_t j) {
            return c.peepholes ? static_cast<double>(in.p[d * 3 * H + which * H + j]) : 0.0;
          };
          for (int64_t j = 0; j < H; ++j) {
            double ig = act(d, 0, xw[j] + hr[j] + p(0, j) * cell[j]);
            double fg = c.input_forget
                            ? 1 - ig
                            : act(d, 0, xw[2 * H + j] + hr[2 * H + j] + p(2, j) * cell[j]);
            double cg = act(d, 1, xw[3 * H + j] + hr[3 * H + j]);
            cell[j] = fg * cell[j] + ig * cg;
            double og = act(d, 0, xw[H + j] + hr[H + j] + p(1, j) * cell[j]);
            nh[j] = og * act(d, 2, cell[j], /*clip=*/false);
          }
        } else {
          std::vector<double> z(H), r(H);
          for (int64_t j = 0; j < H; ++j) {
            z[j] = act(d, 0, xw[j] + hr[j]);
            r[j] = act(d, 0, xw[H + j] + hr[H + j]);
          }
          for (int64_t j = 0; j < H; ++j) {
            double pre;
            if (c.linear_before_reset) {
              pre = xw[2 * H + j] + r[j] * hr[2 * H + j];
            } else {
              double rh = c.bias ? in.b[d * 2 * GH + GH + 2 * H + j] : 0.0;
              for (int64_t k = 0; k < H; ++k) rh += r[k] * h[k] * R[(2 * H + j) * H + k];
              pre = xw[2 * H + j] + rh;
            }
            double hh = act(d, 1, pre);
            nh[j] = (1 - z[j]) * hh + z[j] * h[j];
          }
        }
        h = nh;
        for (int64_t j = 0; j < H; ++j) out.y[y_at(t, d, n, j)] = static_cast<float>(h[j]);
      }
      // A row of length 0 has final states 0 (as ONNX Runtime), not its initial state.
      for (int64_t j = 0; j < H; ++j) {
        out.y_h[state_at(d, n, j)] = len == 0 ? 0.0f : static_cast<float>(h[j]);
        out.y_c[state_at(d, n, j)] = len == 0 ? 0.0f : static_cast<float>(cell[j]);
      }
    }
  }
  return out;
}

HostTensor Tensor(std::vector<int64_t> shape, const Floats& data) {
  HostTensor t(DType::kFloat32, std::move(shape));
  std::copy(data.begin(), data.end(), t.data_as<float>());
  return t;
}

// The graph inputs' values in graph order: X, then W, R and B unless constant, sequence_lens,
// initial_h, initial_c, P unless constant (omitted ones skipped).
std::vector<HostTensor> Feeds(const Config& c, const Data& in) {
  int64_t D = c.dirs(), GH = c.gates() * c.hidden;
  std::vector<int64_t> state = c.layout == 0 ? std::vector<int64_t>{D, c.batch, c.hidden}
                                             : std::vector<int64_t>{c.batch, D, c.hidden};
  std::vector<HostTensor> feeds;
  feeds.push_back(Tensor(c.layout == 0 ? std::vector<int64_t>{c.seq, c.batch, c.input}
                                       : std::vector<int64_t>{c.batch, c.seq, c.input},
                         in.x));
  if (!c.constant_weights) {
    feeds.push_back(Tensor({D, GH, c.input}, in.w));
    feeds.push_back(Tensor({D, GH, c.hidden}, in.r));
    if (c.bias) feeds.push_back(Tensor({D, 2 * GH}, in.b));
  }
  if (!c.lens.empty()) {
    HostTensor lens(DType::kInt32, {c.batch});
    std::copy(c.lens.begin(), c.lens.end(), lens.data_as<int32_t>());
    feeds.push_back(std::move(lens));
  }
  if (c.initial) feeds.push_back(Tensor(state, in.h0));
  if (c.initial && c.op == "LSTM") feeds.push_back(Tensor(state, in.c0));
  if (c.peepholes && c.op == "LSTM" && !c.constant_weights) {
    feeds.push_back(Tensor({D, 3 * c.hidden}, in.p));
  }
  return feeds;
}

// Runs `model` on `in` (whose batch is c.batch) and checks every output against the reference.
void RunAndCompare(const LoadedModel& model, const Config& c, const Data& in) {
  SCOPED_TRACE("batch " + std::to_string(c.batch));
  auto out = model.Run(Feeds(c, in));
  ASSERT_TRUE(out.ok()) << out.status();
  std::vector<std::string> names = {"Y", "Y_h", "Y_c"};
  ASSERT_EQ(out->size(), c.op == "LSTM" ? 3u : 2u);
  Outputs want = Reference(c, in);
  std::vector<const Floats*> refs = {&want.y, &want.y_h, &want.y_c};
  for (size_t o = 0; o < out->size(); ++o) {
    const HostTensor& got = (*out)[o];
    ASSERT_EQ(static_cast<size_t>(got.num_elements()), refs[o]->size()) << names[o];
    for (size_t e = 0; e < refs[o]->size(); ++e) {
      float ref = (*refs[o])[e];
      ASSERT_NEAR(got.data_as<float>()[e], ref, 2e-5 + 2e-5 * std::abs(ref))
          << names[o] << "[" << e << "]";
    }
  }
}

struct Loaded {
  std::unique_ptr<JitEngine> engine;
  std::unique_ptr<LoadedModel> model;
};

// Builds the one-node graph for `c` (batch symbolic; constant weights taken from `in`), compiles
// and loads it. Empty `model` (after a test failure) when any step fails.
Loaded Load(const Config& c, const Data& in) {
  int64_t D = c.dirs(), GH = c.gates() * c.hidden;
  ir::Graph g;
  g.opset = 14;
  g.symbol = "batch";
  auto input = [&](const std::string& name, SymShape shape, DType dtype = DType::kFloat32) {
    ir::Value* v = g.NewValue(name);
    v->type = {dtype, std::move(shape), true};
    v->is_graph_input = true;
    g.inputs.push_back(v);
    return v;
  };
  auto weight = [&](const std::string& name, std::vector<int64_t> shape, const Floats& data) {
    if (!c.constant_weights) {
      SymShape s;
      for (int64_t x : shape) s.push_back(SymDim::Const(x));
      return input(name, s);
    }
    ir::Value* v = g.NewValue(name);
    g.MakeConstant(v, Tensor(shape, data));
    return v;
  };
  SymDim n = SymDim::Batch(), s = SymDim::Const(c.seq), i = SymDim::Const(c.input);
  SymDim d = SymDim::Const(D), h = SymDim::Const(c.hidden);
  SymShape state = c.layout == 0 ? SymShape{d, n, h} : SymShape{n, d, h};
  ir::Node* node = g.NewNode(c.op, "rnn");
  node->opset = 14;
  node->inputs.push_back(input("X", c.layout == 0 ? SymShape{s, n, i} : SymShape{n, s, i}));
  node->inputs.push_back(weight("W", {D, GH, c.input}, in.w));
  node->inputs.push_back(weight("R", {D, GH, c.hidden}, in.r));
  node->inputs.push_back(c.bias ? weight("B", {D, 2 * GH}, in.b) : nullptr);
  node->inputs.push_back(c.lens.empty() ? nullptr : input("sequence_lens", {n}, DType::kInt32));
  node->inputs.push_back(c.initial ? input("initial_h", state) : nullptr);
  if (c.op == "LSTM") {
    node->inputs.push_back(c.initial ? input("initial_c", state) : nullptr);
    node->inputs.push_back(c.peepholes ? weight("P", {D, 3 * c.hidden}, in.p) : nullptr);
  }
  node->attrs["direction"] = c.direction;
  node->attrs["hidden_size"] = c.hidden;
  node->attrs["layout"] = int64_t{c.layout};
  if (!c.activations.empty()) node->attrs["activations"] = c.activations;
  if (!c.alpha.empty()) node->attrs["activation_alpha"] = c.alpha;
  if (!c.beta.empty()) node->attrs["activation_beta"] = c.beta;
  if (c.clip > 0) node->attrs["clip"] = c.clip;
  if (c.input_forget) node->attrs["input_forget"] = int64_t{1};
  if (c.linear_before_reset) node->attrs["linear_before_reset"] = int64_t{1};
  std::vector<std::string> names = {"Y", "Y_h"};
  if (c.op == "LSTM") names.push_back("Y_c");
  for (const std::string& name : names) {
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
  auto loaded = (*engine)->Load("recurrent/1", std::move(*model));
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return {};
  return {std::move(*engine), std::move(*loaded)};
}

// Compiles the op with a symbolic batch and checks it on `in` and, from the same compile, on a
// batch of one with other inputs (same weights).
void CheckAgainstReference(const Config& c, const Data& in, const std::string& what) {
  SCOPED_TRACE(what);
  Loaded loaded = Load(c, in);
  ASSERT_NE(loaded.model, nullptr);
  RunAndCompare(*loaded.model, c, in);

  Config one = c;
  one.batch = 1;
  if (!one.lens.empty()) one.lens = {c.lens.back()};
  Data in1 = RandomData(one, 1000);
  in1.w = in.w, in1.r = in.r, in1.b = in.b, in1.p = in.p;
  RunAndCompare(*loaded.model, one, in1);
}

TEST(RecurrentTest, BidirectionalLstmWithShortSequenceLens) {
  Config c;
  c.direction = "bidirectional";
  c.seq = 6, c.batch = 3, c.input = 5, c.hidden = 7;
  c.lens = {6, 2, 4};
  Data in = RandomData(c, 1);
  CheckAgainstReference(c, in, "weights as inputs");
  c.constant_weights = true;
  CheckAgainstReference(c, in, "constant weights");
  c.layout = 1;
  CheckAgainstReference(c, in, "layout 1");
}

TEST(RecurrentTest, LstmZeroLengthRowHasZeroFinalState) {
  Config c;
  c.direction = "bidirectional";
  c.seq = 3, c.batch = 2;
  c.lens = {0, 3};
  CheckAgainstReference(c, RandomData(c, 2), "zero length");
}

TEST(RecurrentTest, LstmInputForgetClipAndActivations) {
  Config c;
  c.direction = "reverse";
  c.input_forget = true;
  c.clip = 0.7f;
  c.peepholes = false;
  c.activations = {"HardSigmoid", "ScaledTanh", "Softsign"};
  c.alpha = {0.3f, 1.5f};  // HardSigmoid, ScaledTanh
  c.beta = {0.4f, 0.8f};
  // Softsign takes no alpha/beta, so the spec's consumption order matches the positions the
  // reference reads them from.
  CheckAgainstReference(c, RandomData(c, 3), "alpha/beta consumed in order");
}

TEST(RecurrentTest, GruBothResetModes) {
  Config c;
  c.op = "GRU";
  c.direction = "bidirectional";
  c.seq = 5, c.batch = 3, c.hidden = 4;
  c.lens = {3, 5, 1};
  Data in = RandomData(c, 4);
  CheckAgainstReference(c, in, "reset before the product");
  c.linear_before_reset = true;
  CheckAgainstReference(c, in, "linear_before_reset");
  c.layout = 1;
  c.constant_weights = true;
  c.bias = false;
  CheckAgainstReference(c, in, "layout 1, no bias");
}

TEST(RecurrentTest, RnnActivations) {
  Config c;
  c.op = "RNN";
  c.direction = "bidirectional";
  c.initial = false;
  for (const char* a :
       {"Relu", "Sigmoid", "Elu", "Softplus", "LeakyRelu", "ThresholdedRelu", "Affine"}) {
    c.activations = {a, a};
    bool takes_alpha =
        std::string(a) != "Relu" && std::string(a) != "Sigmoid" && std::string(a) != "Softplus";
    c.alpha = takes_alpha ? Floats{0.2f, 0.3f} : Floats{};
    c.beta = std::string(a) == "Affine" ? Floats{0.1f, -0.1f} : Floats{};
    CheckAgainstReference(c, RandomData(c, 5), a);
  }
}

TEST(RecurrentTest, SequenceLensOutOfRangeFailsTheRequest) {
  Config c;
  c.seq = 4, c.batch = 2;
  c.lens = {4, 2};
  Data in = RandomData(c, 8);
  Loaded loaded = Load(c, in);
  ASSERT_NE(loaded.model, nullptr);
  for (int32_t bad : {5, -1}) {
    Config wrong = c;
    wrong.lens = {2, bad};
    auto out = loaded.model->Run(Feeds(wrong, in));
    ASSERT_FALSE(out.ok()) << "length " << bad;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  }
  // The model still serves valid requests.
  RunAndCompare(*loaded.model, c, in);
}

// Shapes large enough for the register tiles (4-row tiles plus leftover rows, whole 16-column
// panels plus leftover columns) in both the projection and the per-step products, with the
// products split across two threads.
TEST(RecurrentTest, TiledAndThreadedProducts) {
  SetIntraOpThreads(2);
  Config lstm;
  lstm.direction = "bidirectional";
  // 9 * 130 * 4 * 130 multiply-adds per step: enough for cuvil_rt_parallel_for to split.
  lstm.seq = 4, lstm.batch = 9, lstm.input = 30, lstm.hidden = 130;
  lstm.lens = {4, 1, 3, 4, 2, 0, 4, 2, 3};
  CheckAgainstReference(lstm, RandomData(lstm, 6), "LSTM");
  Config gru;
  gru.op = "GRU";
  gru.direction = "bidirectional";
  gru.seq = 5, gru.batch = 6, gru.input = 17, gru.hidden = 20;
  gru.lens = {5, 4, 3, 2, 1, 5};
  Data in = RandomData(gru, 7);
  CheckAgainstReference(gru, in, "GRU");
  gru.linear_before_reset = true;
  CheckAgainstReference(gru, in, "GRU linear_before_reset");
  SetIntraOpThreads(1);
}

}  // namespace
}  // namespace cuvil
