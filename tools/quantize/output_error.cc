#include "output_error.h"

#include <algorithm>
#include <cmath>

namespace cuvil::quantize {

std::vector<int64_t> RowArgmax(absl::Span<const float> values, int64_t row_length) {
  std::vector<int64_t> out;
  if (row_length <= 0) return out;
  const size_t len = static_cast<size_t>(row_length);
  for (size_t start = 0; start + len <= values.size(); start += len) {
    size_t best = 0;
    for (size_t j = 1; j < len; ++j) {
      if (values[start + j] > values[start + best]) best = j;
    }
    out.push_back(static_cast<int64_t>(best));
  }
  return out;
}

void OutputError::Add(absl::Span<const float> reference, absl::Span<const float> got,
                      int64_t row_length) {
  size_t n = std::min(reference.size(), got.size());
  for (size_t i = 0; i < n; ++i) {
    double r = reference[i], g = got[i];
    dot_ += r * g;
    ref_sq_ += r * r;
    got_sq_ += g * g;
    max_abs_ = std::max(max_abs_, std::fabs(r - g));
  }
  int64_t row = row_length > 0 ? row_length : static_cast<int64_t>(n);
  auto a = RowArgmax(reference.subspan(0, n), row);
  auto b = RowArgmax(got.subspan(0, n), row);
  for (size_t i = 0; i < a.size(); ++i) top1_matches_ += a[i] == b[i];
  rows_ += static_cast<int64_t>(a.size());
}

double OutputError::cosine() const {
  if (ref_sq_ == 0 && got_sq_ == 0) return 1;
  if (ref_sq_ == 0 || got_sq_ == 0) return 0;
  return dot_ / std::sqrt(ref_sq_ * got_sq_);
}

}  // namespace cuvil::quantize
