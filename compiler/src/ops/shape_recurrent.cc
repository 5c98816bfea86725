// Shape inference for the recurrent ops LSTM, GRU and RNN (opsets 7, 14 and 22).
//
// Canonical form for code generation: `hidden_size` is always set; `rnn_activations` holds one
// activation name per (direction, function) in the spec's spelling, with `rnn_alpha` and
// `rnn_beta` one value per activation (the spec's alpha/beta lists are consumed only by the
// activations that take them, so they are resolved here once). Constant W and R are stored
// transposed ([D, I, G*H] and [D, H, G*H], marked by `w_transposed` / `r_transposed`) so the
// kernel's products stream contiguous rows of the weights.
#include <cctype>

#include "infer_context.h"
#include "internal_attrs.h"

namespace cuvil::ir {
namespace {

struct RecurrentOp {
  int gates;                              // Gate blocks in W and R: 4 (iofc), 3 (zrh), 1.
  int max_inputs;                         // 8 with P (LSTM), 6 otherwise.
  int max_outputs;                        // Y, Y_h (and Y_c for LSTM).
  std::vector<std::string> default_acts;  // Per direction.
};

RecurrentOp OpInfo(const std::string& op) {
  if (op == "LSTM") return {4, 8, 3, {"Sigmoid", "Tanh", "Tanh"}};
  if (op == "GRU") return {3, 6, 2, {"Sigmoid", "Tanh"}};
  return {1, 6, 2, {"Tanh"}};
}

struct ActivationSpec {
  const char* name;
  bool takes_alpha;
  float alpha;
  bool takes_beta;
  float beta;
};

// The activations the spec lists, with the defaults ONNX Runtime uses for missing alpha/beta.
constexpr ActivationSpec kActivations[] = {
    {"Relu", false, 0, false, 0},           {"Tanh", false, 0, false, 0},
    {"Sigmoid", false, 0, false, 0},        {"Affine", true, 1.0f, true, 0.0f},
    {"LeakyRelu", true, 0.01f, false, 0},   {"ThresholdedRelu", true, 1.0f, false, 0},
    {"ScaledTanh", true, 1.0f, true, 1.0f}, {"HardSigmoid", true, 0.2f, true, 0.5f},
    {"Elu", true, 1.0f, false, 0},          {"Softsign", false, 0, false, 0},
    {"Softplus", false, 0, false, 0},
};

// The activation named `name` (case-insensitively, as ONNX Runtime accepts), or nullptr.
const ActivationSpec* FindActivation(const std::string& name) {
  for (const ActivationSpec& a : kActivations) {
    std::string spelled = a.name;
    if (spelled.size() != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < name.size() && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(spelled[i])) ==
             std::tolower(static_cast<unsigned char>(name[i]));
    }
    if (same) return &a;
  }
  return nullptr;
}

// A static dim of input i, or an error naming `role` when it is symbolic.
absl::StatusOr<int64_t> StaticDim(InferContext& c, size_t i, int axis, const char* role) {
  const SymDim& d = c.in_shape(i)[axis];
  if (!d.IsStatic()) {
    return absl::UnimplementedError(
        absl::StrCat(c.node().Describe(), ": ", role, " must have static dimensions"));
  }
  return d.coef();
}

// Checks input i has exactly `want` as its shape.
absl::Status ExpectShape(InferContext& c, size_t i, const char* role, const SymShape& want) {
  if (!c.has_input(i)) return absl::OkStatus();
  if (c.in_shape(i) != want) {
    return c.Error(absl::StrCat(role, " has shape ", SymShapeToString(c.in_shape(i)), ", expected ",
                                SymShapeToString(want)));
  }
  return absl::OkStatus();
}

// [D, A, B] → [D, B, A] for a float32 constant.
HostTensor TransposeLast2(const HostTensor& t) {
  int64_t d = t.shape()[0], a = t.shape()[1], b = t.shape()[2];
  HostTensor out(DType::kFloat32, {d, b, a});
  const float* src = t.data_as<float>();
  float* dst = out.data_as<float>();
  for (int64_t k = 0; k < d; ++k) {
    for (int64_t i = 0; i < a; ++i) {
      for (int64_t j = 0; j < b; ++j) dst[(k * b + j) * a + i] = src[(k * a + i) * b + j];
    }
  }
  return out;
}

// Replaces constant input i by its transpose, once (marked by attribute `mark`).
void TransposeConstant(InferContext& c, size_t i, const char* mark) {
  Node& n = c.node();
  Value* v = c.input(i);
  if (n.has_attr(mark) || !v->is_constant() || v->type.dtype != DType::kFloat32) return;
  Value* t = c.graph().NewValue(v->name + ".transposed");
  c.graph().MakeConstant(t, TransposeLast2(*v->constant));
  n.inputs[i] = t;
  n.attrs[mark] = int64_t{1};
}

absl::Status Recurrent(InferContext& c) {
  Node& n = c.node();
  RecurrentOp op = OpInfo(n.op_type);
  if (auto s = c.ExpectInputs(3, op.max_inputs); !s.ok()) return s;
  if (c.num_outputs() > static_cast<size_t>(op.max_outputs)) {
    return c.Error(absl::StrCat("expects at most ", op.max_outputs, " outputs"));
  }
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i) || i == 4) continue;
    if (c.in_dtype(i) != DType::kFloat32) {
      return absl::UnimplementedError(
          absl::StrCat(n.Describe(), ": only float32 is supported (input ", i, ")"));
    }
  }
  if (c.has_input(4) && c.in_dtype(4) != DType::kInt32 && c.in_dtype(4) != DType::kInt64) {
    return c.Error("sequence_lens must be int32");
  }
  std::string direction = n.attr_string("direction", "forward");
  if (direction != "forward" && direction != "reverse" && direction != "bidirectional") {
    return c.Error(absl::StrCat("unknown direction '", direction, "'"));
  }
  int64_t dirs = direction == "bidirectional" ? 2 : 1;
  int64_t layout = n.attr_int("layout", 0);
  if (layout != 0 && layout != 1) return c.Error("layout must be 0 or 1");
  if (n.attr_int("input_forget", 0) != 0 && n.op_type != "LSTM") {
    return c.Error("input_forget applies to LSTM only");
  }
  if (c.in_rank(0) != 3 || c.in_rank(1) != 3 || c.in_rank(2) != 3) {
    return c.Error("X, W and R must be 3-D");
  }

  // W is [D, G*H, I] and R [D, G*H, H], or transposed once constant-folded.
  bool w_t = n.has_attr(attr::kWTransposed), r_t = n.has_attr(attr::kRTransposed);
  int64_t w_dirs = 0, w_rows = 0, in_size = 0, r_rows = 0, hidden = 0;
  {
    auto d0 = StaticDim(c, 1, 0, "W");
    auto d1 = StaticDim(c, 1, w_t ? 2 : 1, "W");
    auto d2 = StaticDim(c, 1, w_t ? 1 : 2, "W");
    auto r1 = StaticDim(c, 2, r_t ? 2 : 1, "R");
    auto r2 = StaticDim(c, 2, r_t ? 1 : 2, "R");
    for (const auto* s : {&d0, &d1, &d2, &r1, &r2}) {
      if (!s->ok()) return s->status();
    }
    w_dirs = *d0, w_rows = *d1, in_size = *d2, r_rows = *r1, hidden = *r2;
  }
  int64_t hidden_attr = n.attr_int("hidden_size", hidden);
  if (hidden_attr != hidden || hidden <= 0) {
    return c.Error(absl::StrCat("hidden_size ", hidden_attr, " does not match R's ", hidden));
  }
  if (w_dirs != dirs || !(c.in_shape(2)[0] == SymDim::Const(dirs))) {
    return c.Error(
        absl::StrCat("W and R must have ", dirs, " direction(s) for direction '", direction, "'"));
  }
  auto gh = CheckedMul(op.gates, hidden);
  if (!gh || w_rows != *gh || r_rows != *gh) {
    return c.Error(absl::StrCat("W and R must have ", op.gates, " * hidden_size rows"));
  }
  const SymShape& x = c.in_shape(0);
  SymDim seq = layout == 0 ? x[0] : x[1];
  SymDim batch = layout == 0 ? x[1] : x[0];
  if (!(x[2] == SymDim::Const(in_size))) {
    return c.Error(absl::StrCat("X's input size ", x[2].ToString(), " differs from W's ", in_size));
  }
  SymDim d = SymDim::Const(dirs), h = SymDim::Const(hidden);
  SymShape state = layout == 0 ? SymShape{d, batch, h} : SymShape{batch, d, h};
  if (auto s = ExpectShape(c, 3, "B", {d, SymDim::Const(2 * *gh)}); !s.ok()) return s;
  if (auto s = ExpectShape(c, 4, "sequence_lens", {batch}); !s.ok()) return s;
  if (auto s = ExpectShape(c, 5, "initial_h", state); !s.ok()) return s;
  if (auto s = ExpectShape(c, 6, "initial_c", state); !s.ok()) return s;
  if (auto s = ExpectShape(c, 7, "P", {d, SymDim::Const(3 * hidden)}); !s.ok()) return s;

  // Activations: per direction, in the spec's order; alpha/beta consumed by those that take them.
  std::vector<std::string> acts;
  if (auto it = n.attrs.find("activations"); it != n.attrs.end()) {
    const auto* list = std::get_if<std::vector<std::string>>(&it->second);
    if (list == nullptr) return c.Error("activations must be a list of strings");
    acts = *list;
  }
  if (acts.empty()) {
    for (int64_t i = 0; i < dirs; ++i) {
      acts.insert(acts.end(), op.default_acts.begin(), op.default_acts.end());
    }
  } else if (acts.size() == op.default_acts.size() && dirs == 2) {
    // Tolerated (ONNX Runtime does too): one list shared by both directions.
    acts.insert(acts.end(), acts.begin(), acts.end());
  }
  if (acts.size() != op.default_acts.size() * dirs) {
    return c.Error(
        absl::StrCat("expects ", op.default_acts.size() * dirs, " activations, got ", acts.size()));
  }
  std::vector<float> alphas = n.attr_floats("activation_alpha");
  std::vector<float> betas = n.attr_floats("activation_beta");
  size_t next_alpha = 0, next_beta = 0;
  std::vector<std::string> names;
  std::vector<float> act_alpha, act_beta;
  for (const std::string& a : acts) {
    const ActivationSpec* spec = FindActivation(a);
    if (spec == nullptr) return c.Error(absl::StrCat("unknown activation '", a, "'"));
    names.push_back(spec->name);
    float alpha = spec->alpha, beta = spec->beta;
    if (spec->takes_alpha && next_alpha < alphas.size()) alpha = alphas[next_alpha++];
    if (spec->takes_beta && next_beta < betas.size()) beta = betas[next_beta++];
    act_alpha.push_back(alpha);
    act_beta.push_back(beta);
  }
  if (n.has_attr("clip") && !(n.attr_float("clip", 0) > 0)) {
    return c.Error("clip must be positive");
  }
  n.attrs["hidden_size"] = hidden;
  n.attrs["rnn_activations"] = names;
  n.attrs["rnn_alpha"] = act_alpha;
  n.attrs["rnn_beta"] = act_beta;
  TransposeConstant(c, 1, attr::kWTransposed);
  TransposeConstant(c, 2, attr::kRTransposed);

  SymShape y = layout == 0 ? SymShape{seq, d, batch, h} : SymShape{batch, seq, d, h};
  c.SetOutput(0, DType::kFloat32, y);
  c.SetOutput(1, DType::kFloat32, state);
  c.SetOutput(2, DType::kFloat32, state);
  return absl::OkStatus();
}

}  // namespace

void RegisterRecurrentShapes(OpTable& r) {
  for (const char* op : {"LSTM", "GRU", "RNN"}) {
    r.DefineShape(op, Recurrent)
        .Batch(BatchClass::kMixes)
        .Attributes({"rnn_activations", "rnn_alpha", "rnn_beta"});
  }
}

}  // namespace cuvil::ir
