// Private: the Winograd F(2x2, 3x3) convolution driver (winograd.cc).
#ifndef CUVIL_RUNTIME_UKERNELS_WINOGRAD_H_
#define CUVIL_RUNTIME_UKERNELS_WINOGRAD_H_

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// Region bytes ConvWinograd takes for `batch` images on the calling thread (see
// cuvil_uk_scratch_bytes); -1 on overflow. Reentrant.
int64_t WinogradScratchBytes(const Table& t, const cuvil_uk_conv_params& p, int64_t batch);

// True for the geometry ConvWinograd computes: 3x3, stride 1, dilation 1, one group.
bool WinogradEligible(const cuvil_uk_conv_params& p);

// cuvil_uk_conv2d for a CUVIL_UK_CONV_WINOGRAD layer on table `t`: u is packed by
// cuvil_uk_pack_winograd_weights; p must be WinogradEligible. Reentrant.
void ConvWinograd(const Table& t, const cuvil_uk_conv_params& p, const float* x, const float* u,
                  const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                  float beta);

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_WINOGRAD_H_
