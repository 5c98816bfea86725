// Code generation for the ai.onnx.preview.training optimizers (one update step, element-wise):
//   Adagrad:  r' = R / (1 + T * decay_factor), g = norm_coefficient * X + G, H' = H + g^2,
//             X' = X - r' * g / (sqrt(H') + epsilon)
//   Adam:     g = norm_coefficient * X + G, V' = alpha * V + (1 - alpha) * g,
//             H' = beta * H + (1 - beta) * g^2,
//             r' = T > 0 ? R * sqrt(1 - beta^T) / (1 - alpha^T) : R,
//             X' = (1 - norm_coefficient_post) * (X - r' * V' / (sqrt(H') + epsilon))
//   Momentum: g = norm_coefficient * X + G, V' = alpha * V + (T > 0 ? beta : 1) * g,
//             X' = X - R * V' (standard) or X - R * (g + alpha * V') (nesterov)
// The per-step scalars (r', the bias correction) are computed once in double.
#include <functional>

#include "codegen/kernel_context.h"

namespace cuvil::codegen {
namespace {

// Element values of one optimised tensor: in[0] = X, in[1] = G, in[2..] = the states.
// Returns the new X followed by the new states.
using UpdateFn = std::function<std::vector<llvm::Value*>(const std::vector<llvm::Value*>& in)>;

// Emits the element loop for every optimised tensor; `make_update(d)` emits the tensor's
// per-step scalars in its element type d (before the loop) and returns the element update.
void EmitUpdates(KernelContext& k, const std::function<UpdateFn(DType)>& make_update) {
  size_t groups = static_cast<size_t>(k.node().attr_int("groups", 3));
  size_t count = (k.num_inputs() - 2) / groups;
  for (size_t v = 0; v < count; ++v) {
    DType d = k.in_dtype(2 + v);
    UpdateFn update = make_update(d);
    k.For(k.I64(0), k.NumElements(k.in_shape(2 + v)), [&](llvm::Value* i) {
      std::vector<llvm::Value*> in;
      for (size_t g = 0; g < groups; ++g) in.push_back(k.Load(d, k.in(2 + g * count + v), i));
      std::vector<llvm::Value*> out = update(in);
      for (size_t g = 0; g < out.size(); ++g) {
        if (k.has_output(g * count + v)) k.Store(d, k.out(g * count + v), i, out[g]);
      }
    });
  }
}

// R and T as doubles.
llvm::Value* LearningRate(KernelContext& k) {
  return k.Convert(k.Load(k.in_dtype(0), k.in(0), k.I64(0)), k.in_dtype(0), DType::kFloat64);
}
llvm::Value* UpdateCount(KernelContext& k) { return k.Load(DType::kInt64, k.in(1), k.I64(0)); }

absl::Status EmitAdagrad(KernelContext& k) {
  const ir::Node& n = k.node();
  auto& b = k.b();
  DType f64 = DType::kFloat64;
  double decay = n.attr_float("decay_factor", 0.0f);
  double epsilon = n.attr_float("epsilon", 1e-6f);
  double norm = n.attr_float("norm_coefficient", 0.0f);
  llvm::Value* t = k.Convert(UpdateCount(k), DType::kInt64, f64);
  llvm::Value* rate = b.CreateFDiv(
      LearningRate(k), b.CreateFAdd(k.Const(f64, 1), b.CreateFMul(t, k.Const(f64, decay))));
  EmitUpdates(k, [&](DType d) -> UpdateFn {
    llvm::Value* r = k.Convert(rate, f64, d);
    return [&k, &b, d, r, norm, epsilon](const std::vector<llvm::Value*>& in) {
      llvm::Value* g = b.CreateFAdd(b.CreateFMul(k.Const(d, norm), in[0]), in[1]);
      llvm::Value* h = b.CreateFAdd(in[2], b.CreateFMul(g, g));
      llvm::Value* denom = b.CreateFAdd(k.Intrinsic(llvm::Intrinsic::sqrt, h), k.Const(d, epsilon));
      llvm::Value* x = b.CreateFSub(in[0], b.CreateFDiv(b.CreateFMul(r, g), denom));
      return std::vector<llvm::Value*>{x, h};
    };
  });
  return absl::OkStatus();
}

absl::Status EmitAdam(KernelContext& k) {
  const ir::Node& n = k.node();
  auto& b = k.b();
  DType f64 = DType::kFloat64;
  double alpha = n.attr_float("alpha", 0.9f);
  double beta = n.attr_float("beta", 0.999f);
  double epsilon = n.attr_float("epsilon", 1e-6f);
  double norm = n.attr_float("norm_coefficient", 0.0f);
  double post = n.attr_float("norm_coefficient_post", 0.0f);
  llvm::Value* steps = UpdateCount(k);
  llvm::Value* t = k.Convert(steps, DType::kInt64, f64);
  llvm::Value* r = LearningRate(k);
  auto one_minus_pow = [&](double base) {
    return b.CreateFSub(k.Const(f64, 1), k.Intrinsic2(llvm::Intrinsic::pow, k.Const(f64, base), t));
  };
  llvm::Value* corrected =
      b.CreateFDiv(b.CreateFMul(r, k.Intrinsic(llvm::Intrinsic::sqrt, one_minus_pow(beta))),
                   one_minus_pow(alpha));
  llvm::Value* rate = b.CreateSelect(b.CreateICmpSGT(steps, k.I64(0)), corrected, r);
  EmitUpdates(k, [&](DType d) -> UpdateFn {
    llvm::Value* rd = k.Convert(rate, f64, d);
    return [&k, &b, d, rd, alpha, beta, epsilon, norm, post](const std::vector<llvm::Value*>& in) {
      llvm::Value* g = b.CreateFAdd(b.CreateFMul(k.Const(d, norm), in[0]), in[1]);
      llvm::Value* v = b.CreateFAdd(b.CreateFMul(k.Const(d, alpha), in[2]),
                                    b.CreateFMul(k.Const(d, 1 - alpha), g));
      llvm::Value* h = b.CreateFAdd(b.CreateFMul(k.Const(d, beta), in[3]),
                                    b.CreateFMul(k.Const(d, 1 - beta), b.CreateFMul(g, g)));
      llvm::Value* denom = b.CreateFAdd(k.Intrinsic(llvm::Intrinsic::sqrt, h), k.Const(d, epsilon));
      llvm::Value* x = b.CreateFSub(in[0], b.CreateFDiv(b.CreateFMul(rd, v), denom));
      x = b.CreateFMul(k.Const(d, 1 - post), x);
      return std::vector<llvm::Value*>{x, v, h};
    };
  });
  return absl::OkStatus();
}

absl::Status EmitMomentum(KernelContext& k) {
  const ir::Node& n = k.node();
  auto& b = k.b();
  DType f64 = DType::kFloat64;
  double alpha = n.attr_float("alpha", 0.0f);
  double beta = n.attr_float("beta", 0.0f);
  double norm = n.attr_float("norm_coefficient", 0.0f);
  bool nesterov = n.attr_string("mode", "standard") == "nesterov";
  llvm::Value* first = b.CreateICmpSGT(UpdateCount(k), k.I64(0));
  llvm::Value* beta_adjusted = b.CreateSelect(first, k.Const(f64, beta), k.Const(f64, 1));
  llvm::Value* rate = LearningRate(k);
  EmitUpdates(k, [&](DType d) -> UpdateFn {
    llvm::Value* r = k.Convert(rate, f64, d);
    llvm::Value* ba = k.Convert(beta_adjusted, f64, d);
    return [&k, &b, d, r, ba, alpha, norm, nesterov](const std::vector<llvm::Value*>& in) {
      llvm::Value* g = b.CreateFAdd(b.CreateFMul(k.Const(d, norm), in[0]), in[1]);
      llvm::Value* v = b.CreateFAdd(b.CreateFMul(k.Const(d, alpha), in[2]), b.CreateFMul(ba, g));
      llvm::Value* step = nesterov ? b.CreateFAdd(g, b.CreateFMul(k.Const(d, alpha), v)) : v;
      llvm::Value* x = b.CreateFSub(in[0], b.CreateFMul(r, step));
      return std::vector<llvm::Value*>{x, v};
    };
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterTrainingKernels(OpTable& r) {
  r.DefineEmitter("Adagrad", EmitAdagrad);
  r.DefineEmitter("Adam", EmitAdam);
  r.DefineEmitter("Momentum", EmitMomentum);
}

}  // namespace cuvil::codegen
