// AVX-512 bodies of the microkernels (this file alone is compiled with -mavx512f/bw/dq/vl -mfma;
// nothing here may be an inline or template entity shared with other files, or the linker could
// pick an AVX-512 copy for code that runs on older CPUs).
#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__FMA__)
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "quantize_rows.h"

// GCC 12's _mm512_max_ps/_mm512_min_ps pass _mm512_undefined_ps() and warn about it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace cuvil::uk {
namespace {

constexpr int64_t kLanes = 16;
// Tile width: four zmm per row, 6 x 4 accumulators + 4 B vectors + 1 broadcast = 29 of 32 zmm.
constexpr int64_t kNR512 = 4 * kLanes;

// Mask of the first n of 16 lanes (n clamped to [0, 16]).
__mmask16 Mask(int64_t n) {
  if (n >= kLanes) return 0xffff;
  if (n <= 0) return 0;
  return static_cast<__mmask16>((1u << n) - 1);
}

// exp(x) with x clamped to [-87, 88] (no overflow, no denormal results): 2^n * e^r with
// r = x - n ln2 in [-ln2/2, ln2/2] (ln2 in two parts) and Cephes' degree-6 polynomial for e^r;
// within 2 ulp of expf over the range.
inline __m512 Exp(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 q = _mm512_set1_ps(1.9875691500e-4f);
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.3981999507e-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(8.3334519073e-3f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(4.1665795894e-2f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.6666665459e-1f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(5.0000001201e-1f));
  q = _mm512_fmadd_ps(q, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(q, n);
}

// sigmoid(x), or x * sigmoid(x) when `silu`, in registers: applied before the store, because a
// pass over stored values reloads what masked stores just wrote, which store forwarding cannot
// serve (that pass cost 3x the unfused Sigmoid and Mul).
inline __m512 Gate(__m512 x, bool silu) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 d = _mm512_add_ps(one, Exp(_mm512_sub_ps(_mm512_setzero_ps(), x)));
  // 1 / d as rcp14 and one Newton step (2^-28 relative; a division costs several times more).
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_fmadd_ps(r, _mm512_fnmadd_ps(d, r, one), r);
  // Below -87 the clamped exp would leave x / e^87 (-6e-9 at x = -1e30): the value is 0 there.
  const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_NLT_UQ);
  return _mm512_maskz_mul_ps(live, silu ? x : one, r);
}

// Every fused activation, in registers.
__m512 Activate(__m512 v, const Epilogue& ep) {
  switch (ep.activation) {
    case CUVIL_UK_ACT_RELU:
      return _mm512_max_ps(v, _mm512_setzero_ps());
    case CUVIL_UK_ACT_CLIP:
      return _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(ep.alpha)), _mm512_set1_ps(ep.beta));
    case CUVIL_UK_ACT_HARDSIGMOID: {
      __m512 h = _mm512_fmadd_ps(_mm512_set1_ps(ep.alpha), v, _mm512_set1_ps(ep.beta));
      return _mm512_min_ps(_mm512_max_ps(h, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
    }
    case CUVIL_UK_ACT_HARDSWISH: {
      __m512 h = _mm512_fmadd_ps(_mm512_set1_ps(1.0f / 6.0f), v, _mm512_set1_ps(0.5f));
      h = _mm512_min_ps(_mm512_max_ps(h, _mm512_setzero_ps()), _mm512_set1_ps(1.0f));
      return _mm512_mul_ps(v, h);
    }
    case CUVIL_UK_ACT_SIGMOID:
      return Gate(v, false);
    case CUVIL_UK_ACT_SILU:
      return Gate(v, true);
    default:
      return v;
  }
}

// Adds bias/residual/activation to one row of the tile and stores it (last vector masked).
template <int NV>
inline void StoreRow(const __m512 (&acc)[NV], float* row, int64_t r, int64_t ldc, __mmask16 tail,
                     bool accumulate, const Epilogue* ep) {
  const float* res = ep != nullptr && ep->residual != nullptr ? ep->residual + r * ldc : nullptr;
  const __m512 bias =
      ep != nullptr && ep->bias != nullptr ? _mm512_set1_ps(ep->bias[r]) : _mm512_setzero_ps();
#pragma GCC unroll 8
  for (int v = 0; v < NV; ++v) {
    const __mmask16 m = v == NV - 1 ? tail : __mmask16(0xffff);
    __m512 x = acc[v];
    if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, row + v * kLanes));
    if (ep != nullptr) {
      x = _mm512_add_ps(x, bias);
      if (res != nullptr) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(m, res + v * kLanes));
      x = Activate(x, *ep);
    }
    _mm512_mask_storeu_ps(row + v * kLanes, m, x);
  }
}

// Stores one tile column j held as a column vector (lane r = row r, r < mr), with the same
// accumulation and epilogue as StoreRow. The rows are ldc apart, so the column goes through a
// small buffer.
inline void StoreColumn(__m256 acc, float* c, int64_t j, int64_t ldc, int64_t mr, bool accumulate,
                        const Epilogue* ep) {
  alignas(32) float old[8] = {}, res[8] = {}, out[8];
  const __mmask8 rows = static_cast<__mmask8>((1u << mr) - 1);
  __m256 x = acc;
  if (accumulate) {
    for (int64_t r = 0; r < mr; ++r) old[r] = c[r * ldc + j];
    x = _mm256_add_ps(x, _mm256_load_ps(old));
  }
  if (ep != nullptr) {
    if (ep->bias != nullptr) x = _mm256_add_ps(x, _mm256_maskz_loadu_ps(rows, ep->bias));
    if (ep->residual != nullptr) {
      for (int64_t r = 0; r < mr; ++r) res[r] = ep->residual[r * ldc + j];
      x = _mm256_add_ps(x, _mm256_load_ps(res));
    }
    x = _mm512_castps512_ps256(Activate(_mm512_zextps256_ps512(x), *ep));
  }
  _mm256_store_ps(out, x);
  for (int64_t r = 0; r < mr; ++r) c[r * ldc + j] = out[r];
}

// 6 x (NV * 16 + E) tile: NV full-width vectors per row, then E (< 16) single columns.
// With E == 0 only the last vector of a row is partial, so only it is masked (masked loads never
// fault, which is what lets the driver's B reads run past the plane's valid columns). With E > 0
// the NV vectors are full and each extra column is one column vector of the six rows (the weight
// panel's six values at k times one broadcast B element): half a vector FMA per k on 256-bit
// lanes instead of a whole 16-lane FMA for a few live lanes. MobileNet's 7x7 layers (49 = 3 * 16
// + 1 columns) and the 4-column last tile of its 14x14 layers take this form.
template <int NV, int E>
void Tile(int64_t kc, const float* a, const float* b, const int64_t* off, float* c, int64_t ldc,
          int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  constexpr int kV = NV > 0 ? NV : 1;  // no zero-length arrays
  constexpr int kE = E > 0 ? E : 1;
  __m512 acc[kMR][kV];
  __m256 col[kE];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
#pragma GCC unroll 16
  for (int e = 0; e < E; ++e) col[e] = _mm256_setzero_ps();
  const __mmask16 tail = E > 0 ? __mmask16(0xffff) : Mask(nr - (NV - 1) * kLanes);
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + off[k];
    __m512 bv[kV];
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bk + v * kLanes);
    if constexpr (NV > 0) bv[NV - 1] = _mm512_maskz_loadu_ps(tail, bk + (NV - 1) * kLanes);
    // Large weight panels stream from L3/DRAM: fetch 64 k steps (1.5 KB) ahead.
    _mm_prefetch(reinterpret_cast<const char*>(a + 64 * kMR), _MM_HINT_T0);
    if constexpr (E > 0) {
      // The panel's six weights of this k (masked: the panel's last k ends the buffer).
      const __m256 ak = _mm256_maskz_loadu_ps(0x3f, a);
#pragma GCC unroll 16
      for (int e = 0; e < E; ++e) {
        col[e] = _mm256_fmadd_ps(ak, _mm256_set1_ps(bk[NV * kLanes + e]), col[e]);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kMR;
  }
  // Constant row indices (unrolled, rows past mr skipped) keep acc in registers.
  if constexpr (NV > 0) {
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      if (r < mr) StoreRow<NV>(acc[r], c + r * ldc, r, ldc, tail, accumulate, ep);
    }
  }
#pragma GCC unroll 16
  for (int e = 0; e < E; ++e) StoreColumn(col[e], c, NV * kLanes + e, ldc, mr, accumulate, ep);
}

// Columns past the full vectors that the column form takes (more cost about a whole vector).
constexpr int64_t kMaxColumns = 4;

template <int NV>
void TileWithColumns(int64_t kc, const float* a, const float* b, const int64_t* off, float* c,
                     int64_t ldc, int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  switch (nr - NV * kLanes) {
    case 1:
      return Tile<NV, 1>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    case 2:
      return Tile<NV, 2>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    case 3:
      return Tile<NV, 3>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    default:
      return Tile<NV, 4>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
  }
}

// Narrow tiles (the last columns of a row of tiles) use fewer vectors instead of masked FMAs, and
// a few columns past the full vectors are column vectors (see Tile).
void GemmTile(int64_t kc, const float* a, const float* b, const int64_t* off, float* c, int64_t ldc,
              int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  if (nr <= 0 || mr <= 0) return;
  static_assert(kMaxColumns <= 4 && kNR512 == 4 * kLanes);
  const int64_t full = nr / kLanes, rest = nr % kLanes;
  if (rest != 0 && rest <= kMaxColumns) {
    // full <= 3 here: 4 full vectors are the whole tile.
    switch (full) {
      case 0:
        return TileWithColumns<0>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
      case 1:
        return TileWithColumns<1>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
      case 2:
        return TileWithColumns<2>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
      default:
        return TileWithColumns<3>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    }
  }
  switch ((nr + kLanes - 1) / kLanes) {
    case 1:
      return Tile<1, 0>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    case 2:
      return Tile<2, 0>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    case 3:
      return Tile<3, 0>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    default:
      return Tile<4, 0>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
  }
}

void EpilogueRow(float* dst, const float* src, int64_t n, float bias, const float* residual,
                 const Epilogue& ep) {
  const __m512 b = _mm512_set1_ps(bias);
  for (int64_t i = 0; i < n; i += kLanes) {
    const __mmask16 m = Mask(n - i);
    __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(m, src + i), b);
    if (residual != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, residual + i));
    _mm512_mask_storeu_ps(dst + i, m, Activate(v, ep));
  }
}

void DepthwiseRow(float* dst, const float* src, const int64_t* off, const float* wt, int64_t taps,
                  int64_t n, float bias, const float* residual, const Epilogue& ep) {
  const __m512 b = _mm512_set1_ps(bias);
  int64_t i = 0;
  // Four vectors per step hide the FMA latency of the tap chain (4 cycles, 2 pipes).
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
    __m512 v0 = b, v1 = b, v2 = b, v3 = b;
    for (int64_t t = 0; t < taps; ++t) {
      const __m512 w = _mm512_set1_ps(wt[t]);
      const float* s = src + off[t] + i;
      v0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(s), v0);
      v1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(s + kLanes), v1);
      v2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(s + 2 * kLanes), v2);
      v3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(s + 3 * kLanes), v3);
    }
    if (residual != nullptr) {
      v0 = _mm512_add_ps(v0, _mm512_loadu_ps(residual + i));
      v1 = _mm512_add_ps(v1, _mm512_loadu_ps(residual + i + kLanes));
      v2 = _mm512_add_ps(v2, _mm512_loadu_ps(residual + i + 2 * kLanes));
      v3 = _mm512_add_ps(v3, _mm512_loadu_ps(residual + i + 3 * kLanes));
    }
    _mm512_storeu_ps(dst + i, Activate(v0, ep));
    _mm512_storeu_ps(dst + i + kLanes, Activate(v1, ep));
    _mm512_storeu_ps(dst + i + 2 * kLanes, Activate(v2, ep));
    _mm512_storeu_ps(dst + i + 3 * kLanes, Activate(v3, ep));
  }
  for (; i < n; i += 2 * kLanes) {
    const __mmask16 m0 = Mask(n - i), m1 = Mask(n - i - kLanes);
    __m512 v0 = b, v1 = b;
    for (int64_t t = 0; t < taps; ++t) {
      const __m512 w = _mm512_set1_ps(wt[t]);
      const float* s = src + off[t] + i;
      v0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m0, s), v0);
      v1 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(m1, s + kLanes), v1);
    }
    if (residual != nullptr) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, residual + i));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, residual + i + kLanes));
    }
    _mm512_mask_storeu_ps(dst + i, m0, Activate(v0, ep));
    _mm512_mask_storeu_ps(dst + i + kLanes, m1, Activate(v1, ep));
  }
}

// Depthwise straight from the unpadded input. The output is cut into items of 16 columns of one
// row; kItems rows of one column block run in lockstep (independent FMA chains) and share the
// column masks, which keep every tap load inside the input row. A row above or below the input
// reads a static zero row instead, so the zero padding is never materialised.
constexpr int kItems = 8;
constexpr int64_t kMaxKernelW = 16;
constexpr int64_t kZeroRow = 4096;
alignas(64) const float kZeros[kZeroRow] = {};

// Mask of bits [lo, hi) of a width-bit mask, lo and hi clamped to [0, width].
uint32_t RangeMask(int64_t lo, int64_t hi, int64_t width) {
  lo = lo < 0 ? 0 : (lo > width ? width : lo);
  hi = hi < lo ? lo : (hi > width ? width : hi);
  const uint64_t upto_hi = (uint64_t{1} << hi) - 1, below_lo = (uint64_t{1} << lo) - 1;
  return static_cast<uint32_t>(upto_hi & ~below_lo);
}

// 16 input columns `row[SW * l]` for l < 16; lanes outside `m` read as zero (and never fault).
template <int SW>
__m512 LoadColumns(const float* row, uint32_t m) {
  if constexpr (SW == 1) {
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), row);
  } else {
    const __m512 lo = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m), row);
    const __m512 hi = _mm512_maskz_loadu_ps(static_cast<__mmask16>(m >> 16), row + kLanes);
    const __m512i even =
        _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    return _mm512_permutex2var_ps(lo, even, hi);
  }
}

// Stores output rows [oy0, oy0 + count) of the column block at ox0 from `acc`, adding the
// residual and applying the epilogue; lanes past the row end are masked off.
inline void StoreItems(const cuvil_uk_conv_params& p, const __m512 (&acc)[kItems],
                       const float* residual, float* y, const Epilogue& ep, int64_t oy0,
                       int64_t count, int64_t ox0) {
  const __mmask16 store = Mask(p.out_width - ox0);
#pragma GCC unroll 8
  for (int n = 0; n < kItems; ++n) {
    if (n >= count) break;
    const int64_t at = (oy0 + n) * p.out_width + ox0;
    __m512 v = acc[n];
    if (residual != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(store, residual + at));
    _mm512_mask_storeu_ps(y + at, store, Activate(v, ep));
  }
}

// Output rows [oy0, oy0 + count) (count <= kItems) of the column block starting at ox0.
template <int SW>
void DepthwiseItems(const cuvil_uk_conv_params& p, const float* x, const float* wt, float bias,
                    const float* residual, float* y, const Epilogue& ep, int64_t oy0, int64_t count,
                    int64_t ox0, const uint32_t* col_mask) {
  __m512 acc[kItems];
#pragma GCC unroll 8
  for (int n = 0; n < kItems; ++n) acc[n] = _mm512_set1_ps(bias);
  // Offsets are relative to the row's column 0; the masks keep lanes before it unread.
  const int64_t ix0 = ox0 * SW - p.pad_left;
  for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
    const float* row[kItems];
#pragma GCC unroll 8
    for (int n = 0; n < kItems; ++n) {
      const int64_t iy = (oy0 + n) * p.stride_h + ky * p.dilation_h - p.pad_top;
      row[n] = n < count && iy >= 0 && iy < p.height ? x + iy * p.width : kZeros;
    }
    const float* wk = wt + ky * p.kernel_w;
    for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
      const __m512 w = _mm512_set1_ps(wk[kx]);
      const uint32_t m = col_mask[kx];
      const int64_t at = ix0 + kx * p.dilation_w;
#pragma GCC unroll 8
      for (int n = 0; n < kItems; ++n) {
        // The address may lie before the row; the mask keeps every lane read inside it.
        const float* src = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(row[n]) +
                                                          at * int64_t{sizeof(float)});
        acc[n] = _mm512_fmadd_ps(w, LoadColumns<SW>(src, m), acc[n]);
      }
    }
  }
  StoreItems(p, acc, residual, y, ep, oy0, count, ox0);
}

// The float input of a depthwise plane: 16 columns `ix + SW * l` of row iy.
struct FloatRows {
  const float* x;
  int64_t width;

  template <int SW>
  __m512 Load(int64_t iy, int64_t ix, uint32_t m) const {
    // The address may lie before the row; the mask keeps every lane read inside it.
    const float* at = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(x + iy * width) +
                                                     ix * int64_t{sizeof(float)});
    return LoadColumns<SW>(at, m);
  }
};

// The float output of a depthwise plane: bias + conv (+ residual), then the epilogue.
struct FloatOutput {
  const cuvil_uk_conv_params& p;
  const float* residual;
  float* y;
  const Epilogue& ep;

  void Store(const __m512 (&acc)[kItems], int64_t oy0, int64_t count, int64_t ox0) const {
    StoreItems(p, acc, residual, y, ep, oy0, count, ox0);
  }
};

// An 8-bit input plane (Q is uint8_t or int8_t) dequantised in registers exactly as
// DequantizeRow does: (x - zero) * scale. Lanes outside the mask load the zero point, so they
// become 0.0f like the float path's masked lanes.
template <typename Q>
struct QuantizedRows {
  const Q* x;
  int64_t width;
  __m512i zero;
  __m512 scale;
  __m256i fill;  // the zero point in every byte

  QuantizedRows(const Q* x_in, int64_t w, float s, int32_t z)
      : x(x_in),
        width(w),
        zero(_mm512_set1_epi32(z)),
        scale(_mm512_set1_ps(s)),
        fill(_mm256_set1_epi8(static_cast<char>(z))) {}

  template <int SW>
  __m512 Load(int64_t iy, int64_t ix, uint32_t m) const {
    constexpr bool kSigned = std::is_signed_v<Q>;
    const Q* at =
        reinterpret_cast<const Q*>(reinterpret_cast<uintptr_t>(x + iy * width) + ix * int64_t{1});
    __m512i q;
    if constexpr (SW == 1) {
      const __m128i b =
          _mm_mask_loadu_epi8(_mm256_castsi256_si128(fill), static_cast<__mmask16>(m), at);
      q = kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
    } else {
      // 32 columns widened to 16-bit lanes; each 32-bit lane's low half is an even column.
      const __m256i b = _mm256_mask_loadu_epi8(fill, static_cast<__mmask32>(m), at);
      const __m512i h = kSigned ? _mm512_cvtepi8_epi16(b) : _mm512_cvtepu8_epi16(b);
      q = kSigned ? _mm512_srai_epi32(_mm512_slli_epi32(h, 16), 16)
                  : _mm512_and_si512(h, _mm512_set1_epi32(0xFFFF));
    }
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(q, zero)), scale);
  }
};

// An 8-bit output plane: the epilogue, then saturate(round_half_even(v / scale) + zero) exactly as
// QuantizeRow computes it (the division, the clamp before rounding, NaN to the lowest value).
template <typename Q>
struct QuantizedOutput {
  const cuvil_uk_conv_params& p;
  Q* y;
  const Epilogue& ep;
  __m512 scale, lo, hi;
  __m512i zero;

  QuantizedOutput(const cuvil_uk_conv_params& params, Q* y_out, const Epilogue& e, float s,
                  int32_t z)
      : p(params),
        y(y_out),
        ep(e),
        scale(_mm512_set1_ps(s)),
        lo(_mm512_set1_ps(static_cast<float>(std::numeric_limits<Q>::min() - z))),
        hi(_mm512_set1_ps(static_cast<float>(std::numeric_limits<Q>::max() - z))),
        zero(_mm512_set1_epi32(z)) {}

  void Store(const __m512 (&acc)[kItems], int64_t oy0, int64_t count, int64_t ox0) const {
    const __mmask16 store = Mask(p.out_width - ox0);
#pragma GCC unroll 8
    for (int n = 0; n < kItems; ++n) {
      if (n >= count) break;
      __m512 a = _mm512_div_ps(Activate(acc[n], ep), scale);
      a = _mm512_min_ps(_mm512_max_ps(a, lo), hi);  // max(NaN, lo) is lo
      const __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(a), zero);
      _mm_mask_storeu_epi8(y + (oy0 + n) * p.out_width + ox0, store, _mm512_cvtepi32_epi8(q));
    }
  }
};

// 3x3, dilation 1, stride SW on both axes (MobileNet's depthwise layers): output rows
// [oy0, oy0 + count) of the column block at ox0. Each input row the block reads is loaded once
// (three column vectors, masked as in DepthwiseItems) and multiplied into the up to three output
// rows it feeds, with the nine weights in registers: 3 loads per 9 FMAs instead of 9.
// kInterior: count == kItems and every input row the block reads lies inside the plane, so the
// unrolled row loop has no bounds checks.
template <int SW, bool kInterior, class Rows, class Output>
void Depthwise3x3Items(const cuvil_uk_conv_params& p, const Rows& x, const __m512 (&w)[9],
                       __m512 bias, const Output& out, int64_t oy0, int64_t count, int64_t ox0,
                       const uint32_t* col_mask) {
  constexpr int kRows = (kItems - 1) * SW + 3;  // input rows of kItems output rows
  __m512 acc[kItems];
#pragma GCC unroll 8
  for (int n = 0; n < kItems; ++n) acc[n] = bias;
  const int64_t iy0 = oy0 * SW - p.pad_top;
  const int64_t rows = (count - 1) * SW + 3;  // input rows the `count` live outputs read
  const int64_t ix0 = ox0 * SW - p.pad_left;
  const uint32_t m0 = col_mask[0], m1 = col_mask[1], m2 = col_mask[2];
#pragma GCC unroll 32
  for (int j = 0; j < kRows; ++j) {
    const int64_t iy = iy0 + j;
    if constexpr (!kInterior) {
      if (j >= rows) break;
      if (iy < 0 || iy >= p.height) continue;  // a padding row adds nothing
    }
    const __m512 v0 = x.template Load<SW>(iy, ix0, m0);
    const __m512 v1 = x.template Load<SW>(iy, ix0 + 1, m1);
    const __m512 v2 = x.template Load<SW>(iy, ix0 + 2, m2);
#pragma GCC unroll 3
    for (int ky = 0; ky < 3; ++ky) {
      const int d = j - ky;  // output row n reads input row n * SW + ky
      if (d < 0 || d % SW != 0 || d / SW >= kItems) continue;
      const int n = d / SW;
      acc[n] = _mm512_fmadd_ps(w[3 * ky], v0, acc[n]);
      acc[n] = _mm512_fmadd_ps(w[3 * ky + 1], v1, acc[n]);
      acc[n] = _mm512_fmadd_ps(w[3 * ky + 2], v2, acc[n]);
    }
  }
  out.Store(acc, oy0, count, ox0);
}

template <int SW, class Rows, class Output>
void Depthwise3x3Plane(const cuvil_uk_conv_params& p, const Rows& x, const float* wt, float bias,
                       const Output& out) {
  __m512 w[9];
#pragma GCC unroll 9
  for (int t = 0; t < 9; ++t) w[t] = _mm512_set1_ps(wt[t]);
  const __m512 b = _mm512_set1_ps(bias);
  for (int64_t ox0 = 0; ox0 < p.out_width; ox0 += kLanes) {
    uint32_t col_mask[3];
    for (int64_t kx = 0; kx < 3; ++kx) {
      const int64_t ix = ox0 * SW - p.pad_left + kx;
      col_mask[kx] = RangeMask(-ix, p.width - ix, SW * kLanes);
    }
    for (int64_t oy0 = 0; oy0 < p.out_height; oy0 += kItems) {
      const int64_t count = p.out_height - oy0 < kItems ? p.out_height - oy0 : kItems;
      const int64_t iy0 = oy0 * SW - p.pad_top;
      if (count == kItems && iy0 >= 0 && iy0 + (kItems - 1) * SW + 3 <= p.height) {
        Depthwise3x3Items<SW, true>(p, x, w, b, out, oy0, count, ox0, col_mask);
      } else {
        Depthwise3x3Items<SW, false>(p, x, w, b, out, oy0, count, ox0, col_mask);
      }
    }
  }
}

// The geometry Depthwise3x3Plane computes.
bool IsDepthwise3x3(const cuvil_uk_conv_params& p) {
  return p.kernel_h == 3 && p.kernel_w == 3 && p.dilation_h == 1 && p.dilation_w == 1 &&
         p.stride_h == p.stride_w && (p.stride_w == 1 || p.stride_w == 2);
}

template <class Rows, class Output>
void Depthwise3x3(const cuvil_uk_conv_params& p, const Rows& x, const float* wt, float bias,
                  const Output& out) {
  if (p.stride_w == 1) {
    Depthwise3x3Plane<1>(p, x, wt, bias, out);
  } else {
    Depthwise3x3Plane<2>(p, x, wt, bias, out);
  }
}

template <typename QX, typename QY>
void QuantizedDepthwise3x3(const cuvil_uk_conv_params& p, const void* x, const float* wt,
                           float bias, void* y, const QuantizedPlane& q, const Epilogue& ep) {
  Depthwise3x3(p, QuantizedRows<QX>(static_cast<const QX*>(x), p.width, q.x_scale, q.x_zero), wt,
               bias, QuantizedOutput<QY>(p, static_cast<QY*>(y), ep, q.y_scale, q.y_zero));
}

// Sigmoid and SiLU are not offered on 8-bit planes (no exporter puts them there).
bool QDepthwisePlane(const cuvil_uk_conv_params& p, const void* x, const float* wt, float bias,
                     void* y, const QuantizedPlane& q, const Epilogue& ep) {
  if (!IsDepthwise3x3(p) || IsExpActivation(ep.activation)) return false;
  if (q.x_signed) {
    if (q.y_signed) return QuantizedDepthwise3x3<int8_t, int8_t>(p, x, wt, bias, y, q, ep), true;
    return QuantizedDepthwise3x3<int8_t, uint8_t>(p, x, wt, bias, y, q, ep), true;
  }
  if (q.y_signed) return QuantizedDepthwise3x3<uint8_t, int8_t>(p, x, wt, bias, y, q, ep), true;
  return QuantizedDepthwise3x3<uint8_t, uint8_t>(p, x, wt, bias, y, q, ep), true;
}

bool DepthwisePlane(const cuvil_uk_conv_params& p, const float* x, const float* wt, float bias,
                    const float* residual, float* y, const Epilogue& ep) {
  if ((p.stride_w != 1 && p.stride_w != 2) || p.kernel_w > kMaxKernelW || p.width > kZeroRow) {
    return false;
  }
  if (IsDepthwise3x3(p)) {
    Depthwise3x3(p, FloatRows{x, p.width}, wt, bias, FloatOutput{p, residual, y, ep});
    return true;
  }
  const int64_t span = p.stride_w * kLanes;  // input columns one item's load covers
  for (int64_t ox0 = 0; ox0 < p.out_width; ox0 += kLanes) {
    uint32_t col_mask[kMaxKernelW];
    for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
      const int64_t ix = ox0 * p.stride_w - p.pad_left + kx * p.dilation_w;
      col_mask[kx] = RangeMask(-ix, p.width - ix, span);
    }
    for (int64_t oy0 = 0; oy0 < p.out_height; oy0 += kItems) {
      const int64_t count = p.out_height - oy0 < kItems ? p.out_height - oy0 : kItems;
      if (p.stride_w == 1) {
        DepthwiseItems<1>(p, x, wt, bias, residual, y, ep, oy0, count, ox0, col_mask);
      } else {
        DepthwiseItems<2>(p, x, wt, bias, residual, y, ep, oy0, count, ox0, col_mask);
      }
    }
  }
  return true;
}

void PadRow(float* dst, int64_t n, const float* src, int64_t j0, int64_t j1, int64_t stride) {
  if (stride > 2) return PadRowPortable(dst, n, src, j0, j1, stride);
  // Block j covers dst[j, j + 16): lanes in [j0, j1) load from src, the rest are zero.
  const float* base = src - j0 * stride;  // where column 0 would read (masked before j0)
  for (int64_t j = 0; j < n; j += kLanes) {
    const int64_t lo = j0 - j, hi = j1 - j;
    const float* at = reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(base) +
                                                     j * stride * int64_t{sizeof(float)});
    // Stride 2: columns [lo, hi) read source lanes 2 lo .. 2 (hi - 1); the odd lanes between them
    // lie inside the row too, so one contiguous mask covers them.
    const __m512 v = stride == 1 ? LoadColumns<1>(at, RangeMask(lo, hi, kLanes))
                                 : LoadColumns<2>(at, RangeMask(2 * lo, 2 * hi - 1, 2 * kLanes));
    _mm512_mask_storeu_ps(dst + j, Mask(n - j), v);
  }
}

// b where b > a or b is NaN, else a (so a NaN a stays): ONNX Max.
inline __m512 MaxNan(__m512 va, __m512 vb) {
  const __mmask16 take_b =
      _mm512_cmp_ps_mask(vb, va, _CMP_GT_OQ) | _mm512_cmp_ps_mask(vb, vb, _CMP_UNORD_Q);
  return _mm512_mask_blend_ps(take_b, va, vb);
}

void MaxRow(float* dst, const float* a, const float* b, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    _mm512_storeu_ps(dst + i, MaxNan(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  }
  if (i < n) {
    const __mmask16 m = Mask(n - i);
    _mm512_mask_storeu_ps(dst + i, m,
                          MaxNan(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// 16 outputs per step: tap k of output lane l reads src[2 l + k], the even lanes of the 32
// floats at src + k (two loads and one permute per tap). The second load never takes its last
// lane (2 * 15 + k + 1 is past what the tap reads), so no read passes the row's last tap.
void MaxStride2Row(float* dst, const float* src, int64_t n, int64_t kw) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  auto tap = [&](const float* at, __mmask16 lo, __mmask16 hi) {
    return _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(lo, at), even,
                                  _mm512_maskz_loadu_ps(hi, at + kLanes));
  };
  auto block = [&](const float* at, __mmask16 lo, __mmask16 hi) {
    __m512 m = tap(at, lo, hi);
    for (int64_t k = 1; k < kw; ++k) m = MaxNan(m, tap(at + k, lo, hi));
    return m;
  };
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    _mm512_storeu_ps(dst + j, block(src + 2 * j, 0xffff, 0x7fff));
  }
  if (j < n) {
    // Outputs [j, n): each tap reads 2 (n - j) - 1 floats from its start.
    const uint32_t m = RangeMask(0, 2 * (n - j) - 1, 2 * kLanes);
    _mm512_mask_storeu_ps(
        dst + j, Mask(n - j),
        block(src + 2 * j, static_cast<__mmask16>(m), static_cast<__mmask16>(m >> 16)));
  }
}

}  // namespace

const Table* Avx512Table() {
  static const Table table = {"avx512", kNR512,         GemmTile,      EpilogueRow, DepthwiseRow,
                              PadRow,   DepthwisePlane, DequantizeRow, QuantizeRow, QDepthwisePlane,
                              nullptr,  MaxRow,         MaxStride2Row};
  return &table;
}

}  // namespace cuvil::uk

#else

namespace cuvil::uk {
const Table* Avx512Table() { return nullptr; }
}  // namespace cuvil::uk

#endif
