// Private: the quantized depthwise convolution one 8-bit plane at a time in plain scalar code,
// with none of the float convolution driver (padded phase copies, tap tables, tiers) behind it.
// A microcontroller library (CUVIL_AOT_BARE_METAL) runs cuvil_uk_qdepthwise2d on it, so that a
// model without float convolutions links no float convolution code; every other build keeps
// conv.cc's driver and uses this only in tests. Reentrant.
#ifndef CUVIL_RUNTIME_UKERNELS_QDEPTHWISE_DIRECT_H_
#define CUVIL_RUNTIME_UKERNELS_QDEPTHWISE_DIRECT_H_

#include <cstdint>

#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {

// Floats of scratch QDepthwisePlaneDirect needs for plane p: the dequantised input plane with
// the padding its taps read; -1 on overflow.
int64_t QDepthwisePlaneDirectScratchFloats(const cuvil_uk_conv_params& p);

// One channel of cuvil_uk_qdepthwise2d: x ([H][W] of p, 8-bit as q says), wt ([KH][KW] floats),
// y ([OH][OW], 8-bit) = quantize(act(bias + sum over the taps inside the input of wt * dequantize
// (x))), with the generic tier's arithmetic in its order (dequantize_row, taps in row-major order
// from the bias, Activate, quantize_row's QuantizeOne), so on a host without FMA contraction it
// writes what dequantize -> generic depthwise -> quantize writes. Any stride, dilation and
// padding. `scratch` holds QDepthwisePlaneDirectScratchFloats(p) floats; `padded`: they hold
// the plane of an earlier call with the same geometry, whose zero padding is then kept as it is.
void QDepthwisePlaneDirect(const cuvil_uk_conv_params& p, const void* x, const float* wt,
                           float bias, void* y, const QuantizedPlane& q, const Epilogue& ep,
                           float* scratch, bool padded);

// Region bytes the bare-metal cuvil_uk_qdepthwise2d takes, any batch; -1 on overflow.
int64_t QDepthwise2dDirectScratchBytes(const cuvil_uk_conv_params& p);

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_QDEPTHWISE_DIRECT_H_
