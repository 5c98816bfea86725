// Shape inference for the loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.
//
// Canonical form seen by code generation: attrs "reduction" ("none", "sum" or "mean") and
// "ignore_index" (present only when the model sets it); inputs (scores [N, C, d1..dk],
// target [N, d1..dk], optional weight [C]).
#include "infer_context.h"

namespace cuvil::ir {
namespace {

absl::Status Loss(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  Node& n = c.node();
  if (!IsFloat(c.in_dtype(0))) return c.Error("scores must be floating point");
  if (!IsInteger(c.in_dtype(1))) return c.Error("target must be an integer tensor");
  int rank = c.in_rank(0);
  if (rank < 2) return c.Error("scores must have rank >= 2 ([N, C, ...])");
  const SymShape& scores = c.in_shape(0);
  SymShape target = scores;
  target.erase(target.begin() + 1);
  if (c.in_shape(1) != target) {
    return c.Error("target shape must be the scores' shape without the class axis");
  }
  if (c.has_input(2)) {
    if (c.in_dtype(2) != c.in_dtype(0)) return c.Error("weight must have the scores' type");
    if (c.in_rank(2) != 1 || c.in_shape(2)[0] != scores[1]) {
      return c.Error("weight must have shape [C]");
    }
  }
  std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") {
    return c.Error("reduction must be none, sum or mean, not " + reduction);
  }
  n.attrs["reduction"] = reduction;
  c.SetOutput(0, c.in_dtype(0), reduction == "none" ? target : SymShape{});
  if (c.has_output(1)) {
    if (n.op_type != "SoftmaxCrossEntropyLoss") return c.Error("has one output");
    c.SetOutput(1, c.in_dtype(0), scores);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterLossShapes(OpTable& r) {
  r.DefineShape("NegativeLogLikelihoodLoss", Loss).Batch(BatchClass::kMixes);
  r.DefineShape("SoftmaxCrossEntropyLoss", Loss).Batch(BatchClass::kMixes);
}

}  // namespace cuvil::ir
