// Portable scalar bodies of the microkernels: the fallback tier and the unit tests' second opinion.
#include <cmath>
#include <cstring>

#include "activate_scalar.h"
#include "cuvil/runtime/ukernels.h"
#include "quantize_rows.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

constexpr int64_t kNR = 16;

void GemmTile(int64_t kc, const float* a, const float* b, const int64_t* off, float* c, int64_t ldc,
              int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep) {
  float acc[kMR][kNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + off[k];
    for (int64_t r = 0; r < kMR; ++r) {
      for (int64_t j = 0; j < nr; ++j) acc[r][j] += a[k * kMR + r] * bk[j];
    }
  }
  for (int64_t r = 0; r < mr; ++r) {
    for (int64_t j = 0; j < nr; ++j) {
      float v = acc[r][j];
      if (accumulate) v += c[r * ldc + j];
      if (ep != nullptr) {
        if (ep->bias != nullptr) v += ep->bias[r];
        if (ep->residual != nullptr) v += ep->residual[r * ldc + j];
        v = Activate(v, *ep);
      }
      c[r * ldc + j] = v;
    }
  }
}

void EpilogueRow(float* dst, const float* src, int64_t n, float bias, const float* residual,
                 const Epilogue& ep) {
  for (int64_t i = 0; i < n; ++i) {
    dst[i] = Activate(src[i] + bias + (residual != nullptr ? residual[i] : 0.0f), ep);
  }
}

void DepthwiseRow(float* dst, const float* src, const int64_t* off, const float* wt, int64_t taps,
                  int64_t n, float bias, const float* residual, const Epilogue& ep) {
  for (int64_t i = 0; i < n; ++i) {
    float v = bias;
    for (int64_t t = 0; t < taps; ++t) v += wt[t] * src[off[t] + i];
    if (residual != nullptr) v += residual[i];
    dst[i] = Activate(v, ep);
  }
}

}  // namespace

void PadRowPortable(float* dst, int64_t n, const float* src, int64_t j0, int64_t j1,
                    int64_t stride) {
  std::memset(dst, 0, j0 * sizeof(float));
  if (stride == 1) {
    std::memcpy(dst + j0, src, (j1 - j0) * sizeof(float));
  } else {
    for (int64_t j = j0; j < j1; ++j) dst[j] = src[(j - j0) * stride];
  }
  std::memset(dst + j1, 0, (n - j1) * sizeof(float));
}

void MaxRowPortable(float* dst, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = (b[i] > a[i] || b[i] != b[i]) ? b[i] : a[i];
}

void MaxStride2RowPortable(float* dst, const float* src, int64_t n, int64_t kw) {
  for (int64_t j = 0; j < n; ++j) {
    const float* w = src + 2 * j;
    float m = w[0];
    for (int64_t k = 1; k < kw; ++k) m = (w[k] > m || w[k] != w[k]) ? w[k] : m;
    dst[j] = m;
  }
}

const Table& GenericTable() {
  static const Table table = {"generic",
                              kNR,
                              GemmTile,
                              EpilogueRow,
                              DepthwiseRow,
                              PadRowPortable,
                              nullptr,
                              DequantizeRow,
                              QuantizeRow,
                              nullptr,
                              nullptr,
                              MaxRowPortable,
                              MaxStride2RowPortable};
  return table;
}

}  // namespace cuvil::uk
