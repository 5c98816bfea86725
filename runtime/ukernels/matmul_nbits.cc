// 4-bit block-quantized matrix products (MatMulNBits): the weights stay packed two to a byte and
// are widened to float in registers, so a weight-bound product (a classifier or a language
// model's projection at batch 1) reads an eighth of the bytes of its float32 form.
//
// Weights are packed at compile time into groups of 16 output columns (cuvil_uk_nbits_pack): one
// 16-byte row holds weights k and k + 1 of every column of the group, so a vector of 16 columns
// widens from one load and each activation is a broadcast; no horizontal sums. With w = q * scale +
// offset per block, y[r][n] = sum_b scale_b * (a_rb . q_b) + sum_b offset_b * (sum of a_rb): the
// block sums of `a` are computed once per call and the offsets folded in per block.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "call_scratch.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "scratch_sizes.h"
#include "thread_buffer.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

constexpr int64_t kGroup = CUVIL_UK_NBITS_GROUP;

void GroupGeneric(const float* a, int64_t lda, int64_t rows, const uint8_t* q4, const float* scale,
                  const float* offset, const float* sums, int64_t blocks, int64_t block,
                  float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* ar = a + r * lda;
    float* o = out + r * kGroup;
    for (int64_t j = 0; j < kGroup; ++j) o[j] = 0;
    for (int64_t b = 0; b < blocks; ++b) {
      float acc[kGroup] = {};
      for (int64_t kp = b * block / 2; kp < (b + 1) * block / 2; ++kp) {
        const uint8_t* row = q4 + kp * kGroup;
        for (int64_t j = 0; j < kGroup; ++j) {
          acc[j] += ar[2 * kp] * static_cast<float>(row[j] & 0x0F) +
                    ar[2 * kp + 1] * static_cast<float>(row[j] >> 4);
        }
      }
      const float s = sums[r * blocks + b];
      for (int64_t j = 0; j < kGroup; ++j) {
        o[j] += scale[b * kGroup + j] * acc[j] + offset[b * kGroup + j] * s;
      }
    }
  }
}

#if defined(__x86_64__)
// R rows at once; four accumulators per row (weights k .. k + 3 of a step) keep four FMA chains
// apart, so one row is not bound by the FMA latency.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,fma"))) void GroupAvx512Rows(
    const float* a, int64_t lda, const uint8_t* q4, const float* scale, const float* offset,
    const float* sums, int64_t blocks, int64_t block, float* out) {
  const __m512i nibble = _mm512_set1_epi32(0x0F);
  __m512 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m512 acc[R][4];
    for (int r = 0; r < R; ++r) {
      for (int i = 0; i < 4; ++i) acc[r][i] = _mm512_setzero_ps();
    }
    const int64_t kp0 = b * block / 2, kp1 = kp0 + block / 2;  // block / 2 is a multiple of 8
    for (int64_t kp = kp0; kp < kp1; kp += 2) {
      const __m512i d0 =
          _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q4 + kp * 16)));
      const __m512i d1 = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q4 + kp * 16 + 16)));
      const __m512 w0 = _mm512_cvtepi32_ps(_mm512_and_si512(d0, nibble));
      const __m512 w1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(d0, 4));
      const __m512 w2 = _mm512_cvtepi32_ps(_mm512_and_si512(d1, nibble));
      const __m512 w3 = _mm512_cvtepi32_ps(_mm512_srli_epi32(d1, 4));
      for (int r = 0; r < R; ++r) {
        const float* ar = a + r * lda + 2 * kp;
        acc[r][0] = _mm512_fmadd_ps(w0, _mm512_set1_ps(ar[0]), acc[r][0]);
        acc[r][1] = _mm512_fmadd_ps(w1, _mm512_set1_ps(ar[1]), acc[r][1]);
        acc[r][2] = _mm512_fmadd_ps(w2, _mm512_set1_ps(ar[2]), acc[r][2]);
        acc[r][3] = _mm512_fmadd_ps(w3, _mm512_set1_ps(ar[3]), acc[r][3]);
      }
    }
    const __m512 s = _mm512_loadu_ps(scale + b * kGroup);
    const __m512 o = _mm512_loadu_ps(offset + b * kGroup);
    for (int r = 0; r < R; ++r) {
      const __m512 dot =
          _mm512_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]), _mm512_add_ps(acc[r][2], acc[r][3]));
      total[r] = _mm512_fmadd_ps(dot, s, total[r]);
      total[r] = _mm512_fmadd_ps(o, _mm512_set1_ps(sums[r * blocks + b]), total[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm512_storeu_ps(out + r * kGroup, total[r]);
}

void GroupAvx512(const float* a, int64_t lda, int64_t rows, const uint8_t* q4, const float* scale,
                 const float* offset, const float* sums, int64_t blocks, int64_t block,
                 float* out) {
  switch (rows) {
    case 1:
      return GroupAvx512Rows<1>(a, lda, q4, scale, offset, sums, blocks, block, out);
    case 2:
      return GroupAvx512Rows<2>(a, lda, q4, scale, offset, sums, blocks, block, out);
    case 3:
      return GroupAvx512Rows<3>(a, lda, q4, scale, offset, sums, blocks, block, out);
    default:
      return GroupAvx512Rows<4>(a, lda, q4, scale, offset, sums, blocks, block, out);
  }
}

// Half a group (8 columns, byte offset `half` * 8 of each packed row) for R rows; two
// accumulators per row (the low and high nibbles).
template <int R>
__attribute__((target("avx2,fma"))) void HalfGroupAvx2Rows(const float* a, int64_t lda,
                                                           const uint8_t* q4, const float* scale,
                                                           const float* offset, const float* sums,
                                                           int64_t blocks, int64_t block,
                                                           int64_t half, float* out) {
  const __m256i nibble = _mm256_set1_epi32(0x0F);
  __m256 total[R];
  for (int r = 0; r < R; ++r) total[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b) {
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const int64_t kp0 = b * block / 2, kp1 = kp0 + block / 2;
    for (int64_t kp = kp0; kp < kp1; ++kp) {
      const __m256i d = _mm256_cvtepu8_epi32(
          _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q4 + kp * 16 + half * 8)));
      const __m256 lo = _mm256_cvtepi32_ps(_mm256_and_si256(d, nibble));
      const __m256 hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(d, 4));
      for (int r = 0; r < R; ++r) {
        const float* ar = a + r * lda + 2 * kp;
        acc[r][0] = _mm256_fmadd_ps(lo, _mm256_set1_ps(ar[0]), acc[r][0]);
        acc[r][1] = _mm256_fmadd_ps(hi, _mm256_set1_ps(ar[1]), acc[r][1]);
      }
    }
    const __m256 s = _mm256_loadu_ps(scale + b * kGroup + half * 8);
    const __m256 o = _mm256_loadu_ps(offset + b * kGroup + half * 8);
    for (int r = 0; r < R; ++r) {
      total[r] = _mm256_fmadd_ps(_mm256_add_ps(acc[r][0], acc[r][1]), s, total[r]);
      total[r] = _mm256_fmadd_ps(o, _mm256_set1_ps(sums[r * blocks + b]), total[r]);
    }
  }
  for (int r = 0; r < R; ++r) _mm256_storeu_ps(out + r * kGroup + half * 8, total[r]);
}

void GroupAvx2(const float* a, int64_t lda, int64_t rows, const uint8_t* q4, const float* scale,
               const float* offset, const float* sums, int64_t blocks, int64_t block, float* out) {
  for (int64_t half = 0; half < 2; ++half) {
    switch (rows) {
      case 1:
        HalfGroupAvx2Rows<1>(a, lda, q4, scale, offset, sums, blocks, block, half, out);
        break;
      case 2:
        HalfGroupAvx2Rows<2>(a, lda, q4, scale, offset, sums, blocks, block, half, out);
        break;
      case 3:
        HalfGroupAvx2Rows<3>(a, lda, q4, scale, offset, sums, blocks, block, half, out);
        break;
      default:
        HalfGroupAvx2Rows<4>(a, lda, q4, scale, offset, sums, blocks, block, half, out);
        break;
    }
  }
}
#endif

constexpr NbitsTable kGeneric{"generic", GroupGeneric};
#if defined(__x86_64__)
constexpr NbitsTable kAvx2{"avx2", GroupAvx2};
constexpr NbitsTable kAvx512{"avx512", GroupAvx512};
#endif

// Scratch slots: `a` padded to whole blocks, and its block sums.
enum Slot { kSlotA, kSlotSums, kNumSlots };

float* Scratch(Slot slot, size_t floats) {
  thread_local ThreadBuffer buffers[kNumSlots];
  return buffers[slot].Get(floats);
}

struct Job {
  const NbitsTable* table;
  const float* a;  // rows x lda, zero past k_dim
  int64_t lda, rows, blocks, block;
  const float* sums;  // rows x blocks
  const uint8_t* q4;
  const float *scale, *offset, *bias;
  int64_t n_dim;
  float* y;
};

void RunGroups(const Job& j, int64_t g0, int64_t g1) {
  float out[kNbitsRows * kGroup];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t n0 = g * kGroup, width = std::min(kGroup, j.n_dim - n0);
    const uint8_t* q4 = j.q4 + g * (j.lda / 2) * kGroup;
    const float* scale = j.scale + g * j.blocks * kGroup;
    const float* offset = j.offset + g * j.blocks * kGroup;
    for (int64_t r0 = 0; r0 < j.rows; r0 += kNbitsRows) {
      const int64_t rows = std::min(kNbitsRows, j.rows - r0);
      j.table->group(j.a + r0 * j.lda, j.lda, rows, q4, scale, offset, j.sums + r0 * j.blocks,
                     j.blocks, j.block, out);
      for (int64_t r = 0; r < rows; ++r) {
        float* y = j.y + (r0 + r) * j.n_dim + n0;
        for (int64_t c = 0; c < width; ++c) {
          y[c] = out[r * kGroup + c] + (j.bias != nullptr ? j.bias[n0 + c] : 0.0f);
        }
      }
    }
  }
}

}  // namespace

const NbitsTable& NbitsGenericTable() { return kGeneric; }

#if defined(__x86_64__)
const NbitsTable* NbitsAvx2Table() { return &kAvx2; }
const NbitsTable* NbitsAvx512Table() { return &kAvx512; }
#else
const NbitsTable* NbitsAvx2Table() { return nullptr; }
const NbitsTable* NbitsAvx512Table() { return nullptr; }
#endif

TierList<NbitsTable> SupportedNbitsTables() {
  TierList<NbitsTable> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")) {
    out.push_back(NbitsAvx512Table());
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    out.push_back(NbitsAvx2Table());
  }
#endif
  out.push_back(&NbitsGenericTable());
  return out;
}

const NbitsTable& ActiveNbitsTable() {
  static const NbitsTable* table = [] {
    const TierList<NbitsTable> tables = SupportedNbitsTables();
    // The float tier's choice bounds this one (CUVIL_UK_TIER=avx2 rules out AVX-512 here too).
    const std::string_view active = ActiveTable().name;
    for (const NbitsTable* t : tables) {
      const std::string_view name = t->name;
      if (name == "avx512" && active != "avx512") continue;
      if (name == "avx2" && active == "generic") continue;
      return t;
    }
    return tables.back();
  }();
  return *table;
}

int64_t MatMulNbitsScratchBytes(int64_t rows, int64_t k_dim, int64_t block) {
  if (rows <= 0) return 0;
  if (block <= 0 || k_dim < 0) return -1;
  const int64_t blocks = (k_dim + block - 1) / block;
  int64_t padded = 0, sums = 0;
  if (__builtin_mul_overflow(blocks, block, &padded) ||
      __builtin_mul_overflow(rows, padded, &padded) ||
      __builtin_mul_overflow(rows, blocks, &sums)) {
    return -1;
  }
  ScratchTally s;
  s.AddFloats(padded);
  s.AddFloats(sums);
  return s.bytes();
}

void MatMulNbits(const NbitsTable& t, const float* a, int64_t rows, int64_t k_dim,
                 const uint8_t* q4_packed, const float* scale_packed, const float* offset_packed,
                 const float* bias, int64_t n_dim, int64_t block, float* y) {
  if (rows <= 0 || n_dim <= 0) return;
  const int64_t blocks = (k_dim + block - 1) / block;
  const int64_t lda = blocks * block;
  // `a` padded with zeros to whole blocks (the group bodies read whole blocks), and its block sums.
  float* padded = Scratch(kSlotA, static_cast<size_t>(rows * lda));
  float* sums = Scratch(kSlotSums, static_cast<size_t>(rows * blocks));
  for (int64_t r = 0; r < rows; ++r) {
    float* dst = padded + r * lda;
    std::memcpy(dst, a + r * k_dim, static_cast<size_t>(k_dim) * sizeof(float));
    std::memset(dst + k_dim, 0, static_cast<size_t>(lda - k_dim) * sizeof(float));
    for (int64_t b = 0; b < blocks; ++b) {
      float s = 0;
      for (int64_t k = 0; k < block; ++k) s += dst[b * block + k];
      sums[r * blocks + b] = s;
    }
  }
  Job job{&t,        padded,       lda,           rows, blocks, block, sums,
          q4_packed, scale_packed, offset_packed, bias, n_dim,  y};
  // Cost per group: its weights are read once (block / 2 bytes per block and column) and widened,
  // then multiplied with every row.
  const int64_t groups = (n_dim + kGroup - 1) / kGroup;
  const int64_t cost = lda * kGroup * (rows + 1);
  cuvil_rt_parallel_for(
      groups, cost,
      [](void* ctx, int64_t begin, int64_t end) {
        RunGroups(*static_cast<const Job*>(ctx), begin, end);
      },
      &job);
}

}  // namespace cuvil::uk

extern "C" {

void cuvil_uk_matmul_nbits(const float* a, int64_t rows, int64_t k_dim, const uint8_t* q4_packed,
                           const float* scale_packed, const float* offset_packed, const float* bias,
                           int64_t n_dim, int64_t block, float* y) {
  cuvil::uk::MicrokernelScratchScope scratch;
  cuvil::uk::MatMulNbits(cuvil::uk::ActiveNbitsTable(), a, rows, k_dim, q4_packed, scale_packed,
                         offset_packed, bias, n_dim, block, y);
}

int64_t cuvil_uk_nbits_packed_bytes(int64_t k_dim, int64_t n_dim, int64_t block) {
  const int64_t blocks = (k_dim + block - 1) / block;
  const int64_t groups = (n_dim + CUVIL_UK_NBITS_GROUP - 1) / CUVIL_UK_NBITS_GROUP;
  return groups * CUVIL_UK_NBITS_GROUP * (blocks * block / 2);
}

void cuvil_uk_nbits_pack(const uint8_t* q4, const float* scale, const float* offset, int64_t k_dim,
                         int64_t n_dim, int64_t block, uint8_t* q4_packed, float* scale_packed,
                         float* offset_packed) {
  constexpr int64_t kG = CUVIL_UK_NBITS_GROUP;
  const int64_t blocks = (k_dim + block - 1) / block;
  const int64_t row_bytes = blocks * block / 2;
  const int64_t groups = (n_dim + kG - 1) / kG;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t j = 0; j < kG; ++j) {
      const int64_t n = g * kG + j;
      const bool real = n < n_dim;
      for (int64_t kp = 0; kp < row_bytes; ++kp) {
        q4_packed[(g * row_bytes + kp) * kG + j] = real ? q4[n * row_bytes + kp] : 0;
      }
      for (int64_t b = 0; b < blocks; ++b) {
        scale_packed[(g * blocks + b) * kG + j] = real ? scale[n * blocks + b] : 0.0f;
        offset_packed[(g * blocks + b) * kG + j] = real ? offset[n * blocks + b] : 0.0f;
      }
    }
  }
}

const char* cuvil_uk_nbits_tier() { return cuvil::uk::ActiveNbitsTable().name; }

}  // extern "C"
