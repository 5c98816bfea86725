// Shape inference for the ai.onnx.preview.training optimizers: Adagrad, Adam and Momentum.
//
// Inputs are R (learning rate, a float scalar), T (update count, an int64 scalar), then `groups`
// variadic runs of n tensors each (X..., G..., then the op's state: H... for Adagrad, V... for
// Momentum, V... and H... for Adam). Outputs are the new X... and the new states, n each; an
// output may be omitted. Canonical form seen by code generation: attr "groups" (inputs per
// optimised tensor) and, for Momentum, attr "mode" ("standard" or "nesterov").
#include "absl/strings/str_cat.h"
#include "infer_context.h"

namespace cuvil::ir {
namespace {

bool IsScalar(const SymShape& s) {
  for (const SymDim& d : s) {
    if (d != SymDim::Const(1)) return false;
  }
  return true;
}

// `groups`: how many tensors each optimised variable brings (X, G and the states).
absl::Status Optimizer(InferContext& c, int64_t groups) {
  Node& n = c.node();
  size_t inputs = c.num_inputs();
  if (inputs < 2 + static_cast<size_t>(groups) || (inputs - 2) % static_cast<size_t>(groups) != 0) {
    return c.Error(absl::StrCat("expects R, T and ", groups,
                                " equally long runs of tensors (X..., G..., states...); got ",
                                inputs, " inputs"));
  }
  size_t count = (inputs - 2) / static_cast<size_t>(groups);
  size_t outputs = count * static_cast<size_t>(groups - 1);
  if (c.num_outputs() > outputs) {
    return c.Error(absl::StrCat("optimises ", count, " tensors, so it has at most ", outputs,
                                " outputs; got ", c.num_outputs()));
  }
  for (size_t i = 0; i < inputs; ++i) {
    if (!c.has_input(i)) return c.Error(absl::StrCat("input ", i, " is missing"));
  }
  if (!IsFloat(c.in_dtype(0)) || !IsScalar(c.in_shape(0))) {
    return c.Error("R must be a floating-point scalar");
  }
  if (c.in_dtype(1) != DType::kInt64 || !IsScalar(c.in_shape(1))) {
    return c.Error("T must be an int64 scalar");
  }
  for (size_t v = 0; v < count; ++v) {
    const Value* x = c.input(2 + v);
    if (x->type.dtype != DType::kFloat32 && x->type.dtype != DType::kFloat64) {
      return c.Error(absl::StrCat("X '", x->name, "' must be float or double"));
    }
    for (int64_t g = 1; g < groups; ++g) {
      const Value* other = c.input(2 + static_cast<size_t>(g) * count + v);
      if (other->type.dtype != x->type.dtype || other->type.shape != x->type.shape) {
        return c.Error(absl::StrCat("input '", other->name, "' must have the type and shape of X '",
                                    x->name, "'"));
      }
    }
    for (int64_t g = 0; g + 1 < groups; ++g)
      c.SetOutput(g * count + v, x->type.dtype, x->type.shape);
  }
  n.attrs["groups"] = groups;
  return absl::OkStatus();
}

absl::Status Adagrad(InferContext& c) { return Optimizer(c, 3); }

absl::Status Adam(InferContext& c) { return Optimizer(c, 4); }

absl::Status Momentum(InferContext& c) {
  Node& n = c.node();
  for (const char* required : {"alpha", "beta", "mode", "norm_coefficient"}) {
    if (!n.has_attr(required))
      return c.Error(absl::StrCat("attribute '", required, "' is required"));
  }
  std::string mode = n.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov") {
    return c.Error("mode must be standard or nesterov, not " + mode);
  }
  return Optimizer(c, 3);
}

}  // namespace

void RegisterTrainingShapes(OpTable& r) {
  // "groups": see the canonical form above.
  r.DefineShape("Adagrad", Adagrad)
      .Batch(BatchClass::kMixes)
      .Domain(OpDomain::kTraining)
      .Attributes({"groups"});
  r.DefineShape("Adam", Adam)
      .Batch(BatchClass::kMixes)
      .Domain(OpDomain::kTraining)
      .Attributes({"groups"});
  r.DefineShape("Momentum", Momentum)
      .Batch(BatchClass::kMixes)
      .Domain(OpDomain::kTraining)
      .Attributes({"groups"});
}

}  // namespace cuvil::ir
