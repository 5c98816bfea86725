// Calibration math: the range an activation tensor is quantized over, from the values the float
// model produced (min/max, a percentile of |x|, or the KL-divergence threshold TensorRT uses).
#ifndef CUVIL_TOOLS_QUANTIZE_CALIBRATION_H_
#define CUVIL_TOOLS_QUANTIZE_CALIBRATION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cuvil::quantize {

enum class CalibrationMethod { kMinMax, kPercentile, kEntropy };

// "minmax", "percentile" or "entropy"; InvalidArgument otherwise.
absl::StatusOr<CalibrationMethod> ParseCalibrationMethod(const std::string& name);

// A closed range [lo, hi] of real values.
struct Range {
  float lo = 0;
  float hi = 0;
};

// Running minimum and maximum of the finite values seen (NaN and infinities are skipped).
// Thread-compatible.
class MinMaxObserver {
 public:
  // Folds `n` values into the range.
  void Add(const float* data, size_t n);
  // True once a finite value was seen.
  bool seen() const { return seen_; }
  // The range seen ([0, 0] before any value).
  Range range() const { return seen_ ? Range{min_, max_} : Range{}; }

 private:
  bool seen_ = false;
  float min_ = 0;
  float max_ = 0;
};

// Histogram of |x| over [0, limit] with `bins` equal bins; values above limit land in the last
// bin (TensorRT's calibration histogram). Thread-compatible.
class AbsHistogram {
 public:
  // `bins` >= 1; `limit` > 0 (a non-positive limit is replaced by 1).
  AbsHistogram(int bins, float limit);
  // Folds `n` values in (non-finite values are skipped).
  void Add(const float* data, size_t n);
  const std::vector<uint64_t>& counts() const { return counts_; }
  float bin_width() const { return bin_width_; }
  uint64_t total() const { return total_; }

 private:
  std::vector<uint64_t> counts_;
  float bin_width_ = 1;
  uint64_t total_ = 0;
};

// The smallest t such that at least `percentile` percent (0..100] of the histogram's mass lies in
// [0, t] (the upper edge of the bin where the cumulative count reaches it). 0 for an empty
// histogram.
float PercentileThreshold(const AbsHistogram& h, double percentile);

// KL(p || q) over bins where p > 0, with p and q normalised to sum 1 (q's zero bins where p > 0
// contribute as if q held a tiny epsilon). p and q must have the same size.
double KlDivergence(const std::vector<double>& p, const std::vector<double>& q);

// TensorRT's entropy calibration: for every candidate threshold of i bins (i from `levels` up
// to the histogram's size), the reference distribution is bins [0, i) with the mass beyond
// folded into bin i-1, and the candidate is that distribution merged into `levels` quantization
// bins and expanded back over the non-empty bins; returns i * bin_width for the i with the least
// KL divergence. `levels` is the number of quantized magnitudes (128 for symmetric int8,
// 255 for a non-negative tensor in uint8). The first bin counts as the second does (it holds a
// ReLU's zeros, whose spike would otherwise drive the threshold down). 0 for an empty histogram.
float EntropyThreshold(const AbsHistogram& h, int levels);

// The range to quantize a tensor over: minmax keeps `seen`; percentile and entropy clip both
// ends to ±threshold (the threshold from `h`). Always contains 0.
Range CalibratedRange(CalibrationMethod method, Range seen, const AbsHistogram* h,
                      double percentile = 99.99);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_CALIBRATION_H_
