// Private: the AVX2+FMA 3x3 depthwise plane kernel (depthwise_avx2.cc), which the AVX2 tier's
// depthwise_plane tries first.
#ifndef CUVIL_RUNTIME_UKERNELS_DEPTHWISE_AVX2_H_
#define CUVIL_RUNTIME_UKERNELS_DEPTHWISE_AVX2_H_

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// One depthwise channel with a 3x3 kernel, stride 1 or 2 (the same on both axes), dilation 1 and
// top/left pads of at most 2: y ([OH][OW]) = act(bias + conv(x ([H][W]), wt ([3][3])) +
// residual). The plane is copied once into per-thread zero-padded (for stride 2: stride-phase)
// planes, and the output is computed in strips of several rows and 8 or 16 columns with the nine
// weights held in registers. False, before touching y, for any other geometry. Call only on a CPU
// with AVX2 and FMA. Reentrant (the scratch planes are per thread).
bool Depthwise3x3Avx2(const cuvil_uk_conv_params& p, const float* x, const float* wt, float bias,
                      const float* residual, float* y, const Epilogue& ep);

// Floats of per-thread scratch Depthwise3x3Avx2 takes for plane p (0 when it declines p). Call
// only on a CPU with AVX2 and FMA (the file is built for them). Reentrant.
int64_t Depthwise3x3Avx2ScratchFloats(const cuvil_uk_conv_params& p);

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_DEPTHWISE_AVX2_H_
