#include "quantizer.h"

#include <exception>

#include "absl/strings/str_cat.h"
#include "onnx/checker.h"

namespace cuvil::quantize {

absl::Status CheckModel(const onnx::ModelProto& model) {
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (auto pos = msg.find('\n'); pos != std::string::npos) msg.resize(pos);
    return absl::InvalidArgumentError(absl::StrCat("ONNX checker: ", msg));
  }
  return absl::OkStatus();
}

absl::StatusOr<QuantizeResult> QuantizeModel(
    JitEngine& engine, const onnx::ModelProto& float_model,
    const std::vector<std::vector<HostTensor>>& calibration_sets, const QuantizeOptions& options) {
  if (calibration_sets.empty()) return absl::InvalidArgumentError("no calibration inputs");
  QuantizeResult result;
  result.model = float_model;
  if (options.weights_int4) {
    auto layers = RewriteWeightsInt4(result.model, {options.int4_block, options.qdq.exclude});
    if (!layers.ok()) return layers.status();
    result.int4_layers = std::move(*layers);
  }
  // Calibrated on the model with 4-bit weights, so later layers see the activations they get.
  const onnx::ModelProto calibrated = result.model;
  auto plan = PlanQuantization(calibrated, options.qdq);
  if (!plan.ok()) return plan.status();
  if (!plan->activations.empty()) {
    auto stats = CalibrateActivations(engine, calibrated, plan->activations, calibration_sets,
                                      options.calibration, options.qdq.activation_type);
    if (!stats.ok()) return stats.status();
    result.activations = std::move(*stats);
  }
  std::map<std::string, Range> ranges;
  for (const auto& [name, s] : result.activations) ranges[name] = s.calibrated;
  auto rewrite = RewriteToQdq(result.model, ranges, options.qdq);
  if (!rewrite.ok()) return rewrite.status();
  result.rewrite = std::move(*rewrite);
  if (auto s = CheckModel(result.model); !s.ok()) {
    return absl::InternalError(absl::StrCat("the QDQ model is invalid: ", s.message()));
  }
  return result;
}

}  // namespace cuvil::quantize
