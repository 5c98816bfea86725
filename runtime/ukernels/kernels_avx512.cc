// AVX-512 bodies of the microkernels (this file alone is compiled with -mavx512f/bw/dq/vl -mfma;
// nothing here may be an inline or template entity shared with other files, or the linker could
// pick an AVX-512 copy for code that runs on older CPUs).
#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__) && defined(__FMA__)
#include <immintrin.h>

#include <cmath>

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

// Every activation but Sigmoid (applied afterwards in scalar code).
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
    default:
      return v;
  }
}

void SigmoidInPlace(float* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i) p[i] = 1.0f / (1.0f + std::exp(-p[i]));
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

// 6 x (NV * 16) tile. Only the last vector of a row is partial, so only it is masked (masked
// loads never fault, which is what lets the driver's B reads run past the plane's valid columns).
template <int NV>
void Tile(int64_t kc, const float* a, const float* b, const int64_t* off, float* c, int64_t ldc,
          int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  __m512 acc[kMR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const __mmask16 tail = Mask(nr - (NV - 1) * kLanes);
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + off[k];
    __m512 bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV - 1; ++v) bv[v] = _mm512_loadu_ps(bk + v * kLanes);
    bv[NV - 1] = _mm512_maskz_loadu_ps(tail, bk + (NV - 1) * kLanes);
    // Large weight panels stream from L3/DRAM: fetch a few k steps ahead.
    _mm_prefetch(reinterpret_cast<const char*>(a + 16 * kMR), _MM_HINT_T0);
#pragma GCC unroll 8
    for (int r = 0; r < kMR; ++r) {
      const __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_fmadd_ps(av, bv[v], acc[r][v]);
    }
    a += kMR;
  }
  // Constant row indices (unrolled, rows past mr skipped) keep acc in registers.
#pragma GCC unroll 8
  for (int r = 0; r < kMR; ++r) {
    if (r < mr) StoreRow<NV>(acc[r], c + r * ldc, r, ldc, tail, accumulate, ep);
  }
  if (ep != nullptr && ep->activation == CUVIL_UK_ACT_SIGMOID) {
    for (int64_t r = 0; r < mr; ++r) SigmoidInPlace(c + r * ldc, nr);
  }
}

// Narrow tiles (the last columns of a row of tiles) use fewer vectors instead of masked FMAs.
void GemmTile(int64_t kc, const float* a, const float* b, const int64_t* off, float* c, int64_t ldc,
              int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  if (nr <= 0 || mr <= 0) return;
  switch ((nr + kLanes - 1) / kLanes) {
    case 1:
      return Tile<1>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    case 2:
      return Tile<2>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    case 3:
      return Tile<3>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
    default:
      return Tile<4>(kc, a, b, off, c, ldc, mr, nr, accumulate, ep);
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
  if (ep.activation == CUVIL_UK_ACT_SIGMOID) SigmoidInPlace(dst, n);
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
  if (ep.activation == CUVIL_UK_ACT_SIGMOID) SigmoidInPlace(dst, n);
}

}  // namespace

const Table* Avx512Table() {
  static const Table table = {"avx512", kNR512, GemmTile, EpilogueRow, DepthwiseRow};
  return &table;
}

}  // namespace cuvil::uk

#else

namespace cuvil::uk {
const Table* Avx512Table() { return nullptr; }
}  // namespace cuvil::uk

#endif
