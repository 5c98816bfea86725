#include "quant_params.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace cuvil::quantize {

QuantParams ActivationParams(Range r, ActivationType type) {
  const int32_t qmin = type == ActivationType::kUInt8 ? 0 : -128;
  const int32_t qmax = type == ActivationType::kUInt8 ? 255 : 127;
  double lo = std::min(static_cast<double>(r.lo), 0.0);
  double hi = std::max(static_cast<double>(r.hi), 0.0);
  if (!(hi > lo)) return QuantParams{1.0f, 0};
  double scale = (hi - lo) / static_cast<double>(qmax - qmin);
  double zp = std::nearbyint(static_cast<double>(qmin) - lo / scale);
  QuantParams p;
  p.scale = static_cast<float>(scale);
  p.zero_point =
      static_cast<int32_t>(std::clamp(zp, static_cast<double>(qmin), static_cast<double>(qmax)));
  return p;
}

float SymmetricScale(float max_abs) {
  if (!(max_abs > 0) || !std::isfinite(max_abs)) return 1.0f;
  return max_abs / 127.0f;
}

int64_t QuantizeValue(float x, float scale, int64_t zero_point, int64_t qmin, int64_t qmax) {
  double q = std::nearbyint(static_cast<double>(x) / static_cast<double>(scale));
  if (std::isnan(q)) return std::clamp<int64_t>(zero_point, qmin, qmax);
  q += static_cast<double>(zero_point);
  return static_cast<int64_t>(std::clamp(q, static_cast<double>(qmin), static_cast<double>(qmax)));
}

absl::StatusOr<QuantizedWeight> QuantizeWeight(absl::Span<const float> data,
                                               absl::Span<const int64_t> dims, int axis) {
  int64_t count = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && count > std::numeric_limits<int64_t>::max() / d)) {
      return absl::InvalidArgumentError("weight dims overflow");
    }
    count *= d;
  }
  if (count != static_cast<int64_t>(data.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight has ", data.size(), " values, its dims hold ", count));
  }
  if (axis >= static_cast<int>(dims.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("axis ", axis, " out of range for rank ", dims.size()));
  }
  QuantizedWeight w;
  w.axis = axis;
  int64_t channels = 1, inner = count;
  if (axis >= 0) {
    channels = dims[axis];
    inner = 1;
    for (size_t i = static_cast<size_t>(axis) + 1; i < dims.size(); ++i) inner *= dims[i];
  }
  // Flat index i lies in channel (i / inner) % channels.
  std::vector<float> max_abs(static_cast<size_t>(std::max<int64_t>(channels, 1)), 0.0f);
  for (int64_t i = 0; i < count; ++i) {
    size_t c = axis >= 0 ? static_cast<size_t>((i / inner) % channels) : 0;
    float a = std::fabs(data[i]);
    if (std::isfinite(a)) max_abs[c] = std::max(max_abs[c], a);
  }
  w.scales.resize(max_abs.size());
  for (size_t c = 0; c < max_abs.size(); ++c) w.scales[c] = SymmetricScale(max_abs[c]);
  w.values.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    size_t c = axis >= 0 ? static_cast<size_t>((i / inner) % channels) : 0;
    w.values[i] = static_cast<int8_t>(QuantizeValue(data[i], w.scales[c], 0, -127, 127));
  }
  return w;
}

double Sqnr(absl::Span<const float> reference, absl::Span<const float> quantized) {
  double signal = 0, noise = 0;
  size_t n = std::min(reference.size(), quantized.size());
  for (size_t i = 0; i < n; ++i) {
    double x = reference[i], e = x - static_cast<double>(quantized[i]);
    signal += x * x;
    noise += e * e;
  }
  if (noise == 0) return std::numeric_limits<double>::infinity();
  if (signal == 0) return -std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(signal / noise);
}

}  // namespace cuvil::quantize
