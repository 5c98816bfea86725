// Private, tests only: the scalar definition of each fused activation that the microkernel tests
// check every tier against.
#ifndef CUVIL_RUNTIME_UKERNELS_ACTIVATION_REFERENCE_H_
#define CUVIL_RUNTIME_UKERNELS_ACTIVATION_REFERENCE_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "cuvil/runtime/ukernels.h"

namespace cuvil::uk {

// cuvil_uk_activation `act` (with Clip's min/max or HardSigmoid's alpha/beta) applied to v.
inline float ReferenceActivation(float v, int64_t act, float alpha, float beta) {
  switch (act) {
    case CUVIL_UK_ACT_RELU:
      return std::max(v, 0.0f);
    case CUVIL_UK_ACT_CLIP:
      return std::min(std::max(v, alpha), beta);
    case CUVIL_UK_ACT_HARDSIGMOID:
      return std::min(std::max(alpha * v + beta, 0.0f), 1.0f);
    case CUVIL_UK_ACT_HARDSWISH:
      return v * std::min(std::max(v / 6.0f + 0.5f, 0.0f), 1.0f);
    case CUVIL_UK_ACT_SIGMOID:
      return 1.0f / (1.0f + std::exp(-v));
    case CUVIL_UK_ACT_SILU:
      return v / (1.0f + std::exp(-v));
    default:
      return v;
  }
}

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_ACTIVATION_REFERENCE_H_
