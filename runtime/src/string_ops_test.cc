#include "cuvil/runtime/string_ops.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cuvil/runtime/dtype.h"
#include "cuvil/runtime/host_tensor.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

std::vector<CuvilString> Views(const std::vector<std::string>& words) {
  std::vector<CuvilString> out;
  for (const std::string& w : words) out.push_back({w.data(), static_cast<int64_t>(w.size())});
  return out;
}

std::vector<std::string> Strings(const CuvilString* views, int64_t n) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < n; ++i) out.emplace_back(views[i].data, views[i].size);
  return out;
}

TEST(StringOpsTest, FloatsFormatAsTheShortestDecimalThatReadsBack) {
  const std::vector<float> v = {0.039187793f,
                                0.9767611f,
                                1e20f,
                                -0.0f,
                                3.0f,
                                std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};
  std::vector<CuvilString> out(v.size());
  StringHeap heap;
  ASSERT_EQ(cuvil_rt_format_strings(v.data(), static_cast<int32_t>(DType::kFloat32),
                                    static_cast<int64_t>(v.size()), out.data(), &heap),
            0);
  EXPECT_EQ(Strings(out.data(), static_cast<int64_t>(out.size())),
            (std::vector<std::string>{"0.039187793", "0.9767611", "1e+20", "-0", "3", "NaN", "INF",
                                      "-INF"}));
  // Each reads back to the same float.
  std::vector<float> back(v.size());
  ASSERT_EQ(cuvil_rt_parse_strings(out.data(), static_cast<int64_t>(out.size()),
                                   static_cast<int32_t>(DType::kFloat32), back.data()),
            0);
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) {
      EXPECT_TRUE(std::isnan(back[i]));
    } else {
      EXPECT_EQ(back[i], v[i]) << i;
    }
  }
}

TEST(StringOpsTest, IntegersAndBoolsFormatInDecimal) {
  const std::vector<int64_t> v = {0, -1, std::numeric_limits<int64_t>::min(), 42};
  const std::vector<uint8_t> flags = {1, 0};
  std::vector<CuvilString> out(v.size()), out_flags(2);
  StringHeap heap;
  ASSERT_EQ(
      cuvil_rt_format_strings(v.data(), static_cast<int32_t>(DType::kInt64), 4, out.data(), &heap),
      0);
  EXPECT_EQ(Strings(out.data(), 4),
            (std::vector<std::string>{"0", "-1", "-9223372036854775808", "42"}));
  ASSERT_EQ(cuvil_rt_format_strings(flags.data(), static_cast<int32_t>(DType::kBool), 2,
                                    out_flags.data(), &heap),
            0);
  EXPECT_EQ(Strings(out_flags.data(), 2), (std::vector<std::string>{"1", "0"}));
}

TEST(StringOpsTest, FormattingWithoutAHeapFailsAndWritesNothing) {
  const float v = 1.0f;
  CuvilString out{nullptr, 7};
  EXPECT_EQ(cuvil_rt_format_strings(&v, static_cast<int32_t>(DType::kFloat32), 1, &out, nullptr),
            -1);
  EXPECT_EQ(out.size, 7);
}

TEST(StringOpsTest, ParsingAcceptsOnnxSpellingsAndNamesTheFirstBadString) {
  const std::vector<std::string> words = {" 0.5", "+INF", "-inf", "NaN", "1e-3 ", "Infinity"};
  std::vector<float> got(words.size());
  ASSERT_EQ(cuvil_rt_parse_strings(Views(words).data(), 6, static_cast<int32_t>(DType::kFloat32),
                                   got.data()),
            0);
  EXPECT_EQ(got[0], 0.5f);
  EXPECT_EQ(got[1], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[2], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(got[3]));
  EXPECT_EQ(got[4], 1e-3f);
  EXPECT_EQ(got[5], std::numeric_limits<float>::infinity());

  const std::vector<std::string> bad = {"7", "12", "1.5", "x"};
  std::vector<int32_t> ints(bad.size());
  // "1.5" is not an int32: the third string.
  EXPECT_EQ(cuvil_rt_parse_strings(Views(bad).data(), 4, static_cast<int32_t>(DType::kInt32),
                                   ints.data()),
            3);
  const std::vector<std::string> range = {"255", "256"};
  std::vector<uint8_t> bytes(2);
  EXPECT_EQ(cuvil_rt_parse_strings(Views(range).data(), 2, static_cast<int32_t>(DType::kUInt8),
                                   bytes.data()),
            2);
  const std::vector<std::string> empty = {""};
  double d;
  EXPECT_EQ(
      cuvil_rt_parse_strings(Views(empty).data(), 1, static_cast<int32_t>(DType::kFloat64), &d), 1);
  const std::vector<std::string> truth = {"true", "FALSE", "0", "2.5"};
  std::vector<uint8_t> b(4);
  ASSERT_EQ(
      cuvil_rt_parse_strings(Views(truth).data(), 4, static_cast<int32_t>(DType::kBool), b.data()),
      0);
  EXPECT_EQ(b, (std::vector<uint8_t>{1, 0, 0, 1}));
}

TEST(StringOpsTest, NormalizerDropsStopwordsAndChangesCase) {
  const std::vector<std::string> words = {"Monday", "tuesday", "MONDAY", "Straße", "ÉTÉ"};
  const std::vector<std::string> stop = {"monday"};
  std::vector<CuvilString> out(words.size());
  StringHeap heap;
  // Case-insensitive stopwords: both Mondays go.
  int64_t kept =
      cuvil_rt_normalize_strings(Views(words).data(), 5, /*case_change=*/2,
                                 /*case_sensitive=*/0, Views(stop).data(), 1, out.data(), &heap);
  ASSERT_EQ(kept, 3);
  // Simple case mapping: ß has no one-letter upper case and stays.
  EXPECT_EQ(Strings(out.data(), kept), (std::vector<std::string>{"TUESDAY", "STRAßE", "ÉTÉ"}));
  // Case-sensitive: only the exact match goes; lower-casing is UTF-8 aware.
  kept = cuvil_rt_normalize_strings(Views(words).data(), 5, 1, 1, Views(stop).data(), 1, out.data(),
                                    &heap);
  ASSERT_EQ(kept, 5);
  EXPECT_EQ(Strings(out.data(), kept),
            (std::vector<std::string>{"monday", "tuesday", "monday", "straße", "été"}));
}

TEST(StringOpsTest, NormalizerLeavesOneEmptyStringWhenEverythingIsAStopword) {
  const std::vector<std::string> words = {"monday", "monday"};
  const std::vector<std::string> stop = {"monday"};
  std::vector<CuvilString> out(3, CuvilString{"x", 1});
  EXPECT_EQ(cuvil_rt_normalize_strings(Views(words).data(), 2, 0, 1, Views(stop).data(), 1,
                                       out.data(), nullptr),
            1);
  EXPECT_EQ(out[0].size, 0);
  // Without a case change no heap is needed: the kept views are the input's.
  const std::vector<std::string> keep = {"a", "monday", "b"};
  EXPECT_EQ(cuvil_rt_normalize_strings(Views(keep).data(), 3, 0, 1, Views(stop).data(), 1,
                                       out.data(), nullptr),
            2);
  EXPECT_EQ(Strings(out.data(), 2), (std::vector<std::string>{"a", "b"}));
  // A case change without a heap fails.
  EXPECT_EQ(
      cuvil_rt_normalize_strings(Views(keep).data(), 3, 2, 1, nullptr, 0, out.data(), nullptr), -1);
}

TEST(StringOpsTest, HeapKeepsEveryAllocationValid) {
  StringHeap heap;
  std::vector<char*> blocks;
  for (int i = 0; i < 1000; ++i) {
    char* p = heap.Allocate(static_cast<size_t>(i % 97));
    std::fill(p, p + i % 97, static_cast<char>(i));
    blocks.push_back(p);
  }
  char* big = heap.Allocate(1 << 20);
  std::fill(big, big + (1 << 20), 'z');
  for (int i = 0; i < 1000; ++i) {
    for (int j = 0; j < i % 97; ++j) ASSERT_EQ(blocks[i][j], static_cast<char>(i));
  }
  EXPECT_EQ(heap.bytes_used() >= (1u << 20), true);
}

TEST(HostTensorStringsTest, CopiesShareTheStringsAndOutliveTheOriginal) {
  HostTensor copy;
  {
    HostTensor t = HostTensor::Strings({2, 2}, {"a", "", std::string(100, 'q'), "dé"});
    EXPECT_EQ(t.dtype(), DType::kString);
    EXPECT_EQ(t.byte_size(), 4 * sizeof(CuvilString));
    copy = t;
  }
  EXPECT_EQ(copy.strings(), (std::vector<std::string>{"a", "", std::string(100, 'q'), "dé"}));
  HostTensor zero(DType::kString, {3});
  EXPECT_EQ(zero.strings(), (std::vector<std::string>{"", "", ""}));
}

}  // namespace
}  // namespace cuvil
