// The quantized matrix product (qmatmul.cc) on every tier this CPU runs against a scalar
// reference: reduction lengths that are not a multiple of 4, column counts around the panel width,
// row counts around the row block, int8 and uint8 activations at their extremes, transposed and
// plain weights, per-column scales, every output type with clamps and saturation.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string_view>
#include <vector>

#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct Case {
  int64_t rows, k, n;
  bool x_signed, transposed;
  int64_t out_type;
};

// The formula of cuvil_uk_qmatmul in plain C++: exact integer sums, then the float operations in
// the kernel's order.
std::vector<uint8_t> Reference(const Case& t, const std::vector<uint8_t>& x,
                               const std::vector<int8_t>& w, const std::vector<int32_t>& comp,
                               const std::vector<float>& mult, const std::vector<float>& bias,
                               float lo, float hi) {
  const int64_t out_bytes =
      t.out_type == CUVIL_UK_QOUT_FLOAT || t.out_type == CUVIL_UK_QOUT_S32 ? 4 : 1;
  std::vector<uint8_t> y(static_cast<size_t>(t.rows * t.n * out_bytes));
  for (int64_t r = 0; r < t.rows; ++r) {
    for (int64_t j = 0; j < t.n; ++j) {
      int64_t acc = 0;
      for (int64_t kk = 0; kk < t.k; ++kk) {
        const int64_t xv =
            t.x_signed ? static_cast<int8_t>(x[r * t.k + kk]) + 128 : x[r * t.k + kk];
        acc += xv * (t.transposed ? w[j * t.k + kk] : w[kk * t.n + j]);
      }
      if (t.out_type == CUVIL_UK_QOUT_S32) {
        const int32_t exact = static_cast<int32_t>(acc) - comp[j];
        std::memcpy(&y[(r * t.n + j) * 4], &exact, 4);
        continue;
      }
      float v = static_cast<float>(static_cast<int32_t>(acc) - comp[j]) * mult[j] + bias[j];
      v = std::min(std::max(v, lo), hi);
      if (t.out_type == CUVIL_UK_QOUT_FLOAT) {
        std::memcpy(&y[(r * t.n + j) * 4], &v, 4);
      } else {
        const float rounded = (v + 12582912.0f) - 12582912.0f;
        y[r * t.n + j] = static_cast<uint8_t>(static_cast<int32_t>(rounded));
      }
    }
  }
  return y;
}

TEST(QMatMulTest, EveryTierMatchesTheReferenceExactly) {
#if defined(__x86_64__)
  // The tiers this CPU can run are all compared below: make sure they are offered.
  bool has_avx2 = false;
  for (const uk::QMatMulTable* t : uk::SupportedQMatMulTables()) {
    has_avx2 = has_avx2 || std::string_view(t->name) == "avx2";
  }
  EXPECT_EQ(has_avx2, __builtin_cpu_supports("avx2") != 0);
#endif
  std::mt19937 rng(7);
  std::vector<Case> cases;
  for (int64_t out_type :
       {CUVIL_UK_QOUT_FLOAT, CUVIL_UK_QOUT_U8, CUVIL_UK_QOUT_S8, CUVIL_UK_QOUT_S32}) {
    for (bool x_signed : {false, true}) {
      cases.push_back({1, 512, 1000, x_signed, true, out_type});  // A classifier's FC at batch 1.
      cases.push_back({9, 5, 17, x_signed, false, out_type});
      cases.push_back({8, 64, 16, x_signed, false, out_type});
      cases.push_back({3, 1, 15, x_signed, true, out_type});
      cases.push_back({20, 67, 40, x_signed, true, out_type});
      cases.push_back({17, 130, 33, x_signed, false, out_type});
    }
  }
  for (const Case& t : cases) {
    std::vector<uint8_t> x(static_cast<size_t>(t.rows * t.k));
    for (size_t i = 0; i < x.size(); ++i) {
      // Extremes first: 0 and 255 (int8: 0, -1, -128, 127 once shifted) stress the accumulators.
      x[i] = i % 7 == 0 ? 255 : i % 11 == 0 ? 0 : i % 13 == 0 ? 128 : static_cast<uint8_t>(rng());
    }
    std::vector<int8_t> w(static_cast<size_t>(t.k * t.n));
    for (size_t i = 0; i < w.size(); ++i) {
      w[i] = i % 5 == 0 ? -128 : i % 9 == 0 ? 127 : static_cast<int8_t>(rng());
    }
    const int64_t bytes = cuvil_uk_qmatmul_weights_size(t.k, t.n);
    ASSERT_GT(bytes, 0);
    std::vector<int8_t> packed(static_cast<size_t>(bytes));
    std::vector<int32_t> sums(static_cast<size_t>(t.n));
    cuvil_uk_pack_qmatmul_weights(w.data(), t.k, t.n, t.transposed ? 1 : 0, packed.data(),
                                  sums.data());
    const int32_t zero = t.x_signed ? -3 + 128 : 121;
    std::vector<int32_t> comp(static_cast<size_t>(t.n));
    std::vector<float> mult(static_cast<size_t>(t.n)), bias(static_cast<size_t>(t.n));
    for (int64_t j = 0; j < t.n; ++j) {
      int32_t s = 0;
      for (int64_t kk = 0; kk < t.k; ++kk) s += t.transposed ? w[j * t.k + kk] : w[kk * t.n + j];
      ASSERT_EQ(sums[j], s) << "column " << j;
      comp[j] = zero * sums[j];
      // Large multipliers push quantized outputs past both ends of the type.
      mult[j] = t.out_type == CUVIL_UK_QOUT_FLOAT ? 1e-4f * (1 + j % 3) : 0.002f * (1 + j % 4);
      bias[j] = static_cast<float>(j % 7) - 3.5f;
    }
    const float lo = t.out_type == CUVIL_UK_QOUT_FLOAT ? -5.0f
                     : t.out_type == CUVIL_UK_QOUT_U8  ? 3.0f
                                                       : -128.0f;
    const float hi = t.out_type == CUVIL_UK_QOUT_FLOAT ? 6.0f
                     : t.out_type == CUVIL_UK_QOUT_U8  ? 255.0f
                                                       : 100.0f;
    const std::vector<uint8_t> want = Reference(t, x, w, comp, mult, bias, lo, hi);
    cuvil_uk_qmatmul_params p{t.k, t.n, t.x_signed ? 1 : 0, t.out_type};
    for (const uk::QMatMulTable* table : uk::SupportedQMatMulTables()) {
      std::vector<uint8_t> y(want.size(), 0xCD);
      uk::QMatMul(*table, p, x.data(), packed.data(), comp.data(), mult.data(), bias.data(),
                  y.data(), t.rows, lo, hi);
      for (size_t i = 0; i < y.size() && t.out_type == CUVIL_UK_QOUT_FLOAT; i += 4) {
        float a, b;
        std::memcpy(&a, &y[i], 4);
        std::memcpy(&b, &want[i], 4);
        if (a != b) {
          ADD_FAILURE() << "first float difference at " << i / 4 << ": " << a << " vs " << b;
          break;
        }
      }
      EXPECT_EQ(y, want) << table->name << " rows " << t.rows << " k " << t.k << " n " << t.n
                         << " signed " << t.x_signed << " out " << t.out_type;
    }
  }
}

}  // namespace
}  // namespace cuvil
