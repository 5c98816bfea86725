// Private: the 8-bit <-> float row conversions of the quantized depthwise convolution, written
// once and compiled by each tier's file with its own ISA flags (so each vectorises them for its
// width). Everything here has internal linkage: an inline or template entity shared between files
// built with different flags could be merged into the wrong tier's copy.
#ifndef CUVIL_RUNTIME_UKERNELS_QUANTIZE_ROWS_H_
#define CUVIL_RUNTIME_UKERNELS_QUANTIZE_ROWS_H_

#include <cstddef>
#include <cstdint>
#include <limits>

namespace cuvil::uk {
namespace {

// Indices are ptrdiff_t: the int64_t the callers pass on 64-bit hosts, and a single register on a
// 32-bit microcontroller, where a 64-bit loop counter costs carry arithmetic per element.
template <typename Q>
void DequantizeRowOf(const Q* x, int64_t n, float scale, int32_t zero, float* out) {
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) {
    out[i] = static_cast<float>(static_cast<int32_t>(x[i]) - zero) * scale;
  }
}

// (x - zero) * scale, as DequantizeLinear computes it; x holds uint8 or (is_signed) int8.
void DequantizeRow(const void* x, bool is_signed, int64_t n, float scale, int32_t zero,
                   float* out) {
  if (is_signed) {
    DequantizeRowOf(static_cast<const int8_t*>(x), n, scale, zero, out);
  } else {
    DequantizeRowOf(static_cast<const uint8_t*>(x), n, scale, zero, out);
  }
}

// Clamping before rounding is the same for integer bounds, and keeps |v / scale| small enough
// for the add-and-subtract rounding (half to even), which vectorises where nearbyint does not.
// One element of QuantizeRowOf: lo and hi are Q's bounds less the zero point.
template <typename Q>
inline Q QuantizeOne(float v, float scale, int32_t zero, float lo, float hi) {
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer.
  float a = v / scale;
#if defined(CUVIL_HAVE_VMAXNM)
  // VMAXNM / VMINNM (FPv5, as on the Cortex-M7; the build says so): the same results (NaN gives lo;
  // +-0 round to 0 alike), two instructions instead of a compare, a flag transfer and a conditional
  // move each.
  a = __builtin_fmaxf(a, lo);
  a = __builtin_fminf(a, hi);
#else
  a = a > lo ? a : lo;  // NaN fails the comparison and becomes lo.
  a = a < hi ? a : hi;
#endif
  return static_cast<Q>(static_cast<int32_t>((a + kRound) - kRound) + zero);
}

template <typename Q>
void QuantizeRowOf(const float* v, int64_t n, float scale, int32_t zero, Q* out) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min() - zero);
  const float hi = static_cast<float>(std::numeric_limits<Q>::max() - zero);
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(n); ++i) {
    out[i] = QuantizeOne<Q>(v[i], scale, zero, lo, hi);
  }
}

// saturate(round_half_even(v / scale) + zero) as uint8 or (is_signed) int8, as QuantizeLinear
// computes it; NaN gives the lowest value.
void QuantizeRow(const float* v, int64_t n, float scale, int32_t zero, bool is_signed, void* out) {
  if (is_signed) {
    QuantizeRowOf(v, n, scale, zero, static_cast<int8_t*>(out));
  } else {
    QuantizeRowOf(v, n, scale, zero, static_cast<uint8_t*>(out));
  }
}

}  // namespace
}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_QUANTIZE_ROWS_H_
