// The scratch region of an ahead-of-time call: its stack discipline, ThreadBuffer and the heap
// helpers inside it, and every microkernel's sizing function against what the kernel takes (a
// region of exactly the sized bytes must serve the whole call, and the outputs must not change).
#include "call_scratch.h"

#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernel_scratch.h"
#include "cuvil/runtime/ukernels.h"
#include "gtest/gtest.h"
#include "kernels.h"
#include "scratch_sizes.h"
#include "thread_buffer.h"
#include "ukernel_table.h"

namespace cuvil {
namespace {

// 64-byte aligned storage for a region.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t bytes) : storage_(bytes + 64) {}
  char* data() {
    const auto at = reinterpret_cast<uintptr_t>(storage_.data());
    return storage_.data() + ((64 - at % 64) % 64);
  }

 private:
  std::vector<char> storage_;
};

TEST(CallScratchTest, BlocksComeInStackOrderAndOutOfOrderFreesAreReclaimed) {
  AlignedBytes bytes(4096);
  uk::CallScratch region(bytes.data(), 4096);
  void* a = region.Allocate(10);
  void* b = region.Allocate(100);
  void* c = region.Allocate(64);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(static_cast<char*>(b) - static_cast<char*>(a), 64 + 64);  // header + 10 rounded up
  EXPECT_EQ(static_cast<char*>(c) - static_cast<char*>(b), 64 + 128);
  EXPECT_TRUE(region.Owns(b));
  EXPECT_FALSE(region.Owns(bytes.data() + 4096));
  const size_t used = region.high_water();
  EXPECT_EQ(used, size_t{3 * 64 + 64 + 128 + 64});
  region.Free(b);  // below a live block: kept until c goes
  EXPECT_EQ(region.Allocate(1), static_cast<char*>(c) + 64 + 64);
  region.Free(static_cast<char*>(c) + 64 + 64);
  region.Free(c);  // c and b go back together
  EXPECT_EQ(region.Allocate(100), b);
  EXPECT_EQ(region.misses(), 0);
}

TEST(CallScratchTest, RequestsThatDoNotFitMissAndChangeNothing) {
  AlignedBytes bytes(256);
  uk::CallScratch region(bytes.data(), 256);
  EXPECT_EQ(region.Allocate(200), nullptr);  // 64 + 256 > 256
  EXPECT_EQ(region.Allocate(SIZE_MAX), nullptr);
  EXPECT_EQ(region.misses(), 2);
  void* a = region.Allocate(192);  // exactly fills it
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(region.Allocate(1), nullptr);
  EXPECT_EQ(region.high_water(), 256u);
  uk::CallScratch empty(nullptr, 0);
  EXPECT_EQ(empty.Allocate(1), nullptr);
  EXPECT_EQ(uk::CallScratchBlockBytes(1), 128);
  EXPECT_EQ(uk::CallScratchBlockBytes(128), 192);
  EXPECT_EQ(uk::CallScratchBlockBytes(INT64_MAX), -1);
}

TEST(CallScratchTest, ThreadBufferBlocksLastUntilTheirMicrokernelReturns) {
  thread_local uk::ThreadBuffer buffer;
  AlignedBytes bytes(8192);
  uk::CallScratch region(bytes.data(), 8192);
  uk::CallScratchScope call(&region);
  float* first = nullptr;
  {
    uk::MicrokernelScratchScope kernel;
    bool fresh = false;
    first = buffer.Get(100, &fresh);
    EXPECT_TRUE(fresh);
    EXPECT_TRUE(region.Owns(first));
    first[99] = 7.0f;
    float* again = buffer.Get(50, &fresh);  // fits: the same block, contents kept
    EXPECT_EQ(again, first);
    EXPECT_FALSE(fresh);
    EXPECT_EQ(again[99], 7.0f);
    float* grown = buffer.Get(500, &fresh);
    EXPECT_TRUE(fresh);
    EXPECT_GT(grown, first);
  }
  {
    uk::MicrokernelScratchScope kernel;
    bool fresh = false;
    float* next = buffer.Get(100, &fresh);  // the last kernel's blocks went back
    EXPECT_EQ(next, first);
    EXPECT_TRUE(fresh);
  }
  EXPECT_EQ(region.misses(), 0);
}

TEST(CallScratchTest, HeapHelpersUseTheRegionWhileItIsInstalled) {
  AlignedBytes bytes(1024);
  uk::CallScratch region(bytes.data(), 1024);
  void* outside = cuvil_rt_alloc(100);
  EXPECT_FALSE(region.Owns(outside));
  {
    uk::CallScratchScope call(&region);
    void* a = cuvil_rt_alloc(100);
    void* b = cuvil_rt_alloc(200);
    EXPECT_TRUE(region.Owns(a));
    EXPECT_TRUE(region.Owns(b));
    void* big = cuvil_rt_alloc(4096);  // does not fit: the heap serves
    ASSERT_NE(big, nullptr);
    EXPECT_FALSE(region.Owns(big));
    cuvil_rt_free(big);
    cuvil_rt_free(a);
    cuvil_rt_free(b);
    cuvil_rt_free(outside);  // a heap block freed inside the call still goes to the heap
    EXPECT_EQ(cuvil_rt_alloc(100), a);
  }
  EXPECT_EQ(region.misses(), 1);
  EXPECT_EQ(uk::ActiveCallScratch(), nullptr);
}

TEST(CallScratchTest, SizingRejectsWhatItCannotSize) {
  const int64_t words[21] = {};
  EXPECT_EQ(cuvil_uk_scratch_bytes(99, words, 1), -1);
  EXPECT_EQ(cuvil_uk_scratch_bytes(CUVIL_SCRATCH_CONV2D, words, 17), -1);  // batch missing
  EXPECT_EQ(cuvil_uk_scratch_bytes(CUVIL_SCRATCH_QCONV2D, words, 18), -1);
  EXPECT_EQ(cuvil_uk_scratch_bytes(CUVIL_SCRATCH_HEAP, nullptr, 1), -1);
  const int64_t huge[2] = {INT64_MAX, 1};
  EXPECT_EQ(cuvil_uk_scratch_bytes(CUVIL_SCRATCH_HEAP, huge, 2), -1);
  const int64_t heap[2] = {100, 28};
  EXPECT_EQ(cuvil_uk_scratch_bytes(CUVIL_SCRATCH_HEAP, heap, 2), 64 + 128);
  const int64_t nbits[3] = {INT64_MAX / 2, 64, 32};
  EXPECT_EQ(cuvil_uk_scratch_bytes(CUVIL_SCRATCH_MATMUL_NBITS, nbits, 3), -1);
}

struct RegionRun {
  std::vector<float> out;
  size_t high_water = 0;
  int64_t misses = 0;
};

// Runs `kernel` once inside a region of `bytes` on one intra-op thread, as cuvil_aot_run does.
RegionRun RunInRegion(size_t bytes, const std::function<std::vector<float>()>& kernel) {
  AlignedBytes storage(bytes);
  uk::CallScratch region(storage.data(), bytes);
  RegionRun run;
  {
    uk::CallScratchScope call(&region);
    uk::MicrokernelScratchScope scope;
    run.out = kernel();
  }
  run.high_water = region.high_water();
  run.misses = region.misses();
  return run;
}

// The kernel fits a region of size() bytes with nothing left over to the heap and computes what it
// computes on the heap; a region too small for it makes it miss, yet the outputs stay the same.
// The sizing runs at the same (one) intra-op thread as the kernel.
void ExpectFitsItsBound(const std::function<int64_t()>& size,
                        const std::function<std::vector<float>()>& kernel) {
  SetIntraOpThreads(1);
  const int64_t bound = size();
  ASSERT_GT(bound, 0);
  const std::vector<float> on_heap = kernel();
  const RegionRun exact = RunInRegion(static_cast<size_t>(bound), kernel);
  EXPECT_EQ(exact.misses, 0) << "bound " << bound;
  EXPECT_LE(exact.high_water, static_cast<size_t>(bound));
  ASSERT_EQ(exact.out.size(), on_heap.size());
  EXPECT_EQ(std::memcmp(exact.out.data(), on_heap.data(), on_heap.size() * sizeof(float)), 0);
  const RegionRun half = RunInRegion(exact.high_water / 2, kernel);
  if (exact.high_water > 0) EXPECT_GT(half.misses, 0);
  EXPECT_EQ(std::memcmp(half.out.data(), on_heap.data(), on_heap.size() * sizeof(float)), 0);
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

struct ConvShape {
  int64_t c, h, w, m, k, stride, pad, groups, flags;
};

cuvil_uk_conv_params ParamsOf(const ConvShape& s) {
  const int64_t oh = (s.h + 2 * s.pad - s.k) / s.stride + 1;
  const int64_t ow = (s.w + 2 * s.pad - s.k) / s.stride + 1;
  return cuvil_uk_conv_params{
      s.c,      s.h,      s.w, s.m, oh,    ow,    s.k,      s.k,
      s.stride, s.stride, 1,   1,   s.pad, s.pad, s.groups, CUVIL_UK_ACT_RELU,
      s.flags};
}

TEST(ScratchSizingTest, ConvsFitTheirSizedRegionOnEveryTier) {
  const ConvShape shapes[] = {
      {16, 9, 9, 24, 1, 1, 0, 1, CUVIL_UK_CONV_PACKED},       // 1x1, read in place
      {8, 14, 14, 20, 1, 2, 0, 1, CUVIL_UK_CONV_PACKED},      // 1x1 stride 2
      {3, 40, 40, 16, 7, 2, 3, 1, CUVIL_UK_CONV_PACKED},      // stem
      {12, 10, 11, 12, 3, 1, 1, 3, CUVIL_UK_CONV_PACKED},     // grouped
      {8, 20, 37, 8, 3, 1, 1, 8, CUVIL_UK_CONV_DEPTHWISE},    // depthwise, wide planes
      {8, 21, 40, 8, 3, 2, 1, 8, CUVIL_UK_CONV_DEPTHWISE},    // depthwise stride 2
      {4, 9, 9, 4, 5, 1, 2, 4, CUVIL_UK_CONV_DEPTHWISE},      // depthwise 5x5
      {32, 30, 30, 40, 3, 1, 1, 1, CUVIL_UK_CONV_WINOGRAD},   // several chunks
      {64, 7, 7, 64, 3, 1, 1, 1, CUVIL_UK_CONV_WINOGRAD},     // images share a chunk
      {64, 28, 28, 256, 3, 1, 1, 1, CUVIL_UK_CONV_WINOGRAD},  // chunks of 5, 5 and 4 tile rows
      {64, 56, 56, 64, 3, 1, 1, 1, CUVIL_UK_CONV_WINOGRAD},   // last chunk of one tile row
      {24, 6, 6, 40, 3, 1, 4, 1, CUVIL_UK_CONV_PACKED | CUVIL_UK_CONV_TAP_MAJOR},  // live taps
      {12, 9, 8, 20, 3, 2, 1, 2, CUVIL_UK_CONV_PACKED | CUVIL_UK_CONV_TAP_MAJOR},  // and grouped
  };
  for (const ConvShape& s : shapes) {
    const cuvil_uk_conv_params p = ParamsOf(s);
    const int64_t cg = s.c / s.groups, mg = s.m / s.groups, kk = cg * s.k * s.k;
    const std::vector<float> w = Random(s.m * kk, 3), bias = Random(s.m, 4);
    std::vector<float> packed = w;
    if (s.flags == CUVIL_UK_CONV_PACKED) {
      packed.resize(static_cast<size_t>(cuvil_uk_packed_conv_weights_size(s.groups, mg, kk)));
      cuvil_uk_pack_conv_weights(w.data(), s.groups, mg, kk, packed.data());
    } else if ((s.flags & CUVIL_UK_CONV_TAP_MAJOR) != 0) {
      packed.resize(static_cast<size_t>(cuvil_uk_packed_conv_weights_size(s.groups, mg, kk)));
      cuvil_uk_pack_conv_weights_tap_major(w.data(), s.groups, mg, cg, s.k * s.k, packed.data());
    } else if (s.flags == CUVIL_UK_CONV_WINOGRAD) {
      packed.resize(static_cast<size_t>(cuvil_uk_winograd_weights_size(s.m, s.c)));
      cuvil_uk_pack_winograd_weights(w.data(), s.m, s.c, packed.data());
    }
    for (int64_t batch : {1, 3}) {
      const std::vector<float> x = Random(batch * s.c * s.h * s.w, 5);
      for (const uk::Table* t : uk::SupportedTables()) {
        SCOPED_TRACE(testing::Message()
                     << t->name << " c=" << s.c << " h=" << s.h << " m=" << s.m << " k=" << s.k
                     << " flags=" << s.flags << " batch=" << batch);
        ExpectFitsItsBound(
            [&] { return uk::Conv2dScratchBytes(*t, p, batch); },
            [&] {
              std::vector<float> y(static_cast<size_t>(batch * s.m * p.out_height * p.out_width));
              uk::Conv2d(*t, p, x.data(), packed.data(), bias.data(), nullptr, y.data(), batch, 0,
                         0);
              return y;
            });
      }
    }
  }
}

// An arena sized for a batch must serve every smaller one: no sizing may shrink as the batch
// grows (Winograd's equal chunks do shrink: 4 rows of a 7x7 layer are one chunk, 5 are two).
TEST(ScratchSizingTest, SizesNeverShrinkAsTheBatchGrows) {
  SetIntraOpThreads(1);
  const ConvShape shapes[] = {{512, 7, 7, 512, 3, 1, 1, 1, CUVIL_UK_CONV_WINOGRAD},
                              {64, 56, 56, 64, 3, 1, 1, 1, CUVIL_UK_CONV_WINOGRAD},
                              {16, 20, 20, 16, 3, 1, 1, 16, CUVIL_UK_CONV_DEPTHWISE},
                              {3, 40, 40, 16, 7, 2, 3, 1, CUVIL_UK_CONV_PACKED}};
  for (const ConvShape& s : shapes) {
    const cuvil_uk_conv_params p = ParamsOf(s);
    for (const uk::Table* t : uk::SupportedTables()) {
      int64_t last = 0;
      for (int64_t batch = 1; batch <= 64; ++batch) {
        const int64_t bytes = uk::Conv2dScratchBytes(*t, p, batch);
        ASSERT_GE(bytes, last) << t->name << " c=" << s.c << " batch=" << batch;
        last = bytes;
      }
    }
  }
  int64_t last = 0;
  for (int64_t rows = 1; rows <= 64; ++rows) {
    const int64_t bytes = uk::MatMulNbitsScratchBytes(rows, 100, 32);
    ASSERT_GE(bytes, last) << rows;
    last = bytes;
  }
}

TEST(ScratchSizingTest, EightBitDepthwiseFitsItsSizedRegion) {
  const ConvShape shapes[] = {{8, 20, 37, 8, 3, 1, 1, 8, CUVIL_UK_CONV_DEPTHWISE},
                              {6, 9, 9, 6, 5, 2, 2, 6, CUVIL_UK_CONV_DEPTHWISE}};
  for (const ConvShape& s : shapes) {
    cuvil_uk_conv_params p = ParamsOf(s);
    p.activation = CUVIL_UK_ACT_NONE;
    const std::vector<float> w = Random(s.c * s.k * s.k, 6), bias = Random(s.c, 7);
    std::vector<uint8_t> x(static_cast<size_t>(2 * s.c * s.h * s.w));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 37 % 251);
    for (const uk::Table* t : uk::SupportedTables()) {
      SCOPED_TRACE(testing::Message() << t->name << " k=" << s.k);
      ExpectFitsItsBound([&] { return uk::QDepthwise2dScratchBytes(*t, p); },
                         [&] {
                           const size_t n =
                               static_cast<size_t>(2 * s.c * p.out_height * p.out_width);
                           std::vector<uint8_t> y(n);
                           uk::QDepthwise2d(*t, p, x.data(), false, 0.02f, 128, w.data(),
                                            bias.data(), y.data(), false, 0.05f, 120, 2, 0, 0);
                           return std::vector<float>(y.begin(), y.end());
                         });
    }
  }
}

TEST(ScratchSizingTest, QuantizedConvsFitTheirSizedRegion) {
  const ConvShape shapes[] = {{32, 8, 8, 20, 1, 1, 0, 1, 0},    // direct
                              {16, 12, 13, 24, 3, 1, 1, 1, 0},  // padded copy
                              {8, 15, 15, 16, 3, 2, 1, 1, 0}};  // strided rows
  for (const ConvShape& s : shapes) {
    cuvil_uk_qconv_params qp{ParamsOf(s), 0, 3, CUVIL_UK_QOUT_FLOAT};
    const int64_t k = s.c * s.k * s.k;
    std::vector<int8_t> w(static_cast<size_t>(s.m * k));
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<int8_t>(i * 13 % 255 - 127);
    std::vector<int8_t> packed(static_cast<size_t>(cuvil_uk_qconv_weights_size(s.m, k)));
    std::vector<int32_t> sums(static_cast<size_t>(s.m));
    cuvil_uk_pack_qconv_weights(w.data(), s.m, k, packed.data(), sums.data());
    std::vector<int32_t> comp(sums.size());
    for (size_t i = 0; i < comp.size(); ++i) comp[i] = 3 * sums[i];
    const std::vector<float> mult(static_cast<size_t>(s.m), 0.01f), bias = Random(s.m, 8);
    std::vector<uint8_t> x(static_cast<size_t>(2 * s.c * s.h * s.w));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<uint8_t>(i * 29 % 253);
    for (const uk::QTable* t : uk::SupportedQTables()) {
      SCOPED_TRACE(testing::Message() << t->name << " k=" << s.k << " stride=" << s.stride);
      ExpectFitsItsBound([&] { return uk::QConv2dScratchBytes(*t, qp); },
                         [&] {
                           std::vector<float> y(static_cast<size_t>(2 * s.m * qp.conv.out_height *
                                                                    qp.conv.out_width));
                           uk::QConv2d(*t, qp, x.data(), packed.data(), comp.data(), mult.data(),
                                       bias.data(), nullptr, y.data(), 2, -1e30f, 1e30f);
                           return y;
                         });
    }
  }
}

TEST(ScratchSizingTest, FourBitMatMulAndMaxPoolFitTheirSizedRegion) {
  const int64_t k = 100, n = 40, block = 32, blocks = (k + block - 1) / block;
  std::vector<uint8_t> q4(static_cast<size_t>(n * blocks * block / 2));
  for (size_t i = 0; i < q4.size(); ++i) q4[i] = static_cast<uint8_t>(i * 7);
  const std::vector<float> scale(static_cast<size_t>(n * blocks), 0.03f);
  const std::vector<float> offset(scale.size(), -0.2f);
  const int64_t groups = (n + CUVIL_UK_NBITS_GROUP - 1) / CUVIL_UK_NBITS_GROUP;
  std::vector<uint8_t> q4_packed(static_cast<size_t>(cuvil_uk_nbits_packed_bytes(k, n, block)));
  std::vector<float> scale_packed(static_cast<size_t>(groups * blocks * CUVIL_UK_NBITS_GROUP));
  std::vector<float> offset_packed(scale_packed.size());
  cuvil_uk_nbits_pack(q4.data(), scale.data(), offset.data(), k, n, block, q4_packed.data(),
                      scale_packed.data(), offset_packed.data());
  for (int64_t rows : {1, 5}) {
    const std::vector<float> a = Random(rows * k, 9);
    for (const uk::NbitsTable* t : uk::SupportedNbitsTables()) {
      SCOPED_TRACE(testing::Message() << t->name << " rows=" << rows);
      ExpectFitsItsBound([&] { return uk::MatMulNbitsScratchBytes(rows, k, block); },
                         [&] {
                           std::vector<float> y(static_cast<size_t>(rows * n));
                           uk::MatMulNbits(*t, a.data(), rows, k, q4_packed.data(),
                                           scale_packed.data(), offset_packed.data(), nullptr, n,
                                           block, y.data());
                           return y;
                         });
    }
  }

  const cuvil_uk_pool_params pool{17, 23, 8, 11, 3, 3, 2, 2, 1, 1, 1, 1};
  const std::vector<float> x = Random(3 * 17 * 23, 10);
  ExpectFitsItsBound([&] { return uk::MaxPool2dScratchBytes(pool); },
                     [&] {
                       std::vector<float> y(3 * 8 * 11);
                       cuvil_uk_maxpool2d(&pool, x.data(), y.data(), 3);
                       return y;
                     });
}

}  // namespace
}  // namespace cuvil
