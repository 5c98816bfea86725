// Quantized convolution: a uint8 x int8 GEMM with int32 accumulation over an im2col of the input in
// k-quads, and a float requantisation epilogue per output channel.
//
// Per image, output rows are processed in blocks: the block's im2col B is built once ([kq][cols][4]
// uint8, four consecutive reduction rows per 32-bit lane, int8 inputs shifted to uint8 by +128,
// padding reading the zero point), then every weight panel of CUVIL_UK_QMR output channels is
// multiplied into an int32 tile that the epilogue turns into y. Tiers: AVX-512 VNNI (vpdpbusd),
// AVX2 (widened to int16 and vpmaddwd, so no int16 saturation as vpmaddubsw would have), generic.
// The intrinsics tiers use target attributes, so this file needs no ISA flags; the dispatcher
// checks the CPU before choosing one.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__ARM_FEATURE_DSP)
#include <arm_acle.h>
#endif

#include "call_scratch.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "parallel_tasks.h"
#include "scratch_sizes.h"
#include "thread_buffer.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

constexpr int64_t kQMR = CUVIL_UK_QMR;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

void TileGeneric(int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, int32_t* c,
                 int64_t ldc, int64_t nr) {
  for (int64_t r = 0; r < kQMR; ++r) {
    for (int64_t j = 0; j < nr; ++j) c[r * ldc + j] = 0;
  }
  for (int64_t kk = 0; kk < kq; ++kk) {
    const int8_t* ak = a + kk * kQMR * 4;
    const uint8_t* bk = b + kk * ldb * 4;
    for (int64_t r = 0; r < kQMR; ++r) {
      const int32_t w0 = ak[r * 4], w1 = ak[r * 4 + 1], w2 = ak[r * 4 + 2], w3 = ak[r * 4 + 3];
      int32_t* cr = c + r * ldc;
      for (int64_t j = 0; j < nr; ++j) {
        const uint8_t* q = bk + j * 4;
        cr[j] += w0 * q[0] + w1 * q[1] + w2 * q[2] + w3 * q[3];
      }
    }
  }
}

#if defined(__ARM_FEATURE_DSP)

// Armv7E-M (Cortex-M4/M7) with the DSP extension: SMLAD multiplies the two signed 16-bit halves
// of two words and adds both products to an accumulator. A quad of four uint8 activations becomes
// two words with UXTB16 (bytes 0 and 2; after a rotation by 8, bytes 1 and 3) and a weight quad
// two with SXTB16, so one quad is two SMLADs. 2 channels x 2 positions per pass: four
// accumulators, the extended operands and the pointers fit the core's 13 registers.
inline int32_t Smlad(uint32_t a, uint32_t b, int32_t acc) { return __smlad(a, b, acc); }
inline uint32_t Uxtb16(uint32_t v) { return __uxtb16(v); }
inline uint32_t Sxtb16(uint32_t v) { return __sxtb16(v); }
// The extensions of bytes 1 and 3: the instruction's own rotation, which ACLE does not expose.
inline uint32_t Uxtb16Ror8(uint32_t v) {
  uint32_t out;
  __asm__("uxtb16 %0, %1, ror #8" : "=r"(out) : "r"(v));
  return out;
}
inline uint32_t Sxtb16Ror8(uint32_t v) {
  uint32_t out;
  __asm__("sxtb16 %0, %1, ror #8" : "=r"(out) : "r"(v));
  return out;
}

// Counters and strides are 32-bit: on this core a 64-bit loop index costs a register pair and
// carry arithmetic per step, which is what the generic tile loses most of its time to. A tile's
// operands are scratch and weights of one block, far below 2^31 bytes.
void TileDsp(int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, int32_t* c, int64_t ldc,
             int64_t nr) {
  const int32_t quads = static_cast<int32_t>(kq), bstride = static_cast<int32_t>(ldb) * 4;
  const int32_t cols = static_cast<int32_t>(nr), row = static_cast<int32_t>(ldc);
  for (int32_t r = 0; r < kQMR; r += 2) {
    int32_t* c0 = c + r * row;
    int32_t* c1 = c0 + row;
    for (int32_t j = 0; j < cols; j += 2) {
      int32_t c00 = 0, c01 = 0, c10 = 0, c11 = 0;
      const uint8_t* bk = b + j * 4;
      const int8_t* ak = a + r * 4;
      for (int32_t kk = quads; kk > 0; --kk) {
        uint32_t x0, x1, w0, w1;
        std::memcpy(&x0, bk, 4);
        std::memcpy(&x1, bk + 4, 4);
        std::memcpy(&w0, ak, 4);
        std::memcpy(&w1, ak + 4, 4);
        bk += bstride;
        ak += kQMR * 4;
        const uint32_t x0e = Uxtb16(x0), x0o = Uxtb16Ror8(x0);
        const uint32_t x1e = Uxtb16(x1), x1o = Uxtb16Ror8(x1);
        const uint32_t w0e = Sxtb16(w0), w0o = Sxtb16Ror8(w0);
        c00 = Smlad(x0o, w0o, Smlad(x0e, w0e, c00));
        c01 = Smlad(x1o, w0o, Smlad(x1e, w0e, c01));
        const uint32_t w1e = Sxtb16(w1), w1o = Sxtb16Ror8(w1);
        c10 = Smlad(x0o, w1o, Smlad(x0e, w1e, c10));
        c11 = Smlad(x1o, w1o, Smlad(x1e, w1e, c11));
      }
      c0[j] = c00;
      c0[j + 1] = c01;
      c1[j] = c10;
      c1[j + 1] = c11;
    }
  }
}

#endif  // __ARM_FEATURE_DSP

#if defined(__x86_64__)

// The VNNI tile's accumulation: acc[r][v] = the int32 sums of rows r, columns 16 v .. 16 v + 15.
// The accumulators are named variables, not an array: GCC 12 otherwise copies the array's
// registers around every reduction step (a vmovdqa per vpdpbusd).
template <int W>
__attribute__((target("avx512f,avx512bw,avx512vnni"), always_inline)) inline void AccumulateVnni(
    int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, __m512i (&acc)[kQMR][W]) {
  static_assert(kQMR == 8 && (W == 1 || W == 2));
  const __m512i zero = _mm512_setzero_si512();
  __m512i c00 = zero, c10 = zero, c20 = zero, c30 = zero, c40 = zero, c50 = zero, c60 = zero,
          c70 = zero;
  __m512i c01 = zero, c11 = zero, c21 = zero, c31 = zero, c41 = zero, c51 = zero, c61 = zero,
          c71 = zero;
  for (int64_t kk = 0; kk < kq; ++kk) {
    const uint8_t* bk = b + kk * ldb * 4;
    const __m512i b0 = _mm512_loadu_si512(bk);
    const __m512i b1 = W > 1 ? _mm512_loadu_si512(bk + 64) : zero;
    const int8_t* ak = a + kk * kQMR * 4;
#define CUVIL_VNNI_ROW(r)                                                \
  {                                                                      \
    int32_t quad;                                                        \
    std::memcpy(&quad, ak + (r) * 4, 4);                                 \
    const __m512i wv = _mm512_set1_epi32(quad);                          \
    c##r##0 = _mm512_dpbusd_epi32(c##r##0, b0, wv);                      \
    if constexpr (W > 1) c##r##1 = _mm512_dpbusd_epi32(c##r##1, b1, wv); \
  }
    CUVIL_VNNI_ROW(0)
    CUVIL_VNNI_ROW(1)
    CUVIL_VNNI_ROW(2)
    CUVIL_VNNI_ROW(3)
    CUVIL_VNNI_ROW(4)
    CUVIL_VNNI_ROW(5)
    CUVIL_VNNI_ROW(6)
    CUVIL_VNNI_ROW(7)
#undef CUVIL_VNNI_ROW
  }
#define CUVIL_VNNI_OUT(r) \
  acc[r][0] = c##r##0;    \
  if constexpr (W > 1) acc[r][1] = c##r##1;
  CUVIL_VNNI_OUT(0)
  CUVIL_VNNI_OUT(1)
  CUVIL_VNNI_OUT(2)
  CUVIL_VNNI_OUT(3)
  CUVIL_VNNI_OUT(4)
  CUVIL_VNNI_OUT(5)
  CUVIL_VNNI_OUT(6)
  CUVIL_VNNI_OUT(7)
#undef CUVIL_VNNI_OUT
}

// AVX-512 VNNI: one zmm holds 16 output positions; vpdpbusd adds the four uint8 x int8 products of
// each lane's quad into its int32 lane. W vectors of 16 columns, all CUVIL_UK_QMR rows.
template <int W>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void TileVnniW(int64_t kq, const int8_t* a,
                                                                      const uint8_t* b, int64_t ldb,
                                                                      int32_t* c, int64_t ldc) {
  __m512i acc[kQMR][W];
  AccumulateVnni<W>(kq, a, b, ldb, acc);
  for (int r = 0; r < kQMR; ++r) {
    for (int v = 0; v < W; ++v) _mm512_storeu_si512(c + r * ldc + v * 16, acc[r][v]);
  }
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void TileVnni(int64_t kq, const int8_t* a,
                                                                     const uint8_t* b, int64_t ldb,
                                                                     int32_t* c, int64_t ldc,
                                                                     int64_t nr) {
  int64_t j = 0;
  for (; j + 32 <= nr; j += 32) TileVnniW<2>(kq, a, b + j * 4, ldb, c + j, ldc);
  for (; j < nr; j += 16) TileVnniW<1>(kq, a, b + j * 4, ldb, c + j, ldc);
}

// AVX2: 16 bytes of b (4 positions x 4 k) widened to int16 and multiplied by the quad (widened,
// repeated) with vpmaddwd: each int32 lane holds the sum of two products (|sum| <= 2 * 255 * 128,
// no saturation), two lanes per position, added pairwise at the end. 8 positions x 4 rows per
// pass (8 accumulators); the panel's 8 rows take two passes.
__attribute__((target("avx2"))) void TileAvx2Rows4(int64_t kq, const int8_t* a, const uint8_t* b,
                                                   int64_t ldb, int32_t* c, int64_t ldc) {
  __m256i lo[4], hi[4];
  for (int r = 0; r < 4; ++r) lo[r] = hi[r] = _mm256_setzero_si256();
  for (int64_t kk = 0; kk < kq; ++kk) {
    const uint8_t* bk = b + kk * ldb * 4;
    const __m256i b0 = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bk)));
    const __m256i b1 =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bk + 16)));
    const int8_t* ak = a + kk * kQMR * 4;
    for (int r = 0; r < 4; ++r) {
      int32_t quad;
      std::memcpy(&quad, ak + r * 4, 4);
      const __m256i wv = _mm256_cvtepi8_epi16(_mm_set1_epi32(quad));
      lo[r] = _mm256_add_epi32(lo[r], _mm256_madd_epi16(b0, wv));
      hi[r] = _mm256_add_epi32(hi[r], _mm256_madd_epi16(b1, wv));
    }
  }
  for (int r = 0; r < 4; ++r) {
    // hadd: lane 0 = positions 0 1 4 5, lane 1 = 2 3 6 7; the permute puts them in order.
    const __m256i sum = _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo[r], hi[r]), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * ldc), sum);
  }
}

__attribute__((target("avx2"))) void TileAvx2(int64_t kq, const int8_t* a, const uint8_t* b,
                                              int64_t ldb, int32_t* c, int64_t ldc, int64_t nr) {
  for (int64_t j = 0; j < nr; j += 8) {
    TileAvx2Rows4(kq, a, b + j * 4, ldb, c + j, ldc);
    TileAvx2Rows4(kq, a + 16, b + j * 4, ldb, c + 4 * ldc + j, ldc);
  }
}

#endif  // __x86_64__

// Bytes of im2col B kept per block (with the weights streaming, about an L2's share).
constexpr int64_t kBlockBytes = 192 * 1024;

enum Slot { kSlotB, kSlotRow, kSlotTile, kNumSlots };

uint8_t* Scratch(Slot slot, size_t bytes) {
  thread_local ThreadBuffer buffers[kNumSlots];
  return reinterpret_cast<uint8_t*>(buffers[slot].Get((bytes + 3) / 4));
}

// d[4 j + t] = r_t[j] ^ flip for j < n: four reduction rows interleaved into k-quads.
void Interleave4(const uint8_t* r0, const uint8_t* r1, const uint8_t* r2, const uint8_t* r3,
                 uint8_t flip, int64_t n, uint8_t* d) {
  int64_t j = 0;
#if defined(__SSE2__)
  const __m128i f = _mm_set1_epi8(static_cast<char>(flip));
  auto load = [&](const uint8_t* r) {
    return _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r + j)), f);
  };
  for (; j + 16 <= n; j += 16) {
    const __m128i a = load(r0), b = load(r1), c = load(r2), e = load(r3);
    const __m128i ab_lo = _mm_unpacklo_epi8(a, b), ab_hi = _mm_unpackhi_epi8(a, b);
    const __m128i ce_lo = _mm_unpacklo_epi8(c, e), ce_hi = _mm_unpackhi_epi8(c, e);
    __m128i* out = reinterpret_cast<__m128i*>(d + j * 4);
    _mm_storeu_si128(out, _mm_unpacklo_epi16(ab_lo, ce_lo));
    _mm_storeu_si128(out + 1, _mm_unpackhi_epi16(ab_lo, ce_lo));
    _mm_storeu_si128(out + 2, _mm_unpacklo_epi16(ab_hi, ce_hi));
    _mm_storeu_si128(out + 3, _mm_unpackhi_epi16(ab_hi, ce_hi));
  }
#endif
  for (; j < n; ++j) {
    d[j * 4] = r0[j] ^ flip;
    d[j * 4 + 1] = r1[j] ^ flip;
    d[j * 4 + 2] = r2[j] ^ flip;
    d[j * 4 + 3] = r3[j] ^ flip;
  }
}

// FillBlock for stride 1: copies the input rows the block reads, zero padded (reading `pad`) and
// flipped, into `plane` ([C][plane_rows][wp]), then interleaves contiguous runs of it. `pads`
// holds at least ldb bytes for the reduction rows past k.
void FillBlockPadded(const cuvil_uk_conv_params& p, const uint8_t* x, uint8_t flip, uint8_t pad,
                     int64_t oy0, int64_t oy1, int64_t plane_rows, int64_t wp, int64_t kq,
                     int64_t ldb, uint8_t* b, uint8_t* plane, uint8_t* pads) {
  const int64_t need = (oy1 - oy0) + (p.kernel_h - 1) * p.dilation_h;
  const int64_t c_plane = plane_rows * wp;
  // Columns of a padded row that hold input: ix = i - pad_left in [0, W).
  const int64_t i0 = std::clamp<int64_t>(p.pad_left, 0, wp);
  const int64_t i1 = std::clamp<int64_t>(p.pad_left + p.width, i0, wp);
  for (int64_t c = 0; c < p.channels; ++c) {
    for (int64_t i = 0; i < need; ++i) {
      uint8_t* row = plane + c * c_plane + i * wp;
      const int64_t iy = oy0 + i - p.pad_top;
      if (iy < 0 || iy >= p.height || i0 >= i1) {
        std::memset(row, pad, wp);
        continue;
      }
      const uint8_t* src = x + (c * p.height + iy) * p.width + (i0 - p.pad_left);
      std::memset(row, pad, i0);
      for (int64_t j = 0; j < i1 - i0; ++j) row[i0 + j] = src[j] ^ flip;
      std::memset(row + i1, pad, wp - i1);
    }
  }
  std::memset(plane + p.channels * c_plane, pad, wp + 64);
  std::memset(pads, pad, ldb);
  const int64_t k = p.channels * p.kernel_h * p.kernel_w;
  for (int64_t kk = 0; kk < kq; ++kk) {
    const uint8_t* r[4];
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t rr = kk * 4 + t;
      if (rr >= k) {
        r[t] = pads;
        continue;
      }
      const int64_t ch = rr / (p.kernel_h * p.kernel_w);
      const int64_t ky = rr / p.kernel_w % p.kernel_h, kx = rr % p.kernel_w;
      r[t] = plane + ch * c_plane + ky * p.dilation_h * wp + kx * p.dilation_w;
    }
    Interleave4(r[0], r[1], r[2], r[3], 0, ldb, b + kk * ldb * 4);
  }
}

// FillBlock for a 1x1, stride-1, unpadded conv: B's rows are x's channel planes.
void FillBlockDirect(const cuvil_uk_conv_params& p, const uint8_t* x, uint8_t flip, uint8_t pad,
                     int64_t oy0, int64_t oy1, int64_t kq, int64_t ldb, uint8_t* b) {
  const int64_t plane = p.height * p.width, col0 = oy0 * p.width;
  const int64_t cols = (oy1 - oy0) * p.width;
  for (int64_t kk = 0; kk < kq; ++kk) {
    const uint8_t* r[4];
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t c = kk * 4 + t;
      r[t] = c < p.channels ? x + c * plane + col0 : nullptr;  // past k: never read
    }
    uint8_t* dst = b + kk * ldb * 4;
    if (kk * 4 + 3 < p.channels) {
      Interleave4(r[0], r[1], r[2], r[3], flip, cols, dst);
    } else {
      for (int64_t j = 0; j < cols; ++j) {
        for (int64_t t = 0; t < 4; ++t) {
          dst[j * 4 + t] = kk * 4 + t < p.channels ? r[t][j] ^ flip : pad;
        }
      }
    }
    std::memset(dst + cols * 4, pad, (ldb - cols) * 4);
  }
}

// One block: output rows [oy0, oy1) of image x (uint8 view; `flip` = 0x80 for int8 inputs).
// Fills b ([kq][ldb][4]) with the block's im2col; columns past the block's read `pad`.
void FillBlock(const QTable& table, const cuvil_uk_conv_params& p, const uint8_t* x, uint8_t flip,
               uint8_t pad, int64_t oy0, int64_t oy1, int64_t kq, int64_t ldb, uint8_t* b,
               uint8_t* rows) {
  const int64_t k = p.channels * p.kernel_h * p.kernel_w;
  const int64_t ow = p.out_width;
  const int64_t cols = (oy1 - oy0) * ow;
  for (int64_t kk = 0; kk < kq; ++kk) {
    uint8_t* dst = b + kk * ldb * 4;
    // The quad's reduction rows as (channel, ky, kx), worked out once per quad rather than per
    // output row (on a 32-bit core each 64-bit division is a library call).
    int64_t tap_ch[4], tap_ky[4], tap_kx[4];
    for (int64_t t = 0; t < 4; ++t) {
      const int64_t r = kk * 4 + t;
      tap_ch[t] = r / (p.kernel_h * p.kernel_w);
      tap_ky[t] = r / p.kernel_w % p.kernel_h;
      tap_kx[t] = r % p.kernel_w;
    }
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      // rows[t * ow + ox]: reduction row 4 kk + t at output (oy, ox).
      for (int64_t t = 0; t < 4; ++t) {
        uint8_t* row = rows + t * ow;
        const int64_t r = kk * 4 + t;
        if (r >= k) {
          std::memset(row, pad, ow);
          continue;
        }
        const int64_t ch = tap_ch[t], ky = tap_ky[t], kx = tap_kx[t];
        const int64_t iy = oy * p.stride_h - p.pad_top + ky * p.dilation_h;
        if (iy < 0 || iy >= p.height) {
          std::memset(row, pad, ow);
          continue;
        }
        const uint8_t* src = x + (ch * p.height + iy) * p.width;
        // Output columns whose input column ox * SW - PL + kx * DW lies in [0, W).
        const int64_t off = kx * p.dilation_w - p.pad_left;
        int64_t ox0 = off >= 0 ? 0 : CeilDiv(-off, p.stride_w);
        int64_t ox1 = p.width - off <= 0 ? 0 : CeilDiv(p.width - off, p.stride_w);
        ox0 = std::min(ox0, ow);
        ox1 = std::clamp(ox1, ox0, ow);
        std::memset(row, pad, ox0);
        if (p.stride_w == 1) {
          const uint8_t* s = src + off;
          for (int64_t ox = ox0; ox < ox1; ++ox) row[ox] = s[ox] ^ flip;
        } else if (p.stride_w == 2 && table.gather_even != nullptr && ox1 > ox0) {
          table.gather_even(src + ox0 * 2 + off, ox1 - ox0, flip, row + ox0);
        } else {
          for (int64_t ox = ox0; ox < ox1; ++ox) row[ox] = src[ox * p.stride_w + off] ^ flip;
        }
        std::memset(row + ox1, pad, ow - ox1);
      }
      Interleave4(rows, rows + ow, rows + 2 * ow, rows + 3 * ow, 0, ow, dst + (oy - oy0) * ow * 4);
    }
    std::memset(dst + cols * 4, pad, (ldb - cols) * 4);
  }
}

// v clamped to [lo, hi] (integers, |lo|, |hi| < 2^22) and rounded half to even: adding and
// subtracting 1.5 * 2^23 rounds in the current (nearest-even) mode, and vectorises where
// nearbyint does not.
inline float ClampRound(float v, float lo, float hi) {
  constexpr float kMagic = 12582912.0f;
  v = std::min(std::max(v, lo), hi);
  return (v + kMagic) - kMagic;
}

// Stores one tile row: n values of one output channel from acc into y, residual and y already
// offset to the row's first element.
void StoreRow(const cuvil_uk_qconv_params& qp, const int32_t* acc, int64_t n, int32_t comp,
              float mult, float bias, const float* residual, void* y, float lo, float hi) {
  if (qp.out_type == CUVIL_UK_QOUT_S32) {
    int32_t* dst = static_cast<int32_t*>(y);
    for (int64_t j = 0; j < n; ++j) dst[j] = acc[j] - comp;
  } else if (qp.out_type == CUVIL_UK_QOUT_FLOAT) {
    float* dst = static_cast<float*>(y);
    for (int64_t j = 0; j < n; ++j) {
      float v = static_cast<float>(acc[j] - comp) * mult + bias;
      if (residual != nullptr) v += residual[j];
      dst[j] = std::min(std::max(v, lo), hi);
    }
  } else if (qp.out_type == CUVIL_UK_QOUT_U8) {
    uint8_t* dst = static_cast<uint8_t*>(y);
    for (int64_t j = 0; j < n; ++j) {
      const float v = static_cast<float>(acc[j] - comp) * mult + bias;
      dst[j] = static_cast<uint8_t>(static_cast<int32_t>(ClampRound(v, lo, hi)));
    }
  } else {
    int8_t* dst = static_cast<int8_t*>(y);
    for (int64_t j = 0; j < n; ++j) {
      const float v = static_cast<float>(acc[j] - comp) * mult + bias;
      dst[j] = static_cast<int8_t>(static_cast<int32_t>(ClampRound(v, lo, hi)));
    }
  }
}

#if defined(__ARM_FEATURE_DSP)
// StoreRow for 8-bit outputs with 32-bit indices and (with FPv5) VMAXNM/VMINNM for the clamp:
// the same values (v is never NaN here); other output types go to StoreRow.
template <typename Q>
void StoreRow8Dsp(const int32_t* acc, int32_t n, int32_t comp, float mult, float bias, Q* dst,
                  float lo, float hi) {
  constexpr float kMagic = 12582912.0f;
  for (int32_t j = 0; j < n; ++j) {
    float v = static_cast<float>(acc[j] - comp) * mult + bias;
#if defined(CUVIL_HAVE_VMAXNM)
    v = __builtin_fminf(__builtin_fmaxf(v, lo), hi);
#else
    v = std::min(std::max(v, lo), hi);
#endif
    dst[j] = static_cast<Q>(static_cast<int32_t>((v + kMagic) - kMagic));
  }
}

void StoreRowDsp(const cuvil_uk_qconv_params& qp, const int32_t* acc, int64_t n, int32_t comp,
                 float mult, float bias, const float* residual, void* y, float lo, float hi) {
  if (qp.out_type == CUVIL_UK_QOUT_U8) {
    StoreRow8Dsp(acc, static_cast<int32_t>(n), comp, mult, bias, static_cast<uint8_t*>(y), lo, hi);
  } else if (qp.out_type == CUVIL_UK_QOUT_S8) {
    StoreRow8Dsp(acc, static_cast<int32_t>(n), comp, mult, bias, static_cast<int8_t*>(y), lo, hi);
  } else {
    StoreRow(qp, acc, n, comp, mult, bias, residual, y, lo, hi);
  }
}

#endif  // __ARM_FEATURE_DSP

#if defined(__x86_64__)
// StoreRow with 16 lanes: the same operations in the same order (no FMA), so every tier writes
// the same values; cvtps rounds half to even in the default mode.
__attribute__((target("avx512f,avx512bw"))) void StoreRowAvx512(const cuvil_uk_qconv_params& qp,
                                                                const int32_t* acc, int64_t n,
                                                                int32_t comp, float mult,
                                                                float bias, const float* residual,
                                                                void* y, float lo, float hi) {
  const __m512i c = _mm512_set1_epi32(comp);
  const __m512 mv = _mm512_set1_ps(mult), bv = _mm512_set1_ps(bias);
  const __m512 lov = _mm512_set1_ps(lo), hiv = _mm512_set1_ps(hi);
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 mask = n - j >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << (n - j)) - 1);
    const __m512i a = _mm512_maskz_loadu_epi32(mask, acc + j);
    if (qp.out_type == CUVIL_UK_QOUT_S32) {
      _mm512_mask_storeu_epi32(static_cast<int32_t*>(y) + j, mask, _mm512_sub_epi32(a, c));
      continue;
    }
    __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, c)), mv), bv);
    if (qp.out_type == CUVIL_UK_QOUT_FLOAT) {
      if (residual != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + j));
      v = _mm512_min_ps(_mm512_max_ps(v, lov), hiv);
      _mm512_mask_storeu_ps(static_cast<float*>(y) + j, mask, v);
      continue;
    }
    const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lov), hiv));
    if (qp.out_type == CUVIL_UK_QOUT_U8) {
      _mm512_mask_cvtusepi32_storeu_epi8(static_cast<uint8_t*>(y) + j, mask, q);
    } else {
      _mm512_mask_cvtsepi32_storeu_epi8(static_cast<int8_t*>(y) + j, mask, q);
    }
  }
}

// StoreRowAvx512's epilogue on the 16 accumulators of `a` (lanes past `mask` untouched), for one
// output channel: the same operations in the same order.
__attribute__((target("avx512f,avx512bw"))) inline void Epilogue16(int64_t out_type, __m512i a,
                                                                   __mmask16 mask, __m512i c,
                                                                   __m512 mv, __m512 bv, __m512 lov,
                                                                   __m512 hiv,
                                                                   const float* residual, void* y) {
  if (out_type == CUVIL_UK_QOUT_S32) {
    _mm512_mask_storeu_epi32(static_cast<int32_t*>(y), mask, _mm512_sub_epi32(a, c));
    return;
  }
  __m512 v = _mm512_add_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a, c)), mv), bv);
  if (out_type == CUVIL_UK_QOUT_FLOAT) {
    if (residual != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual));
    v = _mm512_min_ps(_mm512_max_ps(v, lov), hiv);
    _mm512_mask_storeu_ps(static_cast<float*>(y), mask, v);
    return;
  }
  const __m512i q = _mm512_cvtps_epi32(_mm512_min_ps(_mm512_max_ps(v, lov), hiv));
  if (out_type == CUVIL_UK_QOUT_U8) {
    _mm512_mask_cvtusepi32_storeu_epi8(static_cast<uint8_t*>(y), mask, q);
  } else {
    _mm512_mask_cvtsepi32_storeu_epi8(static_cast<int8_t*>(y), mask, q);
  }
}

// QTable::gather_even: 64 bytes are 32 pairs whose even bytes are the low halves of 16-bit lanes;
// the load leaves out the 64th byte, which the last pair may not have.
__attribute__((target("avx512f,avx512bw"))) void GatherEvenAvx512(const uint8_t* src, int64_t n,
                                                                  uint8_t flip, uint8_t* dst) {
  const __m256i f = _mm256_set1_epi8(static_cast<char>(flip));
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512i pairs = _mm512_maskz_loadu_epi8(~(__mmask64{1} << 63), src + 2 * i);
    const __m256i even = _mm512_cvtepi16_epi8(pairs);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_xor_si256(even, f));
  }
  for (; i < n; ++i) dst[i] = src[2 * i] ^ flip;
}

// TileVnniW with the epilogue applied from registers: no int32 tile in memory and no call per
// row, which is what small-K (pointwise) convolutions spend most of their time on otherwise. The
// lanes of each 16-column vector fall into runs of consecutive output positions (one run, or
// several where a vector crosses the end of a padded row); each run is one masked store whose
// base is shifted so that lane L lands on its position.
template <int W>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void TileStoreVnniW(
    int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, int64_t n, int64_t rows,
    const QEpilogue& e) {
  __m512i acc[kQMR][W];
  AccumulateVnni<W>(kq, a, b, ldb, acc);
  // Runs of lanes: lane L of vector v is position L + shift.
  struct Run {
    __mmask16 mask;
    int64_t shift;
    int v;
  };
  Run runs[W * 16];
  int count = 0;
  for (int v = 0; v < W; ++v) {
    const int64_t base = e.q0 + v * 16, end = e.q0 + std::min<int64_t>(n, (v + 1) * 16);
    if (e.wr == e.ow) {  // No dropped columns: position q is output q, one run, no division.
      if (end > base) {
        const auto last = static_cast<uint32_t>(end - base);
        runs[count++] = {static_cast<__mmask16>(last >= 16 ? 0xFFFFu : (1u << last) - 1), base, v};
      }
      continue;
    }
    for (int64_t q = base; q < end;) {
      const int64_t row = q / e.wr, col = q % e.wr;
      if (col >= e.ow) {
        q = (row + 1) * e.wr;
        continue;
      }
      const int64_t stop = std::min(end, row * e.wr + e.ow);
      const auto first = static_cast<uint32_t>(q - base), last = static_cast<uint32_t>(stop - base);
      const uint32_t bits = (last >= 16 ? 0xFFFFu : (1u << last) - 1) & ~((1u << first) - 1);
      runs[count++] = {static_cast<__mmask16>(bits), row * e.ow + col - (q - base), v};
      q = stop;
    }
  }
  const int64_t out_type = e.params->out_type;
  const size_t out_bytes = out_type == CUVIL_UK_QOUT_FLOAT || out_type == CUVIL_UK_QOUT_S32 ? 4 : 1;
  const __m512 lov = _mm512_set1_ps(e.lo), hiv = _mm512_set1_ps(e.hi);
  const auto y0 = reinterpret_cast<uintptr_t>(e.y);
  const auto res0 = reinterpret_cast<uintptr_t>(e.residual);
  for (int r = 0; r < kQMR && r < rows; ++r) {
    const __m512i c = _mm512_set1_epi32(e.comp[r]);
    const __m512 mv = _mm512_set1_ps(e.mult[r]), bias = _mm512_set1_ps(e.bias[r]);
    const int64_t row = r * e.channel_stride;
    for (int i = 0; i < count; ++i) {
      // Integer addresses: the shifted base may lie before the buffer; masked lanes never touch it.
      const int64_t at = row + runs[i].shift;
      Epilogue16(out_type, acc[r][runs[i].v], runs[i].mask, c, mv, bias, lov, hiv,
                 e.residual != nullptr
                     ? reinterpret_cast<const float*>(res0 + static_cast<uintptr_t>(at * 4))
                     : nullptr,
                 reinterpret_cast<void*>(y0 + static_cast<uintptr_t>(at) * out_bytes));
    }
  }
}

__attribute__((target("avx512f,avx512bw,avx512vnni"))) void TileStoreVnni(
    int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, int64_t nr, int64_t n, int64_t rows,
    const QEpilogue& e) {
  if (nr > 16) {
    TileStoreVnniW<2>(kq, a, b, ldb, n, rows, e);
  } else {
    TileStoreVnniW<1>(kq, a, b, ldb, n, rows, e);
  }
}
#endif

}  // namespace

const QTable& QGenericTable() {
  static const QTable table = {"generic", 16, TileGeneric, StoreRow, nullptr, nullptr};
  return table;
}

#if defined(__ARM_FEATURE_DSP)
const QTable* QDspTable() {
  static const QTable table = {"armv7em_dsp", 16, TileDsp, StoreRowDsp, nullptr, nullptr};
  return &table;
}
#endif

#if defined(__x86_64__)
const QTable* QAvx2Table() {
  static const QTable table = {"avx2", 16, TileAvx2, StoreRow, nullptr, nullptr};
  return &table;
}
const QTable* QVnniTable() {
  static const QTable table = {"avx512_vnni",   32, TileVnni, StoreRowAvx512, TileStoreVnni,
                               GatherEvenAvx512};
  return &table;
}
#else
const QTable* QAvx2Table() { return nullptr; }
const QTable* QVnniTable() { return nullptr; }
#endif

TierList<QTable> SupportedQTables() {
  TierList<QTable> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vnni")) {
    out.push_back(QVnniTable());
  }
  if (__builtin_cpu_supports("avx2")) out.push_back(QAvx2Table());
#endif
#if defined(__ARM_FEATURE_DSP)
  out.push_back(QDspTable());
#endif
  out.push_back(&QGenericTable());
  return out;
}

const QTable& ActiveQTable() {
  static const QTable* table = [] {
    const TierList<QTable> tables = SupportedQTables();
#if defined(CUVIL_AOT_BARE_METAL)
    const char* forced = nullptr;  // no environment on a microcontroller
#else
    const char* forced = std::getenv("CUVIL_UK_TIER");
#endif
    std::string_view want = forced != nullptr ? forced : "";
    if (want == "avx2" || want == "avx2_fma") want = "avx2";
    if (want == "avx2" || want == "generic") {
      for (const QTable* t : tables) {
        if (want == t->name) return t;
      }
    }
    return tables.front();
  }();
  return *table;
}

namespace {

// How QConv2d blocks one image: output rows per block and the B layout of a block.
struct QConvBlocks {
  int64_t k, kq;        // reduction rows, and quads of them
  bool direct, padded;  // see QConv2d
  int64_t wp, wr;       // padded row width; B's row width (wp or ow)
  int64_t rows_per_block, blocks, plane_rows;
  int64_t max_ldb;       // B columns of the widest block
  int64_t padded_bytes;  // the padded copy (0 unless padded)
  // The per-thread scratch: B, the row (or padded copy) buffer and the int32 tile.
  int64_t b_bytes() const { return kq * max_ldb * 4; }
  int64_t row_bytes(int64_t ow) const { return std::max(4 * ow, padded_bytes + max_ldb); }
  static int64_t tile_bytes(const QTable& t) { return kQMR * t.nr * 4; }
};

QConvBlocks PlanQConvBlocks(const QTable& t, const cuvil_uk_conv_params& p) {
  QConvBlocks b;
  b.k = p.channels * p.kernel_h * p.kernel_w;
  b.kq = CeilDiv(b.k, 4);
  const int64_t ow = p.out_width, oh = p.out_height;
  b.direct = p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
             p.pad_top == 0 && p.pad_left == 0 && oh == p.height && ow == p.width;
  // Stride 1: B's columns are laid out with the padded input's row width wp >= ow, so every
  // reduction row of a block is one contiguous run of a zero-padded copy of the input rows it
  // reads (columns ox >= ow are computed and dropped). Otherwise columns are (oy, ox), ow wide.
  b.padded = !b.direct && p.stride_h == 1 && p.stride_w == 1;
  b.wp = (ow - 1) + (p.kernel_w - 1) * p.dilation_w + 1;
  const int64_t halo = (p.kernel_h - 1) * p.dilation_h;  // extra padded rows a block reads
  b.wr = b.padded ? b.wp : ow;
  // Output rows per block: as many as fit kBlockBytes of B, at least one.
  const int64_t want_cols = std::max<int64_t>(t.nr, kBlockBytes / std::max<int64_t>(b.kq * 4, 1));
  b.rows_per_block = std::clamp<int64_t>(want_cols / b.wr, 1, oh);
  b.blocks = CeilDiv(oh, b.rows_per_block);
  b.max_ldb = CeilDiv(b.rows_per_block * b.wr, 16) * 16;
  // The padded copy: per channel (rows_per_block + halo) rows of wp, then slack for the reads of
  // the last channel's ragged tail (up to 16 columns past the block and kx * DW).
  b.plane_rows = b.rows_per_block + halo;
  b.padded_bytes = b.padded ? p.channels * b.plane_rows * b.wp + b.wp + 64 : 0;
  return b;
}

}  // namespace

int64_t QConv2dScratchBytes(const QTable& t, const cuvil_uk_qconv_params& qp) {
  const cuvil_uk_conv_params& p = qp.conv;
  if (p.out_height <= 0 || p.out_width <= 0 || p.out_channels <= 0) return 0;
  const QConvBlocks b = PlanQConvBlocks(t, p);
  ScratchTally s;  // Scratch() rounds each request up to whole floats
  s.AddFloats((b.b_bytes() + 3) / 4);
  s.AddFloats((b.row_bytes(p.out_width) + 3) / 4);
  s.AddFloats((QConvBlocks::tile_bytes(t) + 3) / 4);
  return s.bytes();
}

void QConv2d(const QTable& t, const cuvil_uk_qconv_params& qp, const void* x, const int8_t* w,
             const int32_t* comp, const float* mult, const float* bias, const float* residual,
             void* y, int64_t batch, float lo, float hi) {
  const cuvil_uk_conv_params& p = qp.conv;
  if (batch <= 0 || p.out_height <= 0 || p.out_width <= 0 || p.out_channels <= 0) return;
  const QConvBlocks plan = PlanQConvBlocks(t, p);
  const int64_t k = plan.k, kq = plan.kq;
  const int64_t ow = p.out_width, oh = p.out_height, m = p.out_channels;
  const int64_t panels = CeilDiv(m, kQMR);
  const bool direct = plan.direct, padded = plan.padded;
  const bool mean = qp.out_type == CUVIL_UK_QOUT_FLOAT_MEAN;
  const int64_t wp = plan.wp, wr = plan.wr;
  const int64_t rows_per_block = plan.rows_per_block, blocks = plan.blocks;
  const int64_t in_plane = p.channels * p.height * p.width, out_plane = m * oh * ow;
  const uint8_t flip = qp.x_signed != 0 ? 0x80 : 0;
  const uint8_t pad = static_cast<uint8_t>(static_cast<uint8_t>(qp.x_zero) ^ flip);
  const int64_t cost = std::max<int64_t>(1, rows_per_block * ow * k * m / kMinWorkPerThread);
  const int64_t plane_rows = plan.plane_rows, padded_bytes = plan.padded_bytes;
  const size_t out_bytes =
      qp.out_type == CUVIL_UK_QOUT_FLOAT || qp.out_type == CUVIL_UK_QOUT_S32 || mean ? 4 : 1;
  cuvil_uk_qconv_params float_qp = qp;  // the fused average's values: the float output's
  float_qp.out_type = CUVIL_UK_QOUT_FLOAT;
  constexpr int64_t kMeanChunk = 64;
  // One block of one image, with the calling thread's scratch.
  auto run = [&](int64_t item, uint8_t* b, uint8_t* rows, int32_t* tile) {
    const int64_t img = item / blocks, blk = item % blocks;
    const int64_t oy0 = blk * rows_per_block, oy1 = std::min(oh, oy0 + rows_per_block);
    const int64_t cols = (oy1 - oy0) * wr;
    const int64_t ldb = CeilDiv(cols, 16) * 16;
    const uint8_t* xi = static_cast<const uint8_t*>(x) + img * in_plane;
    if (direct) {
      FillBlockDirect(p, xi, flip, pad, oy0, oy1, kq, ldb, b);
    } else if (padded) {
      FillBlockPadded(p, xi, flip, pad, oy0, oy1, plane_rows, wp, kq, ldb, b, rows,
                      rows + padded_bytes);
    } else {
      FillBlock(t, p, xi, flip, pad, oy0, oy1, kq, ldb, b, rows);
    }
    for (int64_t pp = 0; pp < panels; ++pp) {
      const int8_t* a = w + pp * kq * kQMR * 4;
      const int64_t rows_here = std::min(kQMR, m - pp * kQMR);
      for (int64_t j = 0; j < ldb; j += t.nr) {
        const int64_t nr = std::min(t.nr, ldb - j);
        const int64_t n = std::min(nr, cols - j);
        if (t.tile_store != nullptr && !mean) {
          const int64_t ch = pp * kQMR;
          const int64_t at = img * out_plane + ch * oh * ow + oy0 * ow;
          const QEpilogue e{&qp,
                            comp + ch,
                            mult + ch,
                            bias + ch,
                            residual != nullptr ? residual + at : nullptr,
                            static_cast<uint8_t*>(y) + at * out_bytes,
                            oh * ow,
                            j,
                            wr,
                            ow,
                            lo,
                            hi};
          if (n > 0) t.tile_store(kq, a, b + j * 4, ldb, nr, n, rows_here, e);
          continue;
        }
        t.tile(kq, a, b + j * 4, ldb, tile, t.nr, nr);
        for (int64_t r = 0; r < rows_here; ++r) {
          const int64_t ch = pp * kQMR + r;
          const int64_t row0 = img * out_plane + ch * oh * ow + oy0 * ow;
          if (wr == ow && !mean) {  // every column is an output: position q is row0 + q
            if (n > 0) {
              t.store(qp, tile + r * t.nr, n, comp[ch], mult[ch], bias[ch],
                      residual != nullptr ? residual + row0 + j : nullptr,
                      static_cast<uint8_t*>(y) + (row0 + j) * out_bytes, lo, hi);
            }
            continue;
          }
          // Segments of the tile's columns [j, j + n) that are output positions.
          for (int64_t q = j; q < j + n;) {
            const int64_t oyr = q / wr, ox = q % wr;
            const int64_t seg = wr == ow ? j + n - q : std::min(j + n, oyr * wr + ow) - q;
            if (ox < ow && seg > 0) {
              const int32_t* acc = tile + r * t.nr + (q - j);
              if (mean) {
                // The tier's own float epilogue (so the mean is exactly that of the float
                // output it would write), then added in position order.
                for (int64_t s0 = 0; s0 < seg; s0 += kMeanChunk) {
                  const int64_t len = std::min(kMeanChunk, seg - s0);
                  float vals[kMeanChunk];
                  t.store(float_qp, acc + s0, len, comp[ch], mult[ch], bias[ch], nullptr, vals, lo,
                          hi);
                  float& sum = static_cast<float*>(y)[img * m + ch];
                  for (int64_t i = 0; i < len; ++i) sum += vals[i];
                }
              } else {
                const int64_t at = row0 + oyr * ow + ox;
                t.store(qp, acc, seg, comp[ch], mult[ch], bias[ch],
                        residual != nullptr ? residual + at : nullptr,
                        static_cast<uint8_t*>(y) + at * out_bytes, lo, hi);
              }
            }
            q = wr == ow ? j + n : (oyr + 1) * wr;
          }
        }
      }
    }
  };
  auto scratch = [&](uint8_t** b, uint8_t** rows, int32_t** tile) {
    *b = Scratch(kSlotB, static_cast<size_t>(plan.b_bytes()));
    *rows = Scratch(kSlotRow, static_cast<size_t>(plan.row_bytes(ow)));
    *tile = reinterpret_cast<int32_t*>(
        Scratch(kSlotTile, static_cast<size_t>(QConvBlocks::tile_bytes(t))));
  };
  if (mean) {
    // An image's blocks add into the same sums: one task per image, its blocks in order.
    ParallelFor(batch, cost * blocks, [&](int64_t begin, int64_t end) {
      uint8_t *b, *rows;
      int32_t* tile;
      scratch(&b, &rows, &tile);
      for (int64_t img = begin; img < end; ++img) {
        float* sums = static_cast<float*>(y) + img * m;
        for (int64_t c = 0; c < m; ++c) sums[c] = 0.0f;
        for (int64_t blk = 0; blk < blocks; ++blk) run(img * blocks + blk, b, rows, tile);
        const float count = static_cast<float>(oh * ow);
        for (int64_t c = 0; c < m; ++c) sums[c] /= count;
      }
    });
    return;
  }
  ParallelFor(batch * blocks, cost, [&](int64_t begin, int64_t end) {
    uint8_t *b, *rows;
    int32_t* tile;
    scratch(&b, &rows, &tile);
    for (int64_t item = begin; item < end; ++item) run(item, b, rows, tile);
  });
}

}  // namespace cuvil::uk

extern "C" {

int64_t cuvil_uk_qconv_weights_size(int64_t m, int64_t k) {
  if (m < 0 || k < 0) return -1;
  const int64_t panels = (m + CUVIL_UK_QMR - 1) / CUVIL_UK_QMR, quads = (k + 3) / 4;
  int64_t out = 0;
  if (__builtin_mul_overflow(panels, quads, &out) ||
      __builtin_mul_overflow(out, CUVIL_UK_QMR * 4, &out)) {
    return -1;
  }
  return out;
}

void cuvil_uk_pack_qconv_weights(const int8_t* w, int64_t m, int64_t k, int8_t* packed,
                                 int32_t* sums) {
  const int64_t panels = (m + CUVIL_UK_QMR - 1) / CUVIL_UK_QMR, quads = (k + 3) / 4;
  for (int64_t pp = 0; pp < panels; ++pp) {
    int8_t* dst = packed + pp * quads * CUVIL_UK_QMR * 4;
    for (int64_t kk = 0; kk < quads; ++kk) {
      for (int64_t r = 0; r < CUVIL_UK_QMR; ++r) {
        for (int64_t t = 0; t < 4; ++t) {
          const int64_t row = pp * CUVIL_UK_QMR + r, col = kk * 4 + t;
          dst[(kk * CUVIL_UK_QMR + r) * 4 + t] = row < m && col < k ? w[row * k + col] : 0;
        }
      }
    }
  }
  if (sums != nullptr) {
    for (int64_t row = 0; row < m; ++row) {
      int32_t s = 0;
      for (int64_t col = 0; col < k; ++col) s += w[row * k + col];
      sums[row] = s;
    }
  }
}

void cuvil_uk_qconv2d(const cuvil_uk_qconv_params* p, const void* x, const int8_t* w,
                      const int32_t* comp, const float* mult, const float* bias,
                      const float* residual, void* y, int64_t batch, float lo, float hi) {
  cuvil::uk::MicrokernelScratchScope scratch;
  cuvil::uk::QConv2d(cuvil::uk::ActiveQTable(), *p, x, w, comp, mult, bias, residual, y, batch, lo,
                     hi);
}

const char* cuvil_uk_qtier() { return cuvil::uk::ActiveQTable().name; }

}  // extern "C"
