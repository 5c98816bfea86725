// QDepthwisePlaneDirect, and cuvil_uk_qdepthwise2d on it for microcontroller libraries.
#include "qdepthwise_direct.h"

#include <cstddef>

#include "activate_scalar.h"
#include "call_scratch.h"
#include "quantize_rows.h"
#include "thread_buffer.h"

namespace cuvil::uk {

namespace {

// The padded input plane QDepthwisePlaneDirect reads: every row and column a tap of an output
// can touch.
struct PaddedPlane {
  int64_t rows, cols;
};
PaddedPlane PaddedOf(const cuvil_uk_conv_params& p) {
  return {(p.out_height - 1) * p.stride_h + (p.kernel_h - 1) * p.dilation_h + 1,
          (p.out_width - 1) * p.stride_w + (p.kernel_w - 1) * p.dilation_w + 1};
}

}  // namespace

int64_t QDepthwisePlaneDirectScratchFloats(const cuvil_uk_conv_params& p) {
  const PaddedPlane pp = PaddedOf(p);
  int64_t plane = 0;
  if (pp.rows <= 0 || pp.cols <= 0 || __builtin_mul_overflow(pp.rows, pp.cols, &plane)) return -1;
  return plane;
}

void QDepthwisePlaneDirect(const cuvil_uk_conv_params& p, const void* x, const float* wt,
                           float bias, void* y, const QuantizedPlane& q, const Epilogue& ep,
                           float* scratch, bool padded) {
  // ptrdiff_t: 32-bit on a microcontroller, where 64-bit index arithmetic costs register pairs.
  using Index = std::ptrdiff_t;
  const PaddedPlane pp = PaddedOf(p);
  const Index h = static_cast<Index>(p.height), w = static_cast<Index>(p.width);
  const Index oh = static_cast<Index>(p.out_height), ow = static_cast<Index>(p.out_width);
  const Index kh = static_cast<Index>(p.kernel_h), kw = static_cast<Index>(p.kernel_w);
  const Index sh = static_cast<Index>(p.stride_h), sw = static_cast<Index>(p.stride_w);
  const Index dh = static_cast<Index>(p.dilation_h), dw = static_cast<Index>(p.dilation_w);
  const Index pt = static_cast<Index>(p.pad_top), pl = static_cast<Index>(p.pad_left);
  const Index hp = static_cast<Index>(pp.rows), wp = static_cast<Index>(pp.cols);
  float* in = scratch;
  // The dequantised input with zeros where taps read padding (a padding tap then adds
  // wt * 0 = 0, as in the generic tier's padded copy).
  const Index c0 = pl < wp ? pl : wp;  // columns [c0, c1) hold input columns [0, c1 - pl)
  const Index c1 = pl + w < wp ? pl + w : wp;
  for (Index r = 0; r < hp; ++r) {
    float* dst = in + r * wp;
    const Index iy = r - pt;
    if (iy < 0 || iy >= h || c1 <= c0) {
      if (!padded) {
        for (Index j = 0; j < wp; ++j) dst[j] = 0.0f;
      }
      continue;
    }
    if (!padded) {
      for (Index j = 0; j < c0; ++j) dst[j] = 0.0f;
      for (Index j = c1; j < wp; ++j) dst[j] = 0.0f;
    }
    DequantizeRow(static_cast<const uint8_t*>(x) + iy * w, q.x_signed, c1 - c0, q.x_scale, q.x_zero,
                  dst + c0);
  }
  // Each output as it is computed: the activation, then quantize_row's arithmetic (QuantizeOne)
  // for that element. The branches are loop-invariant.
  const bool relu = ep.activation == CUVIL_UK_ACT_RELU, none = ep.activation == CUVIL_UK_ACT_NONE;
  const float ylo =
      q.y_signed ? -128.0f - static_cast<float>(q.y_zero) : -static_cast<float>(q.y_zero);
  const float yhi =
      q.y_signed ? 127.0f - static_cast<float>(q.y_zero) : 255.0f - static_cast<float>(q.y_zero);
  auto out = [&](Index oy, Index ox, float v) {
    if (relu) {
      v = v > 0.0f ? v : 0.0f;
    } else if (!none) {
      v = Activate(v, ep);
    }
    if (q.y_signed) {
      static_cast<int8_t*>(y)[oy * ow + ox] = QuantizeOne<int8_t>(v, q.y_scale, q.y_zero, ylo, yhi);
    } else {
      static_cast<uint8_t*>(y)[oy * ow + ox] =
          QuantizeOne<uint8_t>(v, q.y_scale, q.y_zero, ylo, yhi);
    }
  };
  for (Index oy = 0; oy < oh; ++oy) {
    const float* top = in + oy * sh * wp;
    if (kh == 3 && kw == 3 && sw == 1 && dw == 1) {
      // 3x3, unit column stride: each output loads one new column of three values and keeps
      // the two before it in registers. Taps added in the same (row-major) order.
      const float* r0 = top;
      const float* r1 = r0 + dh * wp;
      const float* r2 = r1 + dh * wp;
      const float w0 = wt[0], w1 = wt[1], w2 = wt[2], w3 = wt[3], w4 = wt[4], w5 = wt[5],
                  w6 = wt[6], w7 = wt[7], w8 = wt[8];
      float a0 = r0[0], a1 = r0[1], b0 = r1[0], b1 = r1[1], e0 = r2[0], e1 = r2[1];
      for (Index ox = 0; ox < ow; ++ox) {
        const float a2 = r0[ox + 2], b2 = r1[ox + 2], e2 = r2[ox + 2];
        float v = bias;
        v += w0 * a0;
        v += w1 * a1;
        v += w2 * a2;
        v += w3 * b0;
        v += w4 * b1;
        v += w5 * b2;
        v += w6 * e0;
        v += w7 * e1;
        v += w8 * e2;
        out(oy, ox, v);
        a0 = a1, a1 = a2, b0 = b1, b1 = b2, e0 = e1, e1 = e2;
      }
    } else {
      for (Index ox = 0; ox < ow; ++ox) {
        const float* at = top + ox * sw;
        float v = bias;
        for (Index ky = 0; ky < kh; ++ky) {
          for (Index kx = 0; kx < kw; ++kx) v += wt[ky * kw + kx] * at[ky * dh * wp + kx * dw];
        }
        out(oy, ox, v);
      }
    }
  }
}

int64_t QDepthwise2dDirectScratchBytes(const cuvil_uk_conv_params& p) {
  ScratchTally s;
  s.AddFloats(QDepthwisePlaneDirectScratchFloats(p));
  return s.bytes();
}

}  // namespace cuvil::uk

#if defined(CUVIL_AOT_BARE_METAL)
// The microcontroller build's entry point (conv.cc's is compiled out there): planes one after
// another on the calling thread.
extern "C" void cuvil_uk_qdepthwise2d(const cuvil_uk_conv_params* p, const void* x,
                                      int32_t x_signed, float x_scale, int32_t x_zero,
                                      const float* w, const float* bias, void* y, int32_t y_signed,
                                      float y_scale, int32_t y_zero, int64_t batch, float alpha,
                                      float beta) {
  using namespace cuvil::uk;
  // A plane too large to size (-1) never passes the arena sizing that precedes every call.
  const int64_t floats = QDepthwisePlaneDirectScratchFloats(*p);
  if (batch <= 0 || p->out_height <= 0 || p->out_width <= 0 || floats < 0) return;
  MicrokernelScratchScope scope;
  thread_local ThreadBuffer buffer;
  float* scratch = buffer.Get(static_cast<size_t>(floats));
  const QuantizedPlane q{x_signed != 0, x_scale, x_zero, y_signed != 0, y_scale, y_zero};
  const Epilogue ep{nullptr, nullptr, p->activation, alpha, beta};
  const std::ptrdiff_t taps = static_cast<std::ptrdiff_t>(p->kernel_h * p->kernel_w);
  const std::ptrdiff_t in_plane = static_cast<std::ptrdiff_t>(p->height * p->width);
  const std::ptrdiff_t out_plane = static_cast<std::ptrdiff_t>(p->out_height * p->out_width);
  const std::ptrdiff_t channels = static_cast<std::ptrdiff_t>(p->channels);
  for (std::ptrdiff_t i = 0; i < static_cast<std::ptrdiff_t>(batch) * channels; ++i) {
    const std::ptrdiff_t c = i % channels;
    // The padding is written with the first plane and kept: later planes overwrite only the
    // input's rows and columns.
    QDepthwisePlaneDirect(*p, static_cast<const uint8_t*>(x) + i * in_plane, w + c * taps,
                          bias != nullptr ? bias[c] : 0.0f,
                          static_cast<uint8_t*>(y) + i * out_plane, q, ep, scratch, i > 0);
  }
}
#endif  // CUVIL_AOT_BARE_METAL
