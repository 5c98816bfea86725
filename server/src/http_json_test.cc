#include "http_json.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil::http_json {
namespace {

using nlohmann::json;

template <typename T>
std::vector<T> As(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

TEST(HttpJsonTest, DecodesFlatAndNestedFp32) {
  std::vector<uint8_t> out;
  ASSERT_TRUE(DecodeTensorData(json::parse("[1, 2.5, -3]"), "FP32", 3, "x", &out).ok());
  EXPECT_EQ(As<float>(out), (std::vector<float>{1, 2.5f, -3}));
  ASSERT_TRUE(DecodeTensorData(json::parse("[[1, 2], [3, 4]]"), "FP32", 4, "x", &out).ok());
  EXPECT_EQ(As<float>(out), (std::vector<float>{1, 2, 3, 4}));
}

TEST(HttpJsonTest, DecodesIntegersBoolsAndBytes) {
  std::vector<uint8_t> out;
  ASSERT_TRUE(
      DecodeTensorData(json::parse("[[-1], [9007199254740993]]"), "INT64", 2, "i", &out).ok());
  EXPECT_EQ(As<int64_t>(out), (std::vector<int64_t>{-1, 9007199254740993LL}));
  ASSERT_TRUE(DecodeTensorData(json::parse("[true, false, 1]"), "BOOL", 3, "b", &out).ok());
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 0, 1}));
  ASSERT_TRUE(DecodeTensorData(json::parse("[255, 0]"), "UINT8", 2, "u", &out).ok());
  EXPECT_EQ(out, (std::vector<uint8_t>{255, 0}));
  ASSERT_TRUE(DecodeTensorData(json::parse(R"(["ab", ""])"), "BYTES", 2, "s", &out).ok());
  EXPECT_EQ(out, (std::vector<uint8_t>{2, 0, 0, 0, 'a', 'b', 0, 0, 0, 0}));
}

TEST(HttpJsonTest, RejectsBadData) {
  std::vector<uint8_t> out;
  absl::Status s = DecodeTensorData(json::parse("[1, 2]"), "FP32", 3, "x", &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("needs 3 elements, data has 2"), std::string::npos) << s;
  s = DecodeTensorData(json::parse(R"([1, "a"])"), "FP32", 2, "x", &out);
  EXPECT_NE(s.message().find("element 1"), std::string::npos) << s;
  EXPECT_FALSE(DecodeTensorData(json::parse("[1.5]"), "INT32", 1, "x", &out).ok());
  EXPECT_FALSE(DecodeTensorData(json::parse("[256]"), "UINT8", 1, "x", &out).ok());
  EXPECT_FALSE(DecodeTensorData(json::parse("[-1]"), "UINT32", 1, "x", &out).ok());
  EXPECT_FALSE(DecodeTensorData(json::parse("[2]"), "BOOL", 1, "x", &out).ok());
  EXPECT_FALSE(DecodeTensorData(json::parse("[1]"), "FP16", 1, "x", &out).ok());
  EXPECT_FALSE(DecodeTensorData(json::parse("[1]"), "NOPE", 1, "x", &out).ok());
  std::string deep(100, '[');
  deep += "1" + std::string(100, ']');
  EXPECT_FALSE(DecodeTensorData(json::parse(deep), "FP32", 1, "x", &out).ok());
}

TEST(HttpJsonTest, DecodeCostBoundsWhatParsingTakes) {
  // Many tiny values cost far more parsed than their bytes: the estimate says so up front.
  std::string zeros = "[";
  for (int i = 0; i < 100000; ++i) zeros += i ? ",0" : "0";
  zeros += "]";
  auto cost_of = [](std::string_view text) { return ScanJson(text).decode_cost; };
  const uint64_t cost = cost_of(zeros);
  EXPECT_GE(cost, 100000u * (sizeof(json) + 8));  // A tree node and a tensor element each.
  EXPECT_GE(cost, 15 * zeros.size());
  // Numbers count once however long; brackets, strings (escapes included) and members add up.
  EXPECT_EQ(cost_of("[123456789, -1.5e10]"), cost_of("[1,2]"));
  EXPECT_EQ(cost_of("[1,2]"), 3 * 40 + 64);
  EXPECT_EQ(cost_of(R"({"a":"b\"c"})"), 40 + 64 + (40 + 48 + 2) + 96 + (40 + 48 + 8));
  EXPECT_EQ(cost_of(""), 0u);
  EXPECT_EQ(cost_of("  \n"), 0u);
  // The same pass bounds the nesting: a text too deep is flagged, whatever its cost so far.
  EXPECT_FALSE(ScanJson(zeros).too_deep);
  EXPECT_TRUE(ScanJson("[[[1]]]", 2).too_deep);
  EXPECT_FALSE(ScanJson("[[[1]]]", 3).too_deep);
}

TEST(HttpJsonTest, DataIsCountedBeforeTheTensorIsAllocated) {
  std::vector<uint8_t> out = {7};
  // A shape of 2^40 elements with one value: refused from the count, nothing allocated.
  absl::Status s = DecodeTensorData(json::parse("[1]"), "FP64", int64_t{1} << 40, "x", &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("shape needs 1099511627776 elements, data has 1"), std::string::npos)
      << s;
  // A bad element after the count matched leaves no half-decoded tensor.
  s = DecodeTensorData(json::parse(R"([[1, 2], [3, "x"]])"), "INT64", 4, "x", &out);
  EXPECT_NE(s.message().find("element 3"), std::string::npos) << s;
  EXPECT_TRUE(out.empty());
}

TEST(HttpJsonTest, NestingIsBoundedBeforeParsing) {
  EXPECT_TRUE(CheckJsonNesting(R"({"inputs":[{"data":[[1,2],[3,4]]}]})").ok());
  std::string at_limit = std::string(kMaxJsonNesting, '[') + std::string(kMaxJsonNesting, ']');
  EXPECT_TRUE(CheckJsonNesting(at_limit).ok());
  std::string over = "[" + at_limit + "]";
  absl::Status s = CheckJsonNesting(over);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "JSON nesting deeper than 64");
  // 100k deep, unterminated: refused in one pass, nothing parsed.
  EXPECT_FALSE(CheckJsonNesting(std::string(100000, '[')).ok());
  std::string objects;
  for (int i = 0; i <= kMaxJsonNesting; ++i) objects += R"({"a":)";
  EXPECT_FALSE(CheckJsonNesting(objects).ok());
  // Brackets inside strings (with escaped quotes) do not count; closing resets the depth.
  std::string in_string = "[\"" + std::string(1000, '[') + "\\\"[\"]";
  EXPECT_TRUE(CheckJsonNesting(in_string).ok());
  std::string siblings;
  for (int i = 0; i < 1000; ++i) siblings += "[[]]";
  EXPECT_TRUE(CheckJsonNesting("[" + siblings + "]").ok());
  EXPECT_TRUE(CheckJsonNesting(over, 65).ok());
}

TEST(HttpJsonTest, ElementCount) {
  EXPECT_EQ(*ElementCount({2, 3}, "x"), 6);
  EXPECT_EQ(*ElementCount({}, "x"), 1);
  EXPECT_EQ(*ElementCount({0, 5}, "x"), 0);
  EXPECT_FALSE(ElementCount({-1, 3}, "x").ok());
  EXPECT_FALSE(ElementCount({1LL << 40, 1LL << 40}, "x").ok());
}

TEST(HttpJsonTest, EncodesArraysShortestRoundTrip) {
  std::string out;
  float f[] = {0.1f, 1.0f, -2.5f, std::numeric_limits<float>::quiet_NaN()};
  AppendJsonArray(DType::kFloat32, reinterpret_cast<const uint8_t*>(f), 4, &out);
  EXPECT_EQ(out, "[0.1,1,-2.5,NaN]");
  out.clear();
  bool b[] = {true, false};
  AppendJsonArray(DType::kBool, reinterpret_cast<const uint8_t*>(b), 2, &out);
  EXPECT_EQ(out, "[true,false]");
  out.clear();
  int64_t i[] = {-5, 1LL << 40};
  AppendJsonArray(DType::kInt64, reinterpret_cast<const uint8_t*>(i), 2, &out);
  EXPECT_EQ(out, "[-5,1099511627776]");
  out.clear();
  AppendJsonString("a\"b", &out);
  EXPECT_EQ(out, R"("a\"b")");
}

TEST(HttpJsonTest, ClassifiesTopKPerRow) {
  float v[] = {0.1f, 0.7f, 0.2f, 3, 1, 2};
  std::vector<std::string> c =
      Classify(DType::kFloat32, reinterpret_cast<const uint8_t*>(v), 2, 3, 2);
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].substr(c[0].find(':')), ":1");
  EXPECT_EQ(c[1].substr(c[1].find(':')), ":2");
  EXPECT_EQ(c[2], "3.000000:0");
  EXPECT_EQ(c[3], "2.000000:2");
  std::string bytes;
  AppendBytesElements({"ab"}, &bytes);
  EXPECT_EQ(bytes, std::string("\x02\0\0\0ab", 6));
}

}  // namespace
}  // namespace cuvil::http_json
