#include "calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace cuvil::quantize {

absl::StatusOr<CalibrationMethod> ParseCalibrationMethod(const std::string& name) {
  if (name == "minmax") return CalibrationMethod::kMinMax;
  if (name == "percentile") return CalibrationMethod::kPercentile;
  if (name == "entropy") return CalibrationMethod::kEntropy;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown calibration method '", name, "' (minmax, percentile or entropy)"));
}

void MinMaxObserver::Add(const float* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    float v = data[i];
    if (!std::isfinite(v)) continue;
    if (!seen_) {
      min_ = max_ = v;
      seen_ = true;
    } else {
      min_ = std::min(min_, v);
      max_ = std::max(max_, v);
    }
  }
}

AbsHistogram::AbsHistogram(int bins, float limit)
    : counts_(static_cast<size_t>(std::max(bins, 1)), 0),
      bin_width_((limit > 0 && std::isfinite(limit) ? limit : 1.0f) /
                 static_cast<float>(std::max(bins, 1))) {}

void AbsHistogram::Add(const float* data, size_t n) {
  const size_t last = counts_.size() - 1;
  for (size_t i = 0; i < n; ++i) {
    float v = std::fabs(data[i]);
    if (!std::isfinite(v)) continue;
    double bin = std::floor(static_cast<double>(v) / bin_width_);
    counts_[bin >= static_cast<double>(last) ? last : static_cast<size_t>(bin)]++;
    ++total_;
  }
}

float PercentileThreshold(const AbsHistogram& h, double percentile) {
  if (h.total() == 0) return 0;
  double want = std::clamp(percentile, 0.0, 100.0) / 100.0 * static_cast<double>(h.total());
  uint64_t cumulative = 0;
  const auto& counts = h.counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    cumulative += counts[i];
    if (static_cast<double>(cumulative) >= want) {
      return static_cast<float>(i + 1) * h.bin_width();
    }
  }
  return static_cast<float>(counts.size()) * h.bin_width();
}

double KlDivergence(const std::vector<double>& p, const std::vector<double>& q) {
  constexpr double kEpsilon = 1e-10;
  double sp = 0, sq = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    sp += p[i];
    sq += q[i];
  }
  if (sp <= 0) return 0;
  if (sq <= 0) return std::numeric_limits<double>::infinity();
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    double pi = p[i] / sp;
    double qi = std::max(q[i] / sq, kEpsilon);
    kl += pi * std::log(pi / qi);
  }
  return kl;
}

float EntropyThreshold(const AbsHistogram& h, int levels) {
  if (h.total() == 0 || levels < 1) return 0;
  // The first bin holds the exact zeros a ReLU emits, a spike that says nothing about the range
  // but dominates the divergence (spread over a merged group it favours ever smaller
  // thresholds); like NVIDIA's pytorch-quantization, count it as its neighbour does.
  std::vector<uint64_t> counts = h.counts();
  const size_t n = counts.size();
  if (n > 1) counts[0] = counts[1];
  const size_t q_bins = static_cast<size_t>(levels);
  if (n <= q_bins) return static_cast<float>(n) * h.bin_width();
  // Suffix sums: the mass beyond bin i, folded into the reference's last bin.
  std::vector<double> beyond(n + 1, 0);
  for (size_t i = n; i-- > 0;) beyond[i] = beyond[i + 1] + static_cast<double>(counts[i]);

  double best_kl = std::numeric_limits<double>::infinity();
  size_t best_i = n;
  std::vector<double> p, q;
  for (size_t i = q_bins; i <= n; ++i) {
    p.assign(counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(i));
    p[i - 1] += beyond[i];
    // Merge bins [0, i) into q_bins groups (the last takes the remainder), then spread each
    // group's mass evenly over its non-empty source bins.
    q.assign(i, 0);
    const size_t merged = i / q_bins;
    for (size_t j = 0; j < q_bins; ++j) {
      size_t start = j * merged;
      size_t end = j + 1 == q_bins ? i : start + merged;
      double mass = 0;
      size_t nonzero = 0;
      for (size_t k = start; k < end; ++k) {
        mass += static_cast<double>(counts[k]);
        nonzero += counts[k] != 0;
      }
      if (nonzero == 0) continue;
      for (size_t k = start; k < end; ++k) {
        if (counts[k] != 0) q[k] = mass / static_cast<double>(nonzero);
      }
    }
    double kl = KlDivergence(p, q);
    if (kl < best_kl) {
      best_kl = kl;
      best_i = i;
    }
  }
  return static_cast<float>(best_i) * h.bin_width();
}

Range CalibratedRange(CalibrationMethod method, Range seen, const AbsHistogram* h,
                      double percentile) {
  Range r{std::min(seen.lo, 0.0f), std::max(seen.hi, 0.0f)};
  if (method == CalibrationMethod::kMinMax || h == nullptr || h->total() == 0) return r;
  float t = method == CalibrationMethod::kPercentile
                ? PercentileThreshold(*h, percentile)
                : EntropyThreshold(*h, seen.lo >= 0 ? 255 : 128);
  if (t <= 0) return r;
  return Range{std::max(r.lo, -t), std::min(r.hi, t)};
}

}  // namespace cuvil::quantize
