// Private, AVX2 files only (kernels_avx2.cc, depthwise_avx2.cc, both built with -mavx2 -mfma):
// the fused activations on a vector of 8 floats. Every copy of this inline function is compiled
// for AVX2, so sharing it cannot hand AVX2 code to a generic caller.
#ifndef CUVIL_RUNTIME_UKERNELS_ACTIVATE_AVX2_H_
#define CUVIL_RUNTIME_UKERNELS_ACTIVATE_AVX2_H_

#include <immintrin.h>

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// Every activation but Sigmoid (callers apply it afterwards in scalar code). Always inlined: as a
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
    default:
      return v;
  }
}

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_ACTIVATE_AVX2_H_
