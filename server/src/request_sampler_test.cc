#include "request_sampler.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

TensorSpec Spec(std::string name, DType dtype, std::vector<int64_t> dims) {
  TensorSpec s;
  s.name = std::move(name);
  s.dtype = dtype;
  s.dims = std::move(dims);
  return s;
}

// A request whose float input "x" is [rows, 2] filled with `value` and whose int64 input "k" is
// [rows] filled with `rows`; the buffers live in `storage`.
InferenceRequest Request(float value, int64_t rows, std::vector<std::vector<uint8_t>>* storage) {
  InferenceRequest r;
  std::vector<uint8_t> x(static_cast<size_t>(rows) * 2 * sizeof(float));
  for (int64_t i = 0; i < rows * 2; ++i) std::memcpy(&x[i * sizeof(float)], &value, sizeof value);
  std::vector<uint8_t> k(static_cast<size_t>(rows) * sizeof(int64_t));
  for (int64_t i = 0; i < rows; ++i) std::memcpy(&k[i * sizeof(int64_t)], &rows, sizeof rows);
  storage->push_back(std::move(x));
  storage->push_back(std::move(k));
  const auto& xs = (*storage)[storage->size() - 2];
  const auto& ks = (*storage)[storage->size() - 1];
  r.inputs.push_back({xs.data(), xs.size(), {rows, 2}});
  r.inputs.push_back({ks.data(), ks.size(), {rows}});
  r.batch_size = rows;
  return r;
}

TEST(RequestSamplerTest, KeepsEveryNthRequestInTheModelsInputOrderAndOnlyTheNewest) {
  // The executable takes (x, k); the compiled model's signature is (k, x).
  RequestSamplerOptions options;
  options.capacity = 2;
  options.every = 3;
  RequestSampler sampler({Spec("x", DType::kFloat32, {2}), Spec("k", DType::kInt64, {})},
                         {"k", "x"}, options);
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(64);
  for (int i = 0; i < 7; ++i) sampler.Record(Request(static_cast<float>(i), i + 1, &storage));
  // Requests 0, 3 and 6 were kept; the newest two stay.
  auto recent = sampler.Recent();
  ASSERT_EQ(recent.size(), 2u);
  for (size_t s = 0; s < 2; ++s) {
    const float value = s == 0 ? 3.0f : 6.0f;
    const int64_t rows = static_cast<int64_t>(value) + 1;
    ASSERT_EQ(recent[s].size(), 2u);
    EXPECT_EQ(recent[s][0].dtype(), DType::kInt64);
    EXPECT_EQ(recent[s][0].shape(), std::vector<int64_t>({rows}));
    EXPECT_EQ(recent[s][0].data_as<int64_t>()[0], rows);
    EXPECT_EQ(recent[s][1].dtype(), DType::kFloat32);
    EXPECT_EQ(recent[s][1].shape(), std::vector<int64_t>({rows, 2}));
    EXPECT_EQ(recent[s][1].data_as<float>()[2 * rows - 1], value);
  }
}

TEST(RequestSamplerTest, ByteBoundOptOutAndStringsKeepNothing) {
  std::vector<std::vector<uint8_t>> storage;
  storage.reserve(64);
  RequestSamplerOptions small;
  small.capacity = 2;
  small.every = 1;
  small.max_bytes = 64;  // 32 bytes per set: rows <= 2 fit (2*2*4 + 2*8 = 32).
  RequestSampler bounded({Spec("x", DType::kFloat32, {2}), Spec("k", DType::kInt64, {})},
                         {"x", "k"}, small);
  bounded.Record(Request(1.0f, 3, &storage));  // 48 bytes: too big.
  bounded.Record(Request(2.0f, 2, &storage));
  ASSERT_EQ(bounded.Recent().size(), 1u);
  EXPECT_EQ(bounded.Recent()[0][0].data_as<float>()[0], 2.0f);

  RequestSamplerOptions off;
  off.capacity = 0;
  RequestSampler none({Spec("x", DType::kFloat32, {2}), Spec("k", DType::kInt64, {})}, {"x", "k"},
                      off);
  none.Record(Request(1.0f, 1, &storage));
  EXPECT_TRUE(none.Recent().empty());

  RequestSamplerOptions every;
  every.every = 1;
  RequestSampler strings({Spec("x", DType::kFloat32, {2}), Spec("s", DType::kString, {})},
                         {"x", "s"}, every);
  strings.Record(Request(1.0f, 1, &storage));
  EXPECT_TRUE(strings.Recent().empty());
  // Names that do not match the model's inputs: nothing is kept rather than misplaced.
  RequestSampler mismatched({Spec("x", DType::kFloat32, {2}), Spec("k", DType::kInt64, {})},
                            {"x", "other"}, every);
  mismatched.Record(Request(1.0f, 1, &storage));
  EXPECT_TRUE(mismatched.Recent().empty());
}

}  // namespace
}  // namespace cuvil
