// AVX2+FMA 3x3 depthwise plane kernel (this file alone, with kernels_avx2.cc, is compiled with
// -mavx2 -mfma; nothing here may be an inline or template entity shared with non-AVX2 files).
//
// The plane is copied once into zero-padded planes (stride 2: the four stride phases, so that every
// tap reads contiguous columns). An output strip of R rows and V vectors of 8 columns keeps its
// R * V accumulators and the nine weights in registers (at most 16 ymm), and its loads of one
// padded row serve all the strip's rows that read it. The last strip of a plane (and the last
// column block of a row) overlaps the one before instead of running a tail: both compute the same
// values from the same inputs, and y overlaps neither x nor the residual.
#include "depthwise_avx2.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "activate_avx2.h"
#include "thread_buffer.h"

namespace cuvil::uk {
namespace {

constexpr int64_t kLanes = 8;
// Scratch floats above which the kernel declines (the tier's general plane kernel takes it).
constexpr int64_t kMaxScratch = int64_t{1} << 22;

__m256i LaneMask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const int lanes = static_cast<int>(std::clamp<int64_t>(n, 0, kLanes));
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), idx);
}

// The padded planes of one geometry: `phases` planes of hs rows, ld floats apart; row i column j
// of phase (py, px) holds the zero-padded input at (i * S + py, j * S + px).
struct Layout {
  int64_t stride, hs, ws, ld, plane;
  int64_t Floats() const { return stride * stride * plane; }
};

// Per-thread padded planes. They are zeroed whenever the geometry or the block changes; a plane's
// copy then writes the same (data) positions every time, so the padding stays zero.
// Thread-compatible (one instance per thread).
class PlaneScratch {
 public:
  float* Get(const cuvil_uk_conv_params& p, const Layout& l) {
    const int64_t key[kKey] = {p.height,   p.width,   p.out_height, p.out_width,
                               p.stride_h, p.pad_top, p.pad_left,   l.ld};
    const size_t floats = static_cast<size_t>(l.Floats());
    bool fresh = false;
    float* data = buffer_.Get(floats, &fresh);
    if (fresh || !std::equal(key, key + kKey, key_)) {
      std::memset(data, 0, floats * sizeof(float));
      std::copy(key, key + kKey, key_);
    }
    return data;
  }

 private:
  static constexpr int kKey = 8;
  ThreadBuffer buffer_;
  int64_t key_[kKey] = {};
};

void FillStride1(const cuvil_uk_conv_params& p, const Layout& l, const float* x, float* buf) {
  const int64_t n = std::min(p.width, l.ws - p.pad_left);  // input columns inside the plane
  if (n <= 0) return;
  for (int64_t iy = 0; iy < p.height && iy + p.pad_top < l.hs; ++iy) {
    std::memcpy(buf + (iy + p.pad_top) * l.ld + p.pad_left, x + iy * p.width,
                static_cast<size_t>(n) * sizeof(float));
  }
}

// Even input columns 2t land in phase column pl & 1 at t + (pl >> 1), odd ones 2t + 1 in phase
// column (pl + 1) & 1 at t + ((pl + 1) >> 1); rows likewise.
void FillStride2(const cuvil_uk_conv_params& p, const Layout& l, const float* x, float* buf) {
  const int64_t pe = p.pad_left & 1, je = p.pad_left >> 1;
  const int64_t po = (p.pad_left + 1) & 1, jo = (p.pad_left + 1) >> 1;
  const int64_t ne = std::max<int64_t>(0, std::min((p.width + 1) / 2, l.ws - je));
  const int64_t no = std::max<int64_t>(0, std::min(p.width / 2, l.ws - jo));
  const int64_t nv = std::min(ne, no);
  for (int64_t iy = 0; iy < p.height; ++iy) {
    const int64_t r = iy + p.pad_top, py = r & 1, i = r >> 1;
    if (i >= l.hs) break;
    const float* src = x + iy * p.width;
    float* ev = buf + (py * 2 + pe) * l.plane + i * l.ld + je;
    float* od = buf + (py * 2 + po) * l.plane + i * l.ld + jo;
    int64_t t = 0;
    for (; t + kLanes <= nv && 2 * t + 2 * kLanes <= p.width; t += kLanes) {
      const __m256 lo = _mm256_loadu_ps(src + 2 * t), hi = _mm256_loadu_ps(src + 2 * t + kLanes);
      // In-lane shuffles leave the 64-bit pairs in the order 0 2 1 3; the permute restores it.
      const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
      const __m256 o = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
      _mm256_storeu_ps(ev + t, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e),
                                                                      _MM_SHUFFLE(3, 1, 2, 0))));
      _mm256_storeu_ps(od + t, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o),
                                                                      _MM_SHUFFLE(3, 1, 2, 0))));
    }
    for (int64_t u = t; u < ne; ++u) ev[u] = src[2 * u];
    for (int64_t u = t; u < no; ++u) od[u] = src[2 * u + 1];
  }
}

// What every strip of one plane shares.
struct PlaneArgs {
  const float* buf;
  Layout l;
  __m256 w[9];
  __m256 bias;
  const float* residual;
  float* y;
  int64_t oh, ow;
  bool narrow;  // ow < V * 8: one masked column block
  __m256i mask[2];
  __m256 lo, hi;  // the clamp of Act::kClamp
  const Epilogue* ep;
};

// acc[r][v] += w * in for the strip rows r that read `in` at tap row ky (stride 1: input row
// q = r + ky; stride 2: phase row q = r + ky / 2 of phase ky % 2).
template <int S, int R, int V>
[[gnu::always_inline]] inline void Accumulate(__m256 (&acc)[R][V], int v, int q, int py, int kx,
                                              __m256 in, const __m256 (&w)[9]) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    const int ky = S == 1 ? q - r : 2 * (q - r) + py;
    if (ky >= 0 && ky <= 2 && (S == 1 || ky % 2 == py)) {
      acc[r][v] = _mm256_fmadd_ps(w[ky * 3 + kx], in, acc[r][v]);
    }
  }
}

// Activations the strips apply inline: none, a clamp to [lo, hi] (Relu, Clip), or any other.
enum class Act { kNone, kClamp, kOther };

// Output rows [oy0, oy0 + R), columns [ox0, ox0 + 8 V). Input rows outer: each loaded vector
// serves every strip row that reads it, and only one is live at a time (R * V accumulators, nine
// weights and one input vector fit the 16 ymm registers).
template <int S, int R, int V, Act A>
[[gnu::always_inline]] inline void Strip(const PlaneArgs& a, const __m256 (&w)[9], int64_t oy0,
                                         int64_t ox0) {
  __m256 acc[R][V];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) acc[r][v] = a.bias;
  }
  const int64_t ld = a.l.ld;
  const float* base = a.buf + oy0 * ld + ox0;
  if constexpr (S == 1) {
#pragma GCC unroll 10
    for (int q = 0; q < R + 2; ++q) {
#pragma GCC unroll 3
      for (int kx = 0; kx < 3; ++kx) {
#pragma GCC unroll 2
        for (int v = 0; v < V; ++v) {
          const __m256 in = _mm256_loadu_ps(base + q * ld + kx + v * kLanes);
          Accumulate<S, R, V>(acc, v, q, 0, kx, in, w);
        }
      }
    }
  } else {
#pragma GCC unroll 2
    for (int py = 0; py < 2; ++py) {
#pragma GCC unroll 9
      for (int q = 0; q < R + 1 - py; ++q) {
#pragma GCC unroll 3
        for (int kx = 0; kx < 3; ++kx) {
          const float* at = base + (py * 2 + (kx & 1)) * a.l.plane + q * ld + (kx >> 1);
#pragma GCC unroll 2
          for (int v = 0; v < V; ++v) {
            Accumulate<S, R, V>(acc, v, q, py, kx, _mm256_loadu_ps(at + v * kLanes), w);
          }
        }
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 2
    for (int v = 0; v < V; ++v) {
      const int64_t o = (oy0 + r) * a.ow + ox0 + v * kLanes;
      __m256 out = acc[r][v];
      const bool full = !a.narrow;
      if (!full && v * kLanes >= a.ow) continue;
      if (a.residual != nullptr) {
        out = _mm256_add_ps(out, full ? _mm256_loadu_ps(a.residual + o)
                                      : _mm256_maskload_ps(a.residual + o, a.mask[v]));
      }
      if constexpr (A == Act::kClamp) {
        out = _mm256_min_ps(_mm256_max_ps(out, a.lo), a.hi);
      } else if constexpr (A == Act::kOther) {
        out = ActivateAvx2(out, *a.ep);
      }
      if (full) {
        _mm256_storeu_ps(a.y + o, out);
      } else {
        _mm256_maskstore_ps(a.y + o, a.mask[v], out);
      }
    }
  }
}

// Every strip of the plane (requires oh >= R): rows outer, so that a strip's input rows stay in
// L1 across its column blocks.
template <int S, int R, int V, Act A>
void Strips(const PlaneArgs& a) {
  constexpr int64_t kWidth = V * kLanes;
  __m256 w[9];
#pragma GCC unroll 9
  for (int t = 0; t < 9; ++t) w[t] = a.w[t];
  for (int64_t oy = 0;; oy += R) {
    const int64_t oy0 = std::min<int64_t>(oy, a.oh - R);
    if (a.narrow) {
      Strip<S, R, V, A>(a, w, oy0, 0);
    } else {
      for (int64_t ox = 0;; ox += kWidth) {
        const int64_t ox0 = std::min(ox, a.ow - kWidth);
        Strip<S, R, V, A>(a, w, oy0, ox0);
        if (ox0 + kWidth >= a.ow) break;
      }
    }
    if (oy0 + R >= a.oh) break;
  }
}

// Wide planes: 3 rows x 16 columns (6 accumulators); planes of at most 8 columns: up to 7 rows x
// 8 columns, so that a 7x7 plane is one strip.
template <int S, Act A>
void Plane(const PlaneArgs& a) {
  if (a.ow > kLanes) {
    switch (std::min<int64_t>(a.oh, 3)) {
      case 1:
        return Strips<S, 1, 2, A>(a);
      case 2:
        return Strips<S, 2, 2, A>(a);
      default:
        return Strips<S, 3, 2, A>(a);
    }
  }
  switch (std::min<int64_t>(a.oh, 7)) {
    case 1:
      return Strips<S, 1, 1, A>(a);
    case 2:
      return Strips<S, 2, 1, A>(a);
    case 3:
      return Strips<S, 3, 1, A>(a);
    case 4:
      return Strips<S, 4, 1, A>(a);
    case 5:
      return Strips<S, 5, 1, A>(a);
    case 6:
      return Strips<S, 6, 1, A>(a);
    default:
      return Strips<S, 7, 1, A>(a);
  }
}

// The padded planes' layout for plane p; false when the kernel does not take p.
bool PlanLayout(const cuvil_uk_conv_params& p, Layout* out) {
  const int64_t s = p.stride_h;
  if (p.kernel_h != 3 || p.kernel_w != 3 || p.dilation_h != 1 || p.dilation_w != 1 ||
      p.stride_w != s || (s != 1 && s != 2) || p.pad_top < 0 || p.pad_top > 2 || p.pad_left < 0 ||
      p.pad_left > 2 || p.height < 1 || p.width < 1 || p.out_height < 1 || p.out_width < 1 ||
      p.out_height > kMaxScratch || p.out_width > kMaxScratch) {
    return false;
  }
  const int64_t vectors = p.out_width > kLanes ? 2 : 1;
  Layout l;
  l.stride = s;
  l.hs = ((p.out_height - 1) * s + 3 + s - 1) / s;
  l.ws = ((p.out_width - 1) * s + 3 + s - 1) / s;
  // Narrow planes read one whole block of columns (and the two after it).
  l.ld = (std::max(l.ws, vectors * kLanes + 2) + kLanes - 1) / kLanes * kLanes;
  if (l.hs > kMaxScratch / l.ld) return false;
  l.plane = l.hs * l.ld;
  if (l.Floats() > kMaxScratch) return false;
  *out = l;
  return true;
}

}  // namespace

int64_t Depthwise3x3Avx2ScratchFloats(const cuvil_uk_conv_params& p) {
  Layout l;
  return PlanLayout(p, &l) ? l.Floats() : 0;
}

bool Depthwise3x3Avx2(const cuvil_uk_conv_params& p, const float* x, const float* wt, float bias,
                      const float* residual, float* y, const Epilogue& ep) {
  Layout l;
  if (!PlanLayout(p, &l)) return false;
  const int64_t s = l.stride;
  const int64_t vectors = p.out_width > kLanes ? 2 : 1;

  thread_local PlaneScratch scratch;
  float* buf = scratch.Get(p, l);
  if (s == 1) {
    FillStride1(p, l, x, buf);
  } else {
    FillStride2(p, l, x, buf);
  }
  PlaneArgs a;
  a.buf = buf;
  a.l = l;
  for (int t = 0; t < 9; ++t) a.w[t] = _mm256_broadcast_ss(wt + t);
  a.bias = _mm256_set1_ps(bias);
  a.residual = residual;
  a.y = y;
  a.oh = p.out_height;
  a.ow = p.out_width;
  a.narrow = p.out_width < vectors * kLanes;
  a.mask[0] = LaneMask(p.out_width);
  a.mask[1] = LaneMask(p.out_width - kLanes);
  a.ep = &ep;
  Act act = Act::kOther;
  if (ep.activation == CUVIL_UK_ACT_NONE) {
    act = Act::kNone;
  } else if (ep.activation == CUVIL_UK_ACT_RELU) {
    act = Act::kClamp;
    a.lo = _mm256_setzero_ps();
    a.hi = _mm256_set1_ps(std::numeric_limits<float>::infinity());
  } else if (ep.activation == CUVIL_UK_ACT_CLIP) {
    act = Act::kClamp;
    a.lo = _mm256_set1_ps(ep.alpha);
    a.hi = _mm256_set1_ps(ep.beta);
  }
  if (s == 1) {
    act == Act::kNone    ? Plane<1, Act::kNone>(a)
    : act == Act::kClamp ? Plane<1, Act::kClamp>(a)
                         : Plane<1, Act::kOther>(a);
  } else {
    act == Act::kNone    ? Plane<2, Act::kNone>(a)
    : act == Act::kClamp ? Plane<2, Act::kClamp>(a)
                         : Plane<2, Act::kOther>(a);
  }
  return true;
}

}  // namespace cuvil::uk
