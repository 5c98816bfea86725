// Quantization parameters: scale and zero point of an activation range (asymmetric) and of a
// weight tensor (symmetric int8, per tensor or per channel), and the quantization itself, with
// the rounding ONNX's QuantizeLinear uses (half to even, then saturate).
#ifndef CUVIL_TOOLS_QUANTIZE_QUANT_PARAMS_H_
#define CUVIL_TOOLS_QUANTIZE_QUANT_PARAMS_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "calibration.h"

namespace cuvil::quantize {

// The integer type of quantized activations.
enum class ActivationType { kUInt8, kInt8 };

struct QuantParams {
  float scale = 1;
  int32_t zero_point = 0;
};

// Asymmetric parameters mapping `r` (widened to contain 0) onto the type's full range
// ([0, 255] or [-128, 127]); 0 is exactly representable. An empty range gets scale 1.
QuantParams ActivationParams(Range r, ActivationType type);

// Symmetric int8 scale for values in [-max_abs, max_abs] mapped onto [-127, 127]; 1 when
// max_abs is 0 (an all-zero tensor or channel).
float SymmetricScale(float max_abs);

// saturate(roundeven(x / scale) + zero_point) into [qmin, qmax].
int64_t QuantizeValue(float x, float scale, int64_t zero_point, int64_t qmin, int64_t qmax);

// A weight tensor quantized to int8, symmetric (zero point 0), per tensor (axis < 0: one scale)
// or per channel along `axis` (one scale per index of that dimension).
struct QuantizedWeight {
  std::vector<int8_t> values;
  std::vector<float> scales;
  int axis = -1;
};

// Quantizes `data` of shape `dims` (row-major). InvalidArgument when `axis` is not a dimension
// of `dims` or the element count does not match.
absl::StatusOr<QuantizedWeight> QuantizeWeight(absl::Span<const float> data,
                                               absl::Span<const int64_t> dims, int axis);

// Signal-to-quantization-noise ratio in dB of `quantized` against `reference`: 10 log10(sum x^2 /
// sum (x - x')^2); +inf when they are equal, -inf when the reference is all zero and they differ.
double Sqnr(absl::Span<const float> reference, absl::Span<const float> quantized);

}  // namespace cuvil::quantize

#endif  // CUVIL_TOOLS_QUANTIZE_QUANT_PARAMS_H_
