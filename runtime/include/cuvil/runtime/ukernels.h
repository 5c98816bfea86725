// Microkernels that generated code calls (extern "C" cuvil_uk_*): convolution over a
// register-blocked SGEMM with a fused epilogue (bias, residual add, activation), and max pooling.
//
// Every dim is a run-time argument, so one compiled model serves every batch size. The body is
// chosen once per process from the CPU's features (AVX-512 F/BW/DQ/VL, else AVX2+FMA, else
// portable); the environment variable CUVIL_UK_TIER=avx2|generic forces a lower tier (benchmarks,
// tests). cuvil_uk_tier() names it. Weight packing (cuvil_uk_pack_conv_weights) uses one layout for
// every tier.
#ifndef CUVIL_RUNTIME_UKERNELS_H_
#define CUVIL_RUNTIME_UKERNELS_H_

#include <cstdint>

extern "C" {

// Activations the epilogue applies after bias and residual (ONNX semantics).
enum cuvil_uk_activation : int64_t {
  CUVIL_UK_ACT_NONE = 0,
  CUVIL_UK_ACT_RELU = 1,
  CUVIL_UK_ACT_CLIP = 2,         // min(max(x, alpha), beta)
  CUVIL_UK_ACT_HARDSIGMOID = 3,  // max(0, min(1, alpha * x + beta))
  CUVIL_UK_ACT_HARDSWISH = 4,    // x * max(0, min(1, x / 6 + 1 / 2))
  CUVIL_UK_ACT_SIGMOID = 5,
};

// Geometry of a 2-D NCHW convolution; generated code stores it as a constant array of int64.
// Thread-compatible (plain data).
struct cuvil_uk_conv_params {
  int64_t channels, height, width;              // input C, H, W
  int64_t out_channels, out_height, out_width;  // output M, OH, OW
  int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
  int64_t pad_top, pad_left;  // the bottom/right pads follow from the output size
  int64_t groups;
  int64_t activation;  // cuvil_uk_activation
  int64_t flags;       // CUVIL_UK_CONV_*
};

// w is packed by cuvil_uk_pack_conv_weights (else it must be the depthwise [C,1,KH,KW] layout).
inline constexpr int64_t CUVIL_UK_CONV_PACKED = 1;
// groups == channels == out_channels: the per-channel kernel; w is ONNX's [C, 1, KH, KW].
inline constexpr int64_t CUVIL_UK_CONV_DEPTHWISE = 2;
// A 3x3, stride-1, undilated, ungrouped conv computed by Winograd F(2x2, 3x3); w is packed by
// cuvil_uk_pack_winograd_weights.
inline constexpr int64_t CUVIL_UK_CONV_WINOGRAD = 4;

// y = act(conv(x, w) + bias + residual) for `batch` images. bias ([M]) and residual (y's shape)
// may be null; y must not overlap x, bias or residual. Splits the work over the calling thread's
// intra-op threads (cuvil::SetIntraOpThreads). Reentrant.
void cuvil_uk_conv2d(const cuvil_uk_conv_params* p, const float* x, const float* w,
                     const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                     float beta);

// Floats that cuvil_uk_pack_conv_weights writes for `groups` groups of `mg` output channels
// with `k` = (C/groups) * KH * KW weights each; -1 on overflow.
int64_t cuvil_uk_packed_conv_weights_size(int64_t groups, int64_t mg, int64_t k);

// Packs ONNX's [M, C/groups, KH, KW] weights into the register-block layout the GEMM reads:
// per group, panels of CUVIL_UK_MR output channels stored [k][MR], zero padded. Reentrant.
void cuvil_uk_pack_conv_weights(const float* w, int64_t groups, int64_t mg, int64_t k,
                                float* packed);

// Floats that cuvil_uk_pack_winograd_weights writes for `m` output and `c` input channels; -1 on
// overflow.
int64_t cuvil_uk_winograd_weights_size(int64_t m, int64_t c);

// Packs ONNX's [M, C, 3, 3] weights for CUVIL_UK_CONV_WINOGRAD: the 16 transformed positions
// t of G g G^T, each as GEMM panels of CUVIL_UK_MR output channels stored [c][MR], zero padded
// (t-major). Reentrant.
void cuvil_uk_pack_winograd_weights(const float* w, int64_t m, int64_t c, float* packed);

// Geometry of a 2-D NCHW max pool over independent [H][W] planes. Thread-compatible (plain data).
struct cuvil_uk_pool_params {
  int64_t height, width, out_height, out_width;
  int64_t kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w;
  int64_t pad_top, pad_left;  // the bottom/right pads (and ceil_mode) follow from the output size
};

// y[p] = max over the window of x[p] for `planes` planes (padding never wins; a window with no
// input element gives -inf; NaN propagates as ONNX's Max does). y must not overlap x. Splits the
// planes over the calling thread's intra-op threads. Reentrant.
void cuvil_uk_maxpool2d(const cuvil_uk_pool_params* p, const float* x, float* y, int64_t planes);

// Rows of one register block (output channels per packed panel).
inline constexpr int64_t CUVIL_UK_MR = 6;

// The name of the body in use ("avx512", "avx2_fma" or "generic").
const char* cuvil_uk_tier();

}  // extern "C"

#endif  // CUVIL_RUNTIME_UKERNELS_H_
