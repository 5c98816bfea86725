#include "accuracy_report.h"

#include <cmath>
#include <limits>

#include "observed_model.h"

namespace cuvil::quantize {

absl::StatusOr<AccuracyReport> MeasureAccuracy(
    JitEngine& engine, const onnx::ModelProto& float_model, const QuantizeResult& quantized,
    const std::vector<std::vector<HostTensor>>& eval_sets) {
  std::vector<std::string> float_names, dq_names;
  for (const auto& [name, dq] : quantized.rewrite.dequantized) {
    float_names.push_back(name);
    dq_names.push_back(dq);
  }
  auto ref = ObservedModel::Create(engine, float_model, float_names, "cuvil-quantize/float");
  if (!ref.ok()) return ref.status();
  auto qdq = ObservedModel::Create(engine, quantized.model, dq_names, "cuvil-quantize/qdq");
  if (!qdq.ok()) return qdq.status();

  AccuracyReport report;
  for (const auto& o : float_model.graph().output()) report.output_names.push_back(o.name());
  report.outputs.resize(report.output_names.size());
  std::vector<double> signal(float_names.size(), 0), noise(float_names.size(), 0);
  for (const auto& inputs : eval_sets) {
    auto a = (*ref)->Run(inputs);
    if (!a.ok()) return a.status();
    auto b = (*qdq)->Run(inputs);
    if (!b.ok()) return b.status();
    for (size_t i = 0; i < report.outputs.size() && i < a->outputs.size(); ++i) {
      const HostTensor& x = a->outputs[i];
      const HostTensor& y = b->outputs[i];
      if (x.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32 ||
          x.num_elements() != y.num_elements()) {
        continue;
      }
      int64_t row = x.shape().empty() ? 0 : x.shape().back();
      size_t n = static_cast<size_t>(x.num_elements());
      report.outputs[i].Add({x.data_as<float>(), n}, {y.data_as<float>(), n}, row);
    }
    for (size_t k = 0; k < float_names.size(); ++k) {
      const HostTensor& x = a->observed[k];
      const HostTensor& y = b->observed[k];
      if (x.dtype() != DType::kFloat32 || y.dtype() != DType::kFloat32 ||
          x.num_elements() != y.num_elements()) {
        continue;
      }
      const float* px = x.data_as<float>();
      const float* py = y.data_as<float>();
      for (int64_t i = 0; i < x.num_elements(); ++i) {
        double e = static_cast<double>(px[i]) - py[i];
        signal[k] += static_cast<double>(px[i]) * px[i];
        noise[k] += e * e;
      }
    }
  }
  for (size_t k = 0; k < float_names.size(); ++k) {
    report.activation_sqnr_db[float_names[k]] = noise[k] == 0
                                                    ? std::numeric_limits<double>::infinity()
                                                    : 10.0 * std::log10(signal[k] / noise[k]);
  }
  return report;
}

}  // namespace cuvil::quantize
