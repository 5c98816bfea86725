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
  CUVIL_UK_ACT_SILU = 6,  // x * sigmoid(x) (SiLU, Swish): ONNX Mul(x, Sigmoid(x))
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
// With CUVIL_UK_CONV_PACKED: w is packed by cuvil_uk_pack_conv_weights_tap_major, and each tap is
// computed only over the outputs it reads input for (for dilations wide against the map, where
// most taps of most outputs read padding).
inline constexpr int64_t CUVIL_UK_CONV_TAP_MAJOR = 8;

// y = act(conv(x, w) + bias + residual) for `batch` images. bias ([M]) and residual (y's shape)
// may be null; y must not overlap x, bias or residual. Splits the work over the calling thread's
// intra-op threads (cuvil::SetIntraOpThreads). Reentrant.
void cuvil_uk_conv2d(const cuvil_uk_conv_params* p, const float* x, const float* w,
                     const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                     float beta);

// A depthwise cuvil_uk_conv2d (CUVIL_UK_CONV_DEPTHWISE, no residual) between 8-bit tensors: x
// holds uint8 (x_signed 0) or int8 values read as (x - x_zero) * x_scale, and y receives
// saturate(round_half_even(conv / y_scale) + y_zero) as uint8 (y_signed 0) or int8 — exactly what
// DequantizeLinear -> Conv -> QuantizeLinear computes, without the float tensors in memory.
// Reentrant; splits the work like cuvil_uk_conv2d.
void cuvil_uk_qdepthwise2d(const cuvil_uk_conv_params* p, const void* x, int32_t x_signed,
                           float x_scale, int32_t x_zero, const float* w, const float* bias,
                           void* y, int32_t y_signed, float y_scale, int32_t y_zero, int64_t batch,
                           float alpha, float beta);

// Floats that cuvil_uk_pack_conv_weights writes for `groups` groups of `mg` output channels
// with `k` = (C/groups) * KH * KW weights each; -1 on overflow.
int64_t cuvil_uk_packed_conv_weights_size(int64_t groups, int64_t mg, int64_t k);

// Packs ONNX's [M, C/groups, KH, KW] weights into the register-block layout the GEMM reads:
// per group, panels of CUVIL_UK_MR output channels stored [k][MR], zero padded. Reentrant.
void cuvil_uk_pack_conv_weights(const float* w, int64_t groups, int64_t mg, int64_t k,
                                float* packed);

// As cuvil_uk_pack_conv_weights (the same size), with each output channel's weights reordered
// tap-major first: row (ky * KW + kx) * (C/groups) + c of a panel holds w[m][c][ky][kx], so that
// the rows of one kernel row's taps are contiguous (CUVIL_UK_CONV_TAP_MAJOR). `taps` = KH * KW.
// Reentrant.
void cuvil_uk_pack_conv_weights_tap_major(const float* w, int64_t groups, int64_t mg, int64_t cg,
                                          int64_t taps, float* packed);

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

// Quantized convolution (QDQ models; see compiler/src/fuse_qdq.cc): uint8 or int8 activations,
// int8 weights, int32 accumulation, then a per-output-channel requantisation epilogue.
//
// Output element types of cuvil_uk_qconv2d.
enum cuvil_uk_qout : int64_t {
  CUVIL_UK_QOUT_FLOAT = 0,  // float32: v (+ residual), clamped to [lo, hi]
  CUVIL_UK_QOUT_U8 = 1,     // uint8: round-half-even(v) clamped to [lo, hi] (integers in range)
  CUVIL_UK_QOUT_S8 = 2,     // int8: likewise
  CUVIL_UK_QOUT_S32 = 3,    // int32: acc - comp, exact (ConvInteger, MatMulInteger); mult, bias,
                            // residual, lo and hi are not read
  CUVIL_UK_QOUT_FLOAT_MEAN = 4,  // float32 [N, M]: the mean over the output positions of the
                                 // clamped v (a GlobalAveragePool fused in; cuvil_uk_qconv2d
                                 // only, no residual); added in position order on every tier
};

// Geometry and types of one quantized convolution; generated code stores it as a constant array
// of int64. conv.groups must be 1; conv.activation and conv.flags are unused. Thread-compatible.
struct cuvil_uk_qconv_params {
  cuvil_uk_conv_params conv;
  int64_t x_signed;  // 1: x is int8 (read as x + 128 in uint8), 0: x is uint8
  int64_t x_zero;    // x's zero point in x's own type: the value of the zero padding
  int64_t out_type;  // cuvil_uk_qout
};

// Bytes that cuvil_uk_pack_qconv_weights writes for `m` output channels of `k` = C * KH * KW
// weights each; -1 on overflow.
int64_t cuvil_uk_qconv_weights_size(int64_t m, int64_t k);

// Packs ONNX's [M, C, KH, KW] int8 weights (row m at w + m * k) for cuvil_uk_qconv2d: panels of
// CUVIL_UK_QMR output channels, each stored [ceil(k / 4)][QMR][4] (four consecutive k per 32-bit
// lane), zero padded in k and m; one layout for every CPU tier. With non-null `sums`, also writes
// sums[m] = the sum of row m's weights. Reentrant.
void cuvil_uk_pack_qconv_weights(const int8_t* w, int64_t m, int64_t k, int8_t* packed,
                                 int32_t* sums);

// For `batch` images: acc[m][q] = sum_r w[m][r] * x'[r][q] in int32, where x' is x (int8 inputs
// plus 128) with the zero padding reading x_zero (plus 128 for int8); then
// v = (acc - comp[m]) * mult[m] + bias[m] in float32 and y per p->out_type (a float32 output adds
// `residual`, y's shape, when non-null, before the clamp). The caller folds the zero points into
// comp (comp[m] = x_zero' * sum of row m's weights, x_zero' the padding value read) and the scales
// into mult and bias. w is packed by cuvil_uk_pack_qconv_weights. y must not overlap the inputs.
// Splits the work over the calling thread's intra-op threads. Reentrant.
void cuvil_uk_qconv2d(const cuvil_uk_qconv_params* p, const void* x, const int8_t* w,
                      const int32_t* comp, const float* mult, const float* bias,
                      const float* residual, void* y, int64_t batch, float lo, float hi);

// Quantized matrix product (QDQ MatMul/Gemm; compiler/src/fuse_qdq.cc): uint8 or int8 activation
// rows, int8 weights, int32 accumulation, then cuvil_uk_qconv2d's epilogue per output column.
// Shape and types; generated code stores it as a constant array of int64. Thread-compatible.
struct cuvil_uk_qmatmul_params {
  int64_t k;         // reduction length (x's row length)
  int64_t n;         // output columns (y's row length)
  int64_t x_signed;  // 1: x is int8 (read as x + 128 in uint8), 0: x is uint8
  int64_t out_type;  // cuvil_uk_qout
};

// Bytes that cuvil_uk_pack_qmatmul_weights writes for [k][n] weights; -1 on overflow.
int64_t cuvil_uk_qmatmul_weights_size(int64_t k, int64_t n);

// Packs int8 weights w[k][n] (row-major; with `transposed`, stored as [n][k]) for
// cuvil_uk_qmatmul: panels of CUVIL_UK_QMM_NR output columns, each [ceil(k / 4)][QMM_NR][4] (four
// consecutive k of one column per 32-bit lane), zero padded; one layout for every CPU tier. With
// non-null `sums`, also writes sums[j] = the sum of column j's weights. Reentrant.
void cuvil_uk_pack_qmatmul_weights(const int8_t* w, int64_t k, int64_t n, int64_t transposed,
                                   int8_t* packed, int32_t* sums);

// For r < rows and j < p->n: acc = sum_k x'[r][k] * w[k][j] in int32 (x' as in cuvil_uk_qconv2d),
// v = (acc - comp[j]) * mult[j] + bias[j] in float32, and y[r][j] per p->out_type (clamped to
// [lo, hi]; quantized outputs rounded half to even). x is [rows][k], y [rows][n], row-major; w is
// packed by cuvil_uk_pack_qmatmul_weights; y must not overlap the inputs. Splits the column
// panels over the calling thread's intra-op threads. Reentrant.
void cuvil_uk_qmatmul(const cuvil_uk_qmatmul_params* p, const void* x, const int8_t* w,
                      const int32_t* comp, const float* mult, const float* bias, void* y,
                      int64_t rows, float lo, float hi);

// 4-bit block-quantized matrix product (MatMulNBits, compiler/src/ops/shape_quant.cc) on weights
// packed by cuvil_uk_nbits_pack:
//   y[r][n] = bias[n] + sum_k a[r][k] * w[n][k]   for r < rows, n < n_dim,
// where w[n][k] = q * scale[n][b] + offset[n][b] for block b = k / block. The weights stay 4-bit
// in memory and are widened in registers, 16 output columns per vector. block is a positive
// multiple of 16; bias may be null; y ([rows][n_dim]) must not overlap the inputs. Splits the
// column groups over the calling thread's intra-op threads. Reentrant.
void cuvil_uk_matmul_nbits(const float* a, int64_t rows, int64_t k_dim, const uint8_t* q4_packed,
                           const float* scale_packed, const float* offset_packed, const float* bias,
                           int64_t n_dim, int64_t block, float* y);

// Output columns per packed group of cuvil_uk_nbits_pack.
inline constexpr int64_t CUVIL_UK_NBITS_GROUP = 16;

// Packs ONNX Runtime's MatMulNBits layout -- q4 [n_dim][blocks][block / 2] (nibble k % 2 of byte
// k / 2, the low one first), scale and offset [n_dim][blocks], blocks = ceil(k_dim / block) --
// into column groups: q4_packed [groups][blocks * block / 2][16] (byte j of a row holds the
// column's weights k and k + 1) and scale/offset_packed [groups][blocks][16], groups =
// ceil(n_dim / 16), columns past n_dim zero. Sizes: cuvil_uk_nbits_packed_bytes and
// groups * blocks * 16 floats. Reentrant.
void cuvil_uk_nbits_pack(const uint8_t* q4, const float* scale, const float* offset, int64_t k_dim,
                         int64_t n_dim, int64_t block, uint8_t* q4_packed, float* scale_packed,
                         float* offset_packed);

// Bytes of cuvil_uk_nbits_pack's q4_packed. Reentrant.
int64_t cuvil_uk_nbits_packed_bytes(int64_t k_dim, int64_t n_dim, int64_t block);

// The name of the 4-bit matrix-product body in use ("avx512", "avx2" or "generic").
const char* cuvil_uk_nbits_tier();

// Output channels per packed quantized weight panel.
inline constexpr int64_t CUVIL_UK_QMR = 8;
// Output columns per packed weight panel of cuvil_uk_qmatmul (one AVX-512 vector of int32).
inline constexpr int64_t CUVIL_UK_QMM_NR = 16;

// The name of the quantized GEMM body in use ("avx512_vnni", "avx2" or "generic").
const char* cuvil_uk_qtier();

// Rows of one register block (output channels per packed panel).
inline constexpr int64_t CUVIL_UK_MR = 6;

// The name of the body in use ("avx512", "avx2_fma" or "generic").
const char* cuvil_uk_tier();

}  // extern "C"

#endif  // CUVIL_RUNTIME_UKERNELS_H_
