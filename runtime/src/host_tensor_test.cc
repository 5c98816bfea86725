#include "cuvil/runtime/host_tensor.h"

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

// Bytes 0, 1, 2, ... counting its reads; fails every read once `broken` is set.
class CountingBytes : public DeferredBytes {
 public:
  explicit CountingBytes(size_t n) : n_(n) {}
  bool Read(uint8_t* dst) const override {
    reads.fetch_add(1);
    if (broken.load()) {
      failed_.store(true);
      return false;
    }
    for (size_t i = 0; i < n_; ++i) dst[i] = static_cast<uint8_t>(i);
    return true;
  }
  bool failed() const override { return failed_.load(); }
  mutable std::atomic<int> reads{0};
  std::atomic<bool> broken{false};

 private:
  const size_t n_;
  mutable std::atomic<bool> failed_{false};
};

TEST(HostTensorTest, DeferredBytesAreReadOnceAndSharedByCopies) {
  auto source = std::make_shared<CountingBytes>(300);
  HostTensor t = HostTensor::Deferred(DType::kUInt8, {3, 100}, source);
  EXPECT_TRUE(t.deferred());
  EXPECT_EQ(t.byte_size(), 300u);
  HostTensor copy = t;  // Shares the unread bytes.
  std::vector<std::thread> readers;
  std::atomic<int> right{0};
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      const HostTensor& c = t;
      if (c.data()[299] == static_cast<uint8_t>(299) && c.data()[5] == 5) right.fetch_add(1);
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(right.load(), 4);
  EXPECT_EQ(source->reads.load(), 1);
  EXPECT_FALSE(t.deferred());
  EXPECT_EQ(static_cast<const HostTensor&>(copy).data()[7], 7);
  EXPECT_EQ(source->reads.load(), 1);
}

TEST(HostTensorTest, CopyToReadsAnUnreadTensorWithoutKeepingIt) {
  auto source = std::make_shared<CountingBytes>(64);
  HostTensor t = HostTensor::Deferred(DType::kUInt8, {64}, source);
  std::vector<uint8_t> out(64);
  ASSERT_TRUE(t.CopyTo(out.data()));
  ASSERT_TRUE(t.CopyTo(out.data()));
  EXPECT_EQ(out[63], 63);
  EXPECT_EQ(source->reads.load(), 2);
  EXPECT_TRUE(t.deferred());
}

TEST(HostTensorTest, WritingADeferredTensorLeavesItsCopiesAlone) {
  auto source = std::make_shared<CountingBytes>(16);
  HostTensor t = HostTensor::Deferred(DType::kUInt8, {16}, source);
  HostTensor copy = t;
  t.data()[0] = 200;  // Non-const access takes a private copy.
  EXPECT_EQ(t.data()[0], 200);
  EXPECT_EQ(t.data()[1], 1);
  EXPECT_EQ(static_cast<const HostTensor&>(copy).data()[0], 0);
  HostTensor moved = std::move(copy);
  EXPECT_EQ(moved.data()[3], 3);
}

TEST(HostTensorTest, AFailedReadGivesZerosAndSaysSo) {
  auto source = std::make_shared<CountingBytes>(32);
  source->broken.store(true);
  HostTensor t = HostTensor::Deferred(DType::kUInt8, {32}, source);
  std::vector<uint8_t> out(32, 9);
  EXPECT_FALSE(t.CopyTo(out.data()));
  const HostTensor& c = t;
  for (int i = 0; i < 32; ++i) ASSERT_EQ(c.data()[i], 0) << i;
  EXPECT_TRUE(t.read_failed());
  EXPECT_FALSE(t.CopyTo(out.data()));  // Materialized zeros are not the model's bytes.
  HostTensor plain(DType::kUInt8, {4});
  EXPECT_FALSE(plain.read_failed());
  EXPECT_TRUE(plain.CopyTo(out.data()));
}

}  // namespace
}  // namespace cuvil
