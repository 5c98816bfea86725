// How far a quantized model's outputs are from the float model's: cosine similarity, maximum
// absolute error and top-1 agreement, accumulated over many runs.
#ifndef CUVIL_TOOLS_QUANTIZE_OUTPUT_ERROR_H_
#define CUVIL_TOOLS_QUANTIZE_OUTPUT_ERROR_H_

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace cuvil::quantize {

// The index of the largest value of each row of `values` (rows of `row_length`; a trailing
// partial row is ignored). Ties go to the first.
std::vector<int64_t> RowArgmax(absl::Span<const float> values, int64_t row_length);

// Thread-compatible accumulator for one output.
class OutputError {
 public:
  // Folds one run in: `reference` (float model) and `got` (quantized model), the same size,
  // rows of `row_length` for the top-1 comparison (<= 0: the whole tensor is one row).
  void Add(absl::Span<const float> reference, absl::Span<const float> got, int64_t row_length);

  // Cosine similarity of all values folded in, taken as one vector (1 when both are all zero,
  // 0 when exactly one is).
  double cosine() const;
  double max_abs_error() const { return max_abs_; }
  int64_t rows() const { return rows_; }
  int64_t top1_matches() const { return top1_matches_; }

 private:
  double dot_ = 0, ref_sq_ = 0, got_sq_ = 0, max_abs_ = 0;
  int64_t rows_ = 0, top1_matches_ = 0;
};

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_OUTPUT_ERROR_H_
