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
  auto plan = PlanQuantization(float_model, options.qdq);
  if (!plan.ok()) return plan.status();
  QuantizeResult result;
  auto stats = CalibrateActivations(engine, float_model, plan->activations, calibration_sets,
                                    options.calibration, options.qdq.activation_type);
  if (!stats.ok()) return stats.status();
  result.activations = std::move(*stats);
  std::map<std::string, Range> ranges;
  for (const auto& [name, s] : result.activations) ranges[name] = s.calibrated;
  result.model = float_model;
  auto rewrite = RewriteToQdq(result.model, ranges, options.qdq);
  if (!rewrite.ok()) return rewrite.status();
  result.rewrite = std::move(*rewrite);
  if (auto s = CheckModel(result.model); !s.ok()) {
    return absl::InternalError(absl::StrCat("the QDQ model is invalid: ", s.message()));
  }
  return result;
}

}  // namespace cuvil::quantize
