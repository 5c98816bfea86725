// Private, AVX2 files only (kernels_avx2.cc, depthwise_avx2.cc, both built with -mavx2 -mfma):
// the fused activations on a vector of 8 floats. Every copy of this inline function is compiled
// for AVX2, so sharing it cannot hand AVX2 code to a generic caller.
#ifndef CUVIL_RUNTIME_UKERNELS_ACTIVATE_AVX2_H_
#define CUVIL_RUNTIME_UKERNELS_ACTIVATE_AVX2_H_

#include <immintrin.h>

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// exp(x) with x clamped to [-87, 88]: 2^n * e^r, r = x - n ln2 (ln2 in two parts), Cephes'
// degree-6 polynomial for e^r; within 2 ulp of expf over the range.
[[gnu::always_inline]] inline __m256 ExpAvx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 q = _mm256_set1_ps(1.9875691500e-4f);
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.3981999507e-3f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(8.3334519073e-3f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(4.1665795894e-2f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(1.6666665459e-1f));
  q = _mm256_fmadd_ps(q, r, _mm256_set1_ps(5.0000001201e-1f));
  q = _mm256_fmadd_ps(q, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // n is in [-126, 127]: 2^n is a normal float built from its exponent bits.
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(q, _mm256_castsi256_ps(e));
}

// sigmoid(x), or x * sigmoid(x) when `silu`, in registers (before the store: a pass over stored
// values would reload what masked stores just wrote, which store forwarding cannot serve).
[[gnu::always_inline]] inline __m256 GateAvx2(__m256 x, bool silu) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 d = _mm256_add_ps(one, ExpAvx2(_mm256_sub_ps(_mm256_setzero_ps(), x)));
  // 1 / d as rcp and one Newton step (2^-22 relative), cheaper than a division.
  __m256 r = _mm256_rcp_ps(d);
  r = _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, one), r);
  // Below -87 the clamped exp would leave x / e^87 (-6e-9 at x = -1e30): the value is 0 there.
  const __m256 live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.0f), _CMP_NLT_UQ);
  return _mm256_and_ps(live, silu ? _mm256_mul_ps(x, r) : r);
}

// Every fused activation. Always inlined: as a
// call (GCC would not inline it) it cost more than the 9 FMAs of a depthwise output vector.
[[gnu::always_inline]] inline __m256 ActivateAvx2(__m256 v, const Epilogue& ep) {
  switch (ep.activation) {
    case CUVIL_UK_ACT_RELU:
      return _mm256_max_ps(v, _mm256_setzero_ps());
    case CUVIL_UK_ACT_CLIP:
      return _mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(ep.alpha)), _mm256_set1_ps(ep.beta));
    case CUVIL_UK_ACT_HARDSIGMOID: {
      __m256 h = _mm256_fmadd_ps(_mm256_set1_ps(ep.alpha), v, _mm256_set1_ps(ep.beta));
      return _mm256_min_ps(_mm256_max_ps(h, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
    }
    case CUVIL_UK_ACT_HARDSWISH: {
      __m256 h = _mm256_fmadd_ps(_mm256_set1_ps(1.0f / 6.0f), v, _mm256_set1_ps(0.5f));
      h = _mm256_min_ps(_mm256_max_ps(h, _mm256_setzero_ps()), _mm256_set1_ps(1.0f));
      return _mm256_mul_ps(v, h);
    }
    case CUVIL_UK_ACT_SIGMOID:
      return GateAvx2(v, false);
    case CUVIL_UK_ACT_SILU:
      return GateAvx2(v, true);
    default:
      return v;
  }
}

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_ACTIVATE_AVX2_H_
