#include "activation_calibrator.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "observed_model.h"

namespace cuvil::quantize {

double HistogramSqnr(const AbsHistogram& h, Range r, ActivationType type) {
  QuantParams p = ActivationParams(r, type);
  const int64_t qmin = type == ActivationType::kUInt8 ? 0 : -128;
  const int64_t qmax = type == ActivationType::kUInt8 ? 255 : 127;
  // |x| loses the sign: take each bin's centre at the sign the range favours (positive unless
  // the range is mostly negative), which is exact for one-signed tensors such as ReLU outputs.
  const float sign = r.hi >= -r.lo ? 1.0f : -1.0f;
  double signal = 0, noise = 0;
  const auto& counts = h.counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == 0) continue;
    float x = sign * (static_cast<float>(i) + 0.5f) * h.bin_width();
    int64_t q = QuantizeValue(x, p.scale, p.zero_point, qmin, qmax);
    double restored = static_cast<double>(q - p.zero_point) * p.scale;
    double e = x - restored;
    signal += static_cast<double>(counts[i]) * x * x;
    noise += static_cast<double>(counts[i]) * e * e;
  }
  if (noise == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

absl::StatusOr<std::map<std::string, ActivationStats>> CalibrateActivations(
    JitEngine& engine, const onnx::ModelProto& model, const std::vector<std::string>& activations,
    const std::vector<std::vector<HostTensor>>& input_sets, const CalibrationOptions& options,
    ActivationType type) {
  auto observed = ObservedModel::Create(engine, model, activations, "cuvil-quantize/calibrate");
  if (!observed.ok()) return observed.status();
  std::vector<MinMaxObserver> minmax(activations.size());
  std::vector<bool> is_float(activations.size(), true);
  auto each = [&](const std::function<void(size_t, const HostTensor&)>& fn) -> absl::Status {
    for (const auto& inputs : input_sets) {
      auto r = (*observed)->Run(inputs);
      if (!r.ok()) return r.status();
      for (size_t i = 0; i < activations.size(); ++i) {
        const HostTensor& t = r->observed[i];
        if (t.dtype() != DType::kFloat32) {
          is_float[i] = false;
          continue;
        }
        fn(i, t);
      }
    }
    return absl::OkStatus();
  };
  auto pass1 = each([&](size_t i, const HostTensor& t) {
    minmax[i].Add(t.data_as<float>(), static_cast<size_t>(t.num_elements()));
  });
  if (!pass1.ok()) return pass1;

  // The histogram pass: TensorRT-style |x| histograms over [0, max |x|].
  std::vector<AbsHistogram> hist;
  for (size_t i = 0; i < activations.size(); ++i) {
    Range s = minmax[i].range();
    hist.emplace_back(options.histogram_bins, std::max(std::fabs(s.lo), std::fabs(s.hi)));
  }
  auto pass2 = each([&](size_t i, const HostTensor& t) {
    hist[i].Add(t.data_as<float>(), static_cast<size_t>(t.num_elements()));
  });
  if (!pass2.ok()) return pass2;

  std::map<std::string, ActivationStats> out;
  for (size_t i = 0; i < activations.size(); ++i) {
    if (!is_float[i]) continue;
    ActivationStats s;
    s.seen = minmax[i].range();
    s.calibrated = CalibratedRange(options.method, s.seen, &hist[i], options.percentile);
    s.sqnr_estimate_db = HistogramSqnr(hist[i], s.calibrated, type);
    out[activations[i]] = s;
  }
  return out;
}

}  // namespace cuvil::quantize
