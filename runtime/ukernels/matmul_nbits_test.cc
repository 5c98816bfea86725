// The 4-bit block-quantized matrix product (matmul_nbits.cc) on every tier this CPU runs against
// a double-precision reference that dequantises the weights first: K that is not a multiple of
// the block (ignored padding nibbles), block sizes 16/32/128, 1 to 9 rows (a partial row group),
// column counts that leave a partial group of 16, the extreme nibbles 0 and 15, negative offsets
// (zero points), with and without bias; packing fills every byte of the packed form.
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

struct Case {
  int64_t rows, k, n, block;
  bool bias;
};

class MatMulNbitsTest : public ::testing::TestWithParam<Case> {};

TEST_P(MatMulNbitsTest, EveryTierMatchesTheDequantisedReference) {
  const Case c = GetParam();
  const int64_t blocks = (c.k + c.block - 1) / c.block;
  const int64_t row_bytes = blocks * c.block / 2;
  std::mt19937 rng(static_cast<uint32_t>(c.rows * 131 + c.k * 7 + c.n + c.block));
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> a(static_cast<size_t>(c.rows * c.k));
  for (float& v : a) v = uniform(rng);
  std::vector<uint8_t> q4(static_cast<size_t>(c.n * row_bytes));
  for (size_t i = 0; i < q4.size(); ++i) {
    // Every fourth byte holds the extremes 0 and 15; padding nibbles past k hold 15 too.
    q4[i] = i % 4 == 0 ? 0xF0 : static_cast<uint8_t>(rng());
  }
  std::vector<float> scale(static_cast<size_t>(c.n * blocks)), offset(scale.size());
  for (size_t i = 0; i < scale.size(); ++i) {
    scale[i] = 0.01f + 0.05f * std::fabs(uniform(rng));
    offset[i] = -scale[i] * static_cast<float>(rng() % 16);  // -zero_point * scale
  }
  std::vector<float> bias(static_cast<size_t>(c.n));
  for (float& v : bias) v = uniform(rng);

  std::vector<double> want(static_cast<size_t>(c.rows * c.n));
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t n = 0; n < c.n; ++n) {
      double v = c.bias ? bias[n] : 0.0;
      for (int64_t k = 0; k < c.k; ++k) {
        const uint8_t byte = q4[n * row_bytes + k / 2];
        const int q = k % 2 == 0 ? byte & 0x0F : byte >> 4;
        const int64_t b = n * blocks + k / c.block;
        v += static_cast<double>(a[r * c.k + k]) * (q * double{scale[b]} + offset[b]);
      }
      want[r * c.n + n] = v;
    }
  }
  const int64_t groups = (c.n + CUVIL_UK_NBITS_GROUP - 1) / CUVIL_UK_NBITS_GROUP;
  std::vector<uint8_t> q4_packed(
      static_cast<size_t>(cuvil_uk_nbits_packed_bytes(c.k, c.n, c.block)), 0xAB);
  ASSERT_EQ(static_cast<int64_t>(q4_packed.size()), groups * CUVIL_UK_NBITS_GROUP * row_bytes);
  std::vector<float> scale_packed(static_cast<size_t>(groups * blocks * CUVIL_UK_NBITS_GROUP),
                                  std::nanf(""));
  std::vector<float> offset_packed(scale_packed.size(), std::nanf(""));
  cuvil_uk_nbits_pack(q4.data(), scale.data(), offset.data(), c.k, c.n, c.block, q4_packed.data(),
                      scale_packed.data(), offset_packed.data());
  for (size_t i = 0; i < scale_packed.size(); ++i) {
    ASSERT_FALSE(std::isnan(scale_packed[i]) || std::isnan(offset_packed[i])) << "float " << i;
  }
  for (int64_t j = c.n; j < groups * CUVIL_UK_NBITS_GROUP; ++j) {  // padding columns are zero
    ASSERT_EQ(q4_packed[((groups - 1) * row_bytes) * CUVIL_UK_NBITS_GROUP + j % 16], 0);
  }
  for (const uk::NbitsTable* t : uk::SupportedNbitsTables()) {
    SCOPED_TRACE(t->name);
    std::vector<float> y(want.size(), std::nanf(""));
    uk::MatMulNbits(*t, a.data(), c.rows, c.k, q4_packed.data(), scale_packed.data(),
                    offset_packed.data(), c.bias ? bias.data() : nullptr, c.n, c.block, y.data());
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], want[i], 1e-4 * (1.0 + std::fabs(want[i]))) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatMulNbitsTest,
                         ::testing::Values(Case{1, 64, 5, 32, true}, Case{1, 100, 17, 32, false},
                                           Case{3, 48, 8, 16, true}, Case{4, 256, 33, 128, true},
                                           Case{9, 77, 12, 16, false},
                                           Case{2, 2048, 64, 32, true}));

// The entry point runs the active tier and names it.
TEST(MatMulNbitsEntryTest, UsesTheActiveTier) {
  const std::string tier = cuvil_uk_nbits_tier();
  EXPECT_EQ(tier, uk::ActiveNbitsTable().name);
  // One row, one output, one block of 16: 0.5 * sum(q) with q = 1..15, 0 and offset -1 per weight.
  std::vector<float> a(16, 1.0f);
  std::vector<uint8_t> q4(8);
  for (int i = 0; i < 8; ++i) q4[i] = static_cast<uint8_t>((2 * i + 1) | (((2 * i + 2) % 16) << 4));
  const float scale = 0.5f, offset = -1.0f, bias = 2.0f;
  std::vector<uint8_t> q4_packed(static_cast<size_t>(cuvil_uk_nbits_packed_bytes(16, 1, 16)));
  std::vector<float> scale_packed(CUVIL_UK_NBITS_GROUP), offset_packed(CUVIL_UK_NBITS_GROUP);
  cuvil_uk_nbits_pack(q4.data(), &scale, &offset, 16, 1, 16, q4_packed.data(), scale_packed.data(),
                      offset_packed.data());
  float y = 0;
  cuvil_uk_matmul_nbits(a.data(), 1, 16, q4_packed.data(), scale_packed.data(),
                        offset_packed.data(), &bias, 1, 16, &y);
  EXPECT_FLOAT_EQ(y, 2.0f + 0.5f * 120.0f - 16.0f);  // q sums to 1 + ... + 15 + 0 = 120
}

}  // namespace
}  // namespace cuvil
