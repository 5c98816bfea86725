// Quantized matrix product: uint8/int8 activation rows times int8 weights, int32 accumulation, and
// the per-output-column requantisation epilogue of cuvil_uk_qconv2d (the same formula and float
// operations, so a QDQ MatMul rounds as a QDQ Conv does).
//
// Weights are packed once at compile time into panels of 16 output columns, [ceil(k / 4)][16][4]
// (four consecutive k of one column per 32-bit lane), so the vector lanes run along the output
// columns and each activation quad is broadcast: a row of y is written contiguously, and one row
// (batch 1, a GEMV) uses whole vectors. Tiers: AVX-512 VNNI (vpdpbusd), AVX2 (widened to int16
// and vpmaddwd) and generic; all write the same bits.
#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

constexpr int64_t kLanes = CUVIL_UK_QMM_NR;  // Output columns per panel.
constexpr int64_t kRowBlock = 8;             // Activation rows one panel pass serves.

// The activation quad of `row` at k-quad kk in x's uint8 domain (int8 x shifted by 128); a quad
// past k reads zeros from a copy instead of memory past the row (its weights are zero).
inline uint32_t Quad(const uint8_t* row, int64_t kk, int64_t k, uint32_t flip) {
  uint32_t q = 0;
  const int64_t at = kk * 4;
  if (at + 4 <= k) {
    std::memcpy(&q, row + at, 4);  // The common case, one load.
  } else {
    std::memcpy(&q, row + at, static_cast<size_t>(k - at));
  }
  return q ^ flip;
}

// Bytes of one output element of `out_type` (cuvil_uk_qout).
inline int64_t OutBytes(int64_t out_type) {
  return out_type == CUVIL_UK_QOUT_FLOAT || out_type == CUVIL_UK_QOUT_S32 ? 4 : 1;
}

// v clamped to [lo, hi] and rounded half to even (as qgemm.cc's ClampRound).
inline float ClampRound(float v, float lo, float hi) {
  constexpr float kMagic = 12582912.0f;
  v = std::min(std::max(v, lo), hi);
  return (v + kMagic) - kMagic;
}

// Row r's epilogue for the `cols` columns from n0 (acc[j] is column n0 + j): what every tier but
// the VNNI one writes from its int32 accumulators.
void StoreColumns(const QMatMulBlock& b, int64_t r, int64_t n0, int64_t cols, const int32_t* acc) {
  const cuvil_uk_qmatmul_params& p = *b.params;
  for (int64_t j = 0; j < cols; ++j) {
    const int64_t c = n0 + j;
    const float v = static_cast<float>(acc[j] - b.comp[c]) * b.mult[c] + b.bias[c];
    const int64_t at = r * p.n + c;
    if (p.out_type == CUVIL_UK_QOUT_S32) {
      static_cast<int32_t*>(b.y)[at] = acc[j] - b.comp[c];
    } else if (p.out_type == CUVIL_UK_QOUT_FLOAT) {
      static_cast<float*>(b.y)[at] = std::min(std::max(v, b.lo), b.hi);
    } else if (p.out_type == CUVIL_UK_QOUT_U8) {
      static_cast<uint8_t*>(b.y)[at] =
          static_cast<uint8_t>(static_cast<int32_t>(ClampRound(v, b.lo, b.hi)));
    } else {
      static_cast<int8_t*>(b.y)[at] =
          static_cast<int8_t>(static_cast<int32_t>(ClampRound(v, b.lo, b.hi)));
    }
  }
}

void BlockGeneric(const QMatMulBlock& b) {
  const cuvil_uk_qmatmul_params& p = *b.params;
  const int64_t kq = (p.k + 3) / 4;
  const uint32_t flip = p.x_signed ? 0x80808080u : 0;
  for (int64_t pp = b.panel_begin; pp < b.panel_end; ++pp) {
    const int8_t* wp = b.w + pp * kq * kLanes * 4;
    const int64_t n0 = pp * kLanes;
    for (int64_t r = 0; r < b.rows; ++r) {
      const uint8_t* xr = b.x + r * p.k;
      int32_t acc[kLanes] = {};
      for (int64_t kk = 0; kk < kq; ++kk) {
        const uint32_t q = Quad(xr, kk, p.k, flip);
        const int32_t x0 = q & 0xff, x1 = (q >> 8) & 0xff, x2 = (q >> 16) & 0xff, x3 = q >> 24;
        const int8_t* wk = wp + kk * kLanes * 4;
        for (int64_t j = 0; j < kLanes; ++j) {
          acc[j] += x0 * wk[j * 4] + x1 * wk[j * 4 + 1] + x2 * wk[j * 4 + 2] + x3 * wk[j * 4 + 3];
        }
      }
      StoreColumns(b, r, n0, std::min(kLanes, p.n - n0), acc);
    }
  }
}

#if defined(__x86_64__)

// R rows (R <= kRowBlock) of one panel: R accumulators of 16 columns, then the epilogue from
// registers with the operations of qgemm.cc's StoreRowAvx512 in the same order.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void PanelVnni(const QMatMulBlock& b,
                                                                      int64_t pp) {
  const cuvil_uk_qmatmul_params& p = *b.params;
  const int64_t kq = (p.k + 3) / 4, kfull = p.k / 4;
  const uint32_t flip = p.x_signed ? 0x80808080u : 0;
  const int8_t* wp = b.w + pp * kq * kLanes * 4;
  __m512i acc[R];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_si512();
  for (int64_t kk = 0; kk < kfull; ++kk) {
    const __m512i wv = _mm512_loadu_si512(wp + kk * kLanes * 4);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      uint32_t q;
      std::memcpy(&q, b.x + r * p.k + kk * 4, 4);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(static_cast<int>(q ^ flip)), wv);
    }
  }
  if (kfull < kq) {
    const __m512i wv = _mm512_loadu_si512(wp + kfull * kLanes * 4);
    for (int r = 0; r < R; ++r) {
      const uint32_t q = Quad(b.x + r * p.k, kfull, p.k, flip);
      acc[r] = _mm512_dpbusd_epi32(acc[r], _mm512_set1_epi32(static_cast<int>(q)), wv);
    }
  }
  const int64_t n0 = pp * kLanes, cols = std::min(kLanes, p.n - n0);
  const __mmask16 mask = cols >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << cols) - 1);
  const __m512i c = _mm512_maskz_loadu_epi32(mask, b.comp + n0);
  const __m512 mv = _mm512_maskz_loadu_ps(mask, b.mult + n0);
  const __m512 bv = _mm512_maskz_loadu_ps(mask, b.bias + n0);
  const __m512 lov = _mm512_set1_ps(b.lo), hiv = _mm512_set1_ps(b.hi);
  for (int r = 0; r < R; ++r) {
    if (p.out_type == CUVIL_UK_QOUT_S32) {
      _mm512_mask_storeu_epi32(static_cast<int32_t*>(b.y) + r * p.n + n0, mask,
                               _mm512_sub_epi32(acc[r], c));
      continue;
    }
    // The _round_ forms (current rounding mode) keep GCC from contracting the pair into an FMA,
    // whose single rounding would differ from the generic tier's in the last bit.
    constexpr int kRound = _MM_FROUND_CUR_DIRECTION;
    __m512 v = _mm512_add_round_ps(
        _mm512_mul_round_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r], c)), mv, kRound), bv,
        kRound);
    v = _mm512_min_ps(_mm512_max_ps(v, lov), hiv);
    const int64_t at = r * p.n + n0;
    if (p.out_type == CUVIL_UK_QOUT_FLOAT) {
      _mm512_mask_storeu_ps(static_cast<float*>(b.y) + at, mask, v);
    } else if (p.out_type == CUVIL_UK_QOUT_U8) {
      _mm512_mask_cvtusepi32_storeu_epi8(static_cast<uint8_t*>(b.y) + at, mask,
                                         _mm512_cvtps_epi32(v));
    } else {
      _mm512_mask_cvtsepi32_storeu_epi8(static_cast<int8_t*>(b.y) + at, mask,
                                        _mm512_cvtps_epi32(v));
    }
  }
}

template <int R>
void PanelsVnni(const QMatMulBlock& b) {
  for (int64_t pp = b.panel_begin; pp < b.panel_end; ++pp) PanelVnni<R>(b, pp);
}

void BlockVnni(const QMatMulBlock& b) {
  static constexpr void (*kByRows[kRowBlock + 1])(const QMatMulBlock&) = {
      nullptr,       PanelsVnni<1>, PanelsVnni<2>, PanelsVnni<3>, PanelsVnni<4>,
      PanelsVnni<5>, PanelsVnni<6>, PanelsVnni<7>, PanelsVnni<8>};
  kByRows[b.rows](b);
}

// AVX2 without VNNI: the widening sequence. Four columns' weight quads are sign-extended to 16
// int16 (vpmovsxbw) and the activation quad zero-extended and repeated; vpmaddwd then sums pairs
// into int32 without the int16 saturation vpmaddubsw would risk (255 * 127 * 2 > 32767). Each
// column ends up in two adjacent int32 lanes, added at the end. R rows (R <= 2) of one panel.
template <int R>
__attribute__((target("avx2"))) void PanelAvx2(const QMatMulBlock& b, int64_t pp) {
  const cuvil_uk_qmatmul_params& p = *b.params;
  const int64_t kq = (p.k + 3) / 4;
  const uint32_t flip = p.x_signed ? 0x80808080u : 0;
  const int8_t* wp = b.w + pp * kq * kLanes * 4;
  __m256i acc[R][4];
  for (int r = 0; r < R; ++r) {
    for (int g = 0; g < 4; ++g) acc[r][g] = _mm256_setzero_si256();
  }
  for (int64_t kk = 0; kk < kq; ++kk) {
    const int8_t* wk = wp + kk * kLanes * 4;
    __m256i w16[4];
    for (int g = 0; g < 4; ++g) {
      w16[g] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wk + 16 * g)));
    }
    for (int r = 0; r < R; ++r) {
      const uint32_t q = Quad(b.x + r * p.k, kk, p.k, flip);
      const __m256i x16 = _mm256_cvtepu8_epi16(_mm_set1_epi32(static_cast<int>(q)));
      for (int g = 0; g < 4; ++g) {
        acc[r][g] = _mm256_add_epi32(acc[r][g], _mm256_madd_epi16(x16, w16[g]));
      }
    }
  }
  const int64_t n0 = pp * kLanes;
  for (int r = 0; r < R; ++r) {
    alignas(32) int32_t sums[kLanes];
    for (int h = 0; h < 2; ++h) {
      // hadd leaves [c0 c1 c4 c5 | c2 c3 c6 c7] of the two groups; the permute puts them in order.
      const __m256i pairs = _mm256_hadd_epi32(acc[r][2 * h], acc[r][2 * h + 1]);
      _mm256_store_si256(reinterpret_cast<__m256i*>(sums + 8 * h),
                         _mm256_permute4x64_epi64(pairs, 0xD8));
    }
    StoreColumns(b, r, n0, std::min(kLanes, p.n - n0), sums);
  }
}

void BlockAvx2(const QMatMulBlock& b) {
  QMatMulBlock pair = b;
  for (int64_t r0 = 0; r0 < b.rows; r0 += 2) {
    pair.x = b.x + r0 * b.params->k;
    pair.y = static_cast<uint8_t*>(b.y) + r0 * b.params->n * OutBytes(b.params->out_type);
    for (int64_t pp = b.panel_begin; pp < b.panel_end; ++pp) {
      if (b.rows - r0 >= 2) {
        PanelAvx2<2>(pair, pp);
      } else {
        PanelAvx2<1>(pair, pp);
      }
    }
  }
}

#endif  // __x86_64__

}  // namespace

const QMatMulTable& QMatMulGenericTable() {
  static const QMatMulTable table = {"generic", BlockGeneric};
  return table;
}

#if defined(__x86_64__)
const QMatMulTable* QMatMulAvx2Table() {
  static const QMatMulTable table = {"avx2", BlockAvx2};
  return &table;
}
const QMatMulTable* QMatMulVnniTable() {
  static const QMatMulTable table = {"avx512_vnni", BlockVnni};
  return &table;
}
#else
const QMatMulTable* QMatMulAvx2Table() { return nullptr; }
const QMatMulTable* QMatMulVnniTable() { return nullptr; }
#endif

TierList<QMatMulTable> SupportedQMatMulTables() {
  // The integer convolution's tiers need the same instructions: offer the same ones.
  TierList<QMatMulTable> out;
  for (const QTable* conv : SupportedQTables()) {
    for (const QMatMulTable* t : {QMatMulVnniTable(), QMatMulAvx2Table(), &QMatMulGenericTable()}) {
      if (t != nullptr && std::string_view(t->name) == conv->name) out.push_back(t);
    }
  }
  return out;
}

const QMatMulTable& ActiveQMatMulTable() {
  // The integer convolution's choice (the CPU, bounded by CUVIL_UK_TIER) decides this one too.
  static const QMatMulTable* table = [] {
    for (const QMatMulTable* t : SupportedQMatMulTables()) {
      if (std::string_view(t->name) == ActiveQTable().name) return t;
    }
    return &QMatMulGenericTable();
  }();
  return *table;
}

void QMatMul(const QMatMulTable& t, const cuvil_uk_qmatmul_params& p, const void* x,
             const int8_t* w, const int32_t* comp, const float* mult, const float* bias, void* y,
             int64_t rows, float lo, float hi) {
  if (rows <= 0 || p.n <= 0) return;
  const int64_t panels = (p.n + kLanes - 1) / kLanes;
  const int64_t out_bytes = OutBytes(p.out_type);
  auto body = [&](int64_t begin, int64_t end) {
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      QMatMulBlock b;
      b.params = &p;
      b.x = static_cast<const uint8_t*>(x) + r0 * p.k;
      b.w = w;
      b.comp = comp;
      b.mult = mult;
      b.bias = bias;
      b.y = static_cast<uint8_t*>(y) + r0 * p.n * out_bytes;
      b.rows = std::min(kRowBlock, rows - r0);
      b.panel_begin = begin;
      b.panel_end = end;
      b.lo = lo;
      b.hi = hi;
      t.block(b);
    }
  };
  ParallelFor(panels, rows * p.k * kLanes, body);
}

}  // namespace cuvil::uk

extern "C" {

int64_t cuvil_uk_qmatmul_weights_size(int64_t k, int64_t n) {
  if (k < 0 || n < 0) return -1;
  const int64_t panels = (n + CUVIL_UK_QMM_NR - 1) / CUVIL_UK_QMM_NR, quads = (k + 3) / 4;
  int64_t out = 0;
  if (__builtin_mul_overflow(panels, quads, &out) ||
      __builtin_mul_overflow(out, CUVIL_UK_QMM_NR * 4, &out)) {
    return -1;
  }
  return out;
}

void cuvil_uk_pack_qmatmul_weights(const int8_t* w, int64_t k, int64_t n, int64_t transposed,
                                   int8_t* packed, int32_t* sums) {
  const int64_t panels = (n + CUVIL_UK_QMM_NR - 1) / CUVIL_UK_QMM_NR, quads = (k + 3) / 4;
  auto at = [&](int64_t kk, int64_t col) { return transposed ? w[col * k + kk] : w[kk * n + col]; };
  for (int64_t pp = 0; pp < panels; ++pp) {
    int8_t* dst = packed + pp * quads * CUVIL_UK_QMM_NR * 4;
    for (int64_t kk = 0; kk < quads; ++kk) {
      for (int64_t j = 0; j < CUVIL_UK_QMM_NR; ++j) {
        for (int64_t t = 0; t < 4; ++t) {
          const int64_t col = pp * CUVIL_UK_QMM_NR + j, row = kk * 4 + t;
          dst[(kk * CUVIL_UK_QMM_NR + j) * 4 + t] = col < n && row < k ? at(row, col) : 0;
        }
      }
    }
  }
  if (sums != nullptr) {
    for (int64_t col = 0; col < n; ++col) {
      int32_t s = 0;
      for (int64_t row = 0; row < k; ++row) s += at(row, col);
      sums[col] = s;
    }
  }
}

void cuvil_uk_qmatmul(const cuvil_uk_qmatmul_params* p, const void* x, const int8_t* w,
                      const int32_t* comp, const float* mult, const float* bias, void* y,
                      int64_t rows, float lo, float hi) {
  cuvil::uk::QMatMul(cuvil::uk::ActiveQMatMulTable(), *p, x, w, comp, mult, bias, y, rows, lo, hi);
}

}  // extern "C"
