// AVX2+FMA bodies of the microkernels (this file alone is compiled with -mavx2 -mfma; nothing here
// may be an inline or template entity shared with non-AVX2 files, or the linker could pick an AVX2
// copy for generic code).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "activate_avx2.h"
#include "cuvil/runtime/ukernels.h"
#include "depthwise_avx2.h"
#include "quantize_rows.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

// Tile width: 6 x 2 accumulators + 2 B vectors + 1 broadcast = 15 of 16 ymm.
constexpr int64_t kNR = 16;

// Lane masks for the first n of 8 lanes (n clamped to [0, 8]).
__m256i LaneMask(int64_t n) {
  const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), idx);
}

// Adds bias/residual/activation to 16 values of row r and stores them (masked when partial).
inline void FinishRow(__m256 v0, __m256 v1, float* c, int64_t r, int64_t ldc, bool full, __m256i m0,
                      __m256i m1, bool accumulate, const Epilogue* ep) {
  float* row = c + r * ldc;
  if (full) {
    if (accumulate) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(row));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(row + 8));
    }
  } else if (accumulate) {
    v0 = _mm256_add_ps(v0, _mm256_maskload_ps(row, m0));
    v1 = _mm256_add_ps(v1, _mm256_maskload_ps(row + 8, m1));
  }
  if (ep != nullptr) {
    if (ep->bias != nullptr) {
      __m256 b = _mm256_broadcast_ss(ep->bias + r);
      v0 = _mm256_add_ps(v0, b);
      v1 = _mm256_add_ps(v1, b);
    }
    if (ep->residual != nullptr) {
      const float* res = ep->residual + r * ldc;
      if (full) {
        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(res));
        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(res + 8));
      } else {
        v0 = _mm256_add_ps(v0, _mm256_maskload_ps(res, m0));
        v1 = _mm256_add_ps(v1, _mm256_maskload_ps(res + 8, m1));
      }
    }
    v0 = ActivateAvx2(v0, *ep);
    v1 = ActivateAvx2(v1, *ep);
  }
  if (full) {
    _mm256_storeu_ps(row, v0);
    _mm256_storeu_ps(row + 8, v1);
  } else {
    _mm256_maskstore_ps(row, m0, v0);
    _mm256_maskstore_ps(row + 8, m1, v1);
  }
}

// The common case of a direct 1x1 conv (a whole tile, bias, Relu/Clip/none, maybe a residual,
// nothing accumulated): one branch-free pass over the six rows, the activation chosen at compile
// time. Small-K tiles spend as long here as in their FMA loop, so the per-row branches showed.
template <int64_t kAct, bool kResidual>
void StoreFullTile(const __m256 (&rows)[kMR][2], float* c, int64_t ldc, const Epilogue& ep) {
  const __m256 lo = _mm256_set1_ps(ep.alpha), hi = _mm256_set1_ps(ep.beta);
#pragma GCC unroll 6
  for (int r = 0; r < kMR; ++r) {
    const __m256 b = _mm256_broadcast_ss(ep.bias + r);
    __m256 v0 = _mm256_add_ps(rows[r][0], b), v1 = _mm256_add_ps(rows[r][1], b);
    if constexpr (kResidual) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(ep.residual + r * ldc));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(ep.residual + r * ldc + 8));
    }
    if constexpr (kAct == CUVIL_UK_ACT_RELU) {
      v0 = _mm256_max_ps(v0, _mm256_setzero_ps());
      v1 = _mm256_max_ps(v1, _mm256_setzero_ps());
    } else if constexpr (kAct == CUVIL_UK_ACT_CLIP) {
      v0 = _mm256_min_ps(_mm256_max_ps(v0, lo), hi);
      v1 = _mm256_min_ps(_mm256_max_ps(v1, lo), hi);
    }
    _mm256_storeu_ps(c + r * ldc, v0);
    _mm256_storeu_ps(c + r * ldc + 8, v1);
  }
}

// Large weight panels stream from L3/DRAM (layer4 of resnet18 reads 9 MB per conv): the tile
// fetches them 64 k steps (1.5 KB) ahead, every other step (a 64-byte line holds 2.7 steps).
inline void PrefetchA(const float* a) {
  _mm_prefetch(reinterpret_cast<const char*>(a + 64 * kMR), _MM_HINT_T0);
}

// 6x16 tile: 12 accumulators, two B vectors and one broadcast live in registers (15 of 16 ymm).
void GemmTile(int64_t kc, const float* a, const float* b, const int64_t* off, float* c, int64_t ldc,
              int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  const bool full = nr == kNR;
  const __m256i m0 = LaneMask(nr), m1 = LaneMask(nr - 8);
#define CUVIL_UK_STEP(LOAD0, LOAD1)     \
  for (int64_t k = 0; k < kc; ++k) {    \
    const float* bk = b + off[k];       \
    __m256 b0 = LOAD0, b1 = LOAD1;      \
    if (k % 2 == 0) PrefetchA(a);       \
    __m256 av = _mm256_broadcast_ss(a); \
    c00 = _mm256_fmadd_ps(av, b0, c00); \
    c01 = _mm256_fmadd_ps(av, b1, c01); \
    av = _mm256_broadcast_ss(a + 1);    \
    c10 = _mm256_fmadd_ps(av, b0, c10); \
    c11 = _mm256_fmadd_ps(av, b1, c11); \
    av = _mm256_broadcast_ss(a + 2);    \
    c20 = _mm256_fmadd_ps(av, b0, c20); \
    c21 = _mm256_fmadd_ps(av, b1, c21); \
    av = _mm256_broadcast_ss(a + 3);    \
    c30 = _mm256_fmadd_ps(av, b0, c30); \
    c31 = _mm256_fmadd_ps(av, b1, c31); \
    av = _mm256_broadcast_ss(a + 4);    \
    c40 = _mm256_fmadd_ps(av, b0, c40); \
    c41 = _mm256_fmadd_ps(av, b1, c41); \
    av = _mm256_broadcast_ss(a + 5);    \
    c50 = _mm256_fmadd_ps(av, b0, c50); \
    c51 = _mm256_fmadd_ps(av, b1, c51); \
    a += kMR;                           \
  }
  if (full) {
    CUVIL_UK_STEP(_mm256_loadu_ps(bk), _mm256_loadu_ps(bk + 8))
  } else {
    CUVIL_UK_STEP(_mm256_maskload_ps(bk, m0), _mm256_maskload_ps(bk + 8, m1))
  }
#undef CUVIL_UK_STEP
  const __m256 rows[kMR][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                               {c30, c31}, {c40, c41}, {c50, c51}};
  if (full && mr == kMR && !accumulate && ep != nullptr && ep->bias != nullptr) {
    const bool res = ep->residual != nullptr;
    switch (ep->activation) {
      case CUVIL_UK_ACT_NONE:
        return res ? StoreFullTile<CUVIL_UK_ACT_NONE, true>(rows, c, ldc, *ep)
                   : StoreFullTile<CUVIL_UK_ACT_NONE, false>(rows, c, ldc, *ep);
      case CUVIL_UK_ACT_RELU:
        return res ? StoreFullTile<CUVIL_UK_ACT_RELU, true>(rows, c, ldc, *ep)
                   : StoreFullTile<CUVIL_UK_ACT_RELU, false>(rows, c, ldc, *ep);
      case CUVIL_UK_ACT_CLIP:
        return res ? StoreFullTile<CUVIL_UK_ACT_CLIP, true>(rows, c, ldc, *ep)
                   : StoreFullTile<CUVIL_UK_ACT_CLIP, false>(rows, c, ldc, *ep);
      default:
        break;
    }
  }
  for (int64_t r = 0; r < mr; ++r) {
    FinishRow(rows[r][0], rows[r][1], c, r, ldc, full, m0, m1, accumulate, ep);
  }
}

void EpilogueRow(float* dst, const float* src, int64_t n, float bias, const float* residual,
                 const Epilogue& ep) {
  const __m256 b = _mm256_set1_ps(bias);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_add_ps(_mm256_loadu_ps(src + i), b);
    if (residual != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + i));
    _mm256_storeu_ps(dst + i, ActivateAvx2(v, ep));
  }
  if (i < n) {
    __m256i m = LaneMask(n - i);
    __m256 v = _mm256_add_ps(_mm256_maskload_ps(src + i, m), b);
    if (residual != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(residual + i, m));
    _mm256_maskstore_ps(dst + i, m, ActivateAvx2(v, ep));
  }
}

void DepthwiseRow(float* dst, const float* src, const int64_t* off, const float* wt, int64_t taps,
                  int64_t n, float bias, const float* residual, const Epilogue& ep) {
  const __m256 b = _mm256_set1_ps(bias);
  int64_t i = 0;
  // Two vectors per step hide the FMA latency of the tap chain.
  for (; i + 16 <= n; i += 16) {
    __m256 v0 = b, v1 = b;
    for (int64_t t = 0; t < taps; ++t) {
      const __m256 w = _mm256_broadcast_ss(wt + t);
      const float* s = src + off[t] + i;
      v0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s), v0);
      v1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(s + 8), v1);
    }
    if (residual != nullptr) {
      v0 = _mm256_add_ps(v0, _mm256_loadu_ps(residual + i));
      v1 = _mm256_add_ps(v1, _mm256_loadu_ps(residual + i + 8));
    }
    _mm256_storeu_ps(dst + i, ActivateAvx2(v0, ep));
    _mm256_storeu_ps(dst + i + 8, ActivateAvx2(v1, ep));
  }
  for (; i < n; i += 8) {
    __m256i m = LaneMask(n - i);
    __m256 v = b;
    for (int64_t t = 0; t < taps; ++t) {
      v = _mm256_fmadd_ps(_mm256_broadcast_ss(wt + t), _mm256_maskload_ps(src + off[t] + i, m), v);
    }
    if (residual != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(residual + i, m));
    _mm256_maskstore_ps(dst + i, m, ActivateAvx2(v, ep));
  }
}

// Depthwise straight from the unpadded input. The output is cut into items of 8 columns of one
// row; kDwRows rows of one column block run in lockstep (independent FMA chains) and share the
// column masks. Column blocks whose taps all lie inside the input row (the interior of a wide
// plane) load without masks; the edge blocks mask every tap load to the row. A row above or below
// the input reads a static zero row instead, so the zero padding is never materialised.
constexpr int kDwRows = 8;
constexpr int64_t kLanes = 8;
constexpr int64_t kDwMaxKernelW = 16;
constexpr int64_t kZeroRow = 4096;
constexpr int64_t kDwMaxTableRows = 2048;
alignas(32) const float kZeros[kZeroRow] = {};

// Lanes l of `width` (8 lanes from `first`) with 0 <= first + l < width.
__m256i ColumnMask(int64_t first, int64_t width) {
  const __m256i idx =
      _mm256_add_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                       _mm256_set1_epi32(static_cast<int>(std::clamp<int64_t>(first, -16, width))));
  const __m256i lo = _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1));
  const __m256i hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(width)), idx);
  return _mm256_and_si256(lo, hi);
}

// Input columns at[SW * l] for the 8 output lanes l. Stride 2 leaves the lanes in the order
// 0 1 4 5 2 3 6 7 (one in-lane shuffle per tap); Unshuffle puts them back once per item.
template <int SW, bool kMasked>
__m256 LoadColumns(const float* at, __m256i m0, __m256i m1) {
  if constexpr (SW == 1) {
    return kMasked ? _mm256_maskload_ps(at, m0) : _mm256_loadu_ps(at);
  } else {
    const __m256 lo = kMasked ? _mm256_maskload_ps(at, m0) : _mm256_loadu_ps(at);
    const __m256 hi = kMasked ? _mm256_maskload_ps(at + kLanes, m1) : _mm256_loadu_ps(at + kLanes);
    return _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
  }
}

template <int SW>
__m256 Unshuffle(__m256 v) {
  if constexpr (SW == 1) {
    return v;
  } else {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
  }
}

// Output rows [oy0, oy0 + count) (count <= kDwRows) of the column block starting at ox0; m0/m1
// are the per-tap masks of the block's first and second 8 input columns. rows[i] is padded input
// row i (input row i - pad_top, or the zero row).
template <int SW, bool kMasked>
void DepthwiseItems(const cuvil_uk_conv_params& p, const float* const* rows, const float* wt,
                    float bias, const float* residual, float* y, const Epilogue& ep, int64_t oy0,
                    int64_t count, int64_t ox0, const __m256i* m0, const __m256i* m1) {
  __m256 acc[kDwRows];
#pragma GCC unroll 8
  for (int n = 0; n < kDwRows; ++n) acc[n] = _mm256_set1_ps(bias);
  // Offsets are relative to the row's column 0; the masks keep lanes before it unread.
  const int64_t ix0 = ox0 * SW - p.pad_left;
  for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
    // Rows past `count` read whatever the table holds there; their sums are never stored.
    const float* const* at_ky = rows + oy0 * p.stride_h + ky * p.dilation_h;
    const float* row[kDwRows];
#pragma GCC unroll 8
    for (int n = 0; n < kDwRows; ++n) row[n] = at_ky[n * p.stride_h];
    const float* wk = wt + ky * p.kernel_w;
    for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
      const __m256 w = _mm256_broadcast_ss(wk + kx);
      // Unmasked blocks get no masks (m0/m1 are not filled for them).
      const __m256i mk0 = kMasked ? m0[kx] : _mm256_setzero_si256();
      const __m256i mk1 = kMasked ? m1[kx] : _mm256_setzero_si256();
      const int64_t at = (ix0 + kx * p.dilation_w) * int64_t{sizeof(float)};
#pragma GCC unroll 8
      for (int n = 0; n < kDwRows; ++n) {
        // The address may lie before the row; the masks keep every lane read inside it.
        const float* src = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(row[n]) + at);
        acc[n] = _mm256_fmadd_ps(w, LoadColumns<SW, kMasked>(src, mk0, mk1), acc[n]);
      }
    }
  }
  const bool full = ox0 + kLanes <= p.out_width;
  const __m256i store = LaneMask(p.out_width - ox0);
#pragma GCC unroll 8
  for (int n = 0; n < kDwRows; ++n) {
    if (n >= count) break;
    const int64_t at = (oy0 + n) * p.out_width + ox0;
    __m256 v = Unshuffle<SW>(acc[n]);
    if (full) {
      if (residual != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(residual + at));
      _mm256_storeu_ps(y + at, ActivateAvx2(v, ep));
    } else {
      if (residual != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(residual + at, store));
      _mm256_maskstore_ps(y + at, store, ActivateAvx2(v, ep));
    }
  }
}

// Row groups outer, column blocks inner: the input rows of one group stay in L1 across its blocks.
template <int SW>
void DepthwiseBlocks(const cuvil_uk_conv_params& p, const float* const* rows, const float* wt,
                     float bias, const float* residual, float* y, const Epilogue& ep) {
  __m256i m0[kDwMaxKernelW], m1[kDwMaxKernelW];
  const int64_t reach = (p.kernel_w - 1) * p.dilation_w + SW * kLanes;  // columns one block reads
  for (int64_t oy0 = 0; oy0 < p.out_height; oy0 += kDwRows) {
    const int64_t count = std::min<int64_t>(p.out_height - oy0, kDwRows);
    for (int64_t ox0 = 0; ox0 < p.out_width; ox0 += kLanes) {
      const int64_t ix = ox0 * SW - p.pad_left;
      // Interior: every tap's SW * 8 input columns lie inside the row, so no load is masked.
      if (ix >= 0 && ix + reach <= p.width) {
        DepthwiseItems<SW, false>(p, rows, wt, bias, residual, y, ep, oy0, count, ox0, m0, m1);
        continue;
      }
      for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
        m0[kx] = ColumnMask(ix + kx * p.dilation_w, p.width);
        m1[kx] = ColumnMask(ix + kx * p.dilation_w + kLanes, p.width);
      }
      DepthwiseItems<SW, true>(p, rows, wt, bias, residual, y, ep, oy0, count, ox0, m0, m1);
    }
  }
}

bool DepthwisePlane(const cuvil_uk_conv_params& p, const float* x, const float* wt, float bias,
                    const float* residual, float* y, const Epilogue& ep) {
  // 3x3 stride 1/2 with at least 16 output columns (MobileNet's 112..28-wide layers): the
  // register-blocked kernel on padded planes, 1.2-2x faster there. On narrower planes the plane
  // copy costs more than it saves (14x14 stride 2: 2x slower), so they stay below.
  if (p.out_width >= 16 && Depthwise3x3Avx2(p, x, wt, bias, residual, y, ep)) return true;
  // Padded rows the last row group reads, its unstored rows included.
  const int64_t table_rows =
      (p.out_height + kDwRows - 2) * p.stride_h + (p.kernel_h - 1) * p.dilation_h + 1;
  if ((p.stride_w != 1 && p.stride_w != 2) || p.kernel_w > kDwMaxKernelW || p.width > kZeroRow ||
      table_rows > kDwMaxTableRows) {
    return false;
  }
  // One pointer per padded row, so an item finds its rows with one load each (computing them per
  // item and tap row cost more than the FMAs on wide planes).
  const float* rows[kDwMaxTableRows];
  for (int64_t i = 0; i < table_rows; ++i) {
    const int64_t iy = i - p.pad_top;
    rows[i] = iy >= 0 && iy < p.height ? x + iy * p.width : kZeros;
  }
  if (p.stride_w == 1) {
    DepthwiseBlocks<1>(p, rows, wt, bias, residual, y, ep);
  } else {
    DepthwiseBlocks<2>(p, rows, wt, bias, residual, y, ep);
  }
  return true;
}

void MaxRow(float* dst, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const __m256 va = _mm256_loadu_ps(a + i), vb = _mm256_loadu_ps(b + i);
    // b where b > a or b is NaN, else a (so a NaN a stays).
    const __m256 take_b =
        _mm256_or_ps(_mm256_cmp_ps(vb, va, _CMP_GT_OQ), _mm256_cmp_ps(vb, vb, _CMP_UNORD_Q));
    _mm256_storeu_ps(dst + i, _mm256_blendv_ps(va, vb, take_b));
  }
  if (i < n) MaxRowPortable(dst + i, a + i, b + i, n - i);
}

}  // namespace

const Table* Avx2Table() {
  static const Table table = {"avx2_fma",
                              kNR,
                              GemmTile,
                              EpilogueRow,
                              DepthwiseRow,
                              PadRowPortable,
                              DepthwisePlane,
                              DequantizeRow,
                              QuantizeRow,
                              nullptr,
                              Depthwise3x3Avx2ScratchFloats,
                              MaxRow,
                              MaxStride2RowPortable};
  return &table;
}

}  // namespace cuvil::uk
