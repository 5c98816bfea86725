// Private: the scalar form of each fused activation, as the generic tier applies it, shared by
// the portable kernels. Internal linkage, as quantize_rows.h: a file built with other ISA flags
// must not provide the copy another links to.
#ifndef CUVIL_RUNTIME_UKERNELS_ACTIVATE_SCALAR_H_
#define CUVIL_RUNTIME_UKERNELS_ACTIVATE_SCALAR_H_

#include <cmath>

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

// ep.activation (with Clip's bounds or HardSigmoid's alpha and beta) applied to v.
[[maybe_unused]] float Activate(float v, const Epilogue& ep) {
  switch (ep.activation) {
    case CUVIL_UK_ACT_RELU:
      return v > 0.0f ? v : 0.0f;
    case CUVIL_UK_ACT_CLIP:
      return v < ep.alpha ? ep.alpha : (v > ep.beta ? ep.beta : v);
    case CUVIL_UK_ACT_HARDSIGMOID: {
      float h = ep.alpha * v + ep.beta;
      return h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h);
    }
    case CUVIL_UK_ACT_HARDSWISH: {
      float h = v / 6.0f + 0.5f;
      return v * (h < 0.0f ? 0.0f : (h > 1.0f ? 1.0f : h));
    }
    case CUVIL_UK_ACT_SIGMOID:
      return 1.0f / (1.0f + std::exp(-v));
    case CUVIL_UK_ACT_SILU:
      return v / (1.0f + std::exp(-v));
    default:
      return v;
  }
}

}  // namespace
}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_ACTIVATE_SCALAR_H_
