// ONNX Runtime's com.microsoft MatMulNBits (4-bit block-quantized weights) through the importer:
// results against a reference that dequantises the weights, with every zero-point form and a
// K that is not a multiple of the block; and the clear errors of what it does not run.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

enum class ZeroPoints { kNone, kPackedUint8, kFloat };

struct Weights {
  int64_t k, n, block, blocks;
  std::vector<uint8_t> q4;     // [n][blocks][block / 2]
  std::vector<float> scales;   // [n * blocks]
  std::vector<uint8_t> zp_u8;  // [n][ceil(blocks / 2)]
  std::vector<float> zp_f32;   // [n * blocks]
  std::vector<float> bias;     // [n]

  // The weight w[n][k] as ONNX Runtime dequantises it.
  double At(int64_t col, int64_t row, ZeroPoints zp) const {
    const uint8_t byte = q4[(col * blocks * block + row) / 2];
    const int q = row % 2 == 0 ? byte & 0x0F : byte >> 4;
    const int64_t b = row / block;
    double z = 8;
    if (zp == ZeroPoints::kPackedUint8) {
      const uint8_t zb = zp_u8[col * ((blocks + 1) / 2) + b / 2];
      z = b % 2 == 0 ? zb & 0x0F : zb >> 4;
    } else if (zp == ZeroPoints::kFloat) {
      z = zp_f32[col * blocks + b];
    }
    return (q - z) * scales[col * blocks + b];
  }
};

Weights RandomWeights(int64_t k, int64_t n, int64_t block) {
  Weights w{k, n, block, (k + block - 1) / block, {}, {}, {}, {}, {}};
  std::mt19937 rng(static_cast<uint32_t>(k * 31 + n + block));
  w.q4.resize(static_cast<size_t>(n * w.blocks * block / 2));
  for (uint8_t& b : w.q4) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n * w.blocks; ++i) {
    w.scales.push_back(0.01f + 0.001f * static_cast<float>(rng() % 50));
    w.zp_f32.push_back(static_cast<float>(rng() % 16) + 0.5f);
  }
  w.zp_u8.resize(static_cast<size_t>(n * ((w.blocks + 1) / 2)));
  for (uint8_t& b : w.zp_u8) b = static_cast<uint8_t>(rng());
  for (int64_t i = 0; i < n; ++i) w.bias.push_back(0.1f * static_cast<float>(i % 7) - 0.3f);
  return w;
}

void AddInitializer(onnx::GraphProto* g, const std::string& name, int32_t type,
                    std::vector<int64_t> dims, const void* data, size_t bytes) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  t->set_raw_data(data, bytes);
}

// x [batch, k] -> MatMulNBits -> y [batch, n]. `bits` and `constant_b` make invalid models.
std::string Model(const Weights& w, ZeroPoints zp, bool with_bias, int64_t bits = 4,
                  bool constant_b = true, int64_t block_attr = 0) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* ms = m.add_opset_import();
  ms->set_domain("com.microsoft");
  ms->set_version(1);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("nbits");
  auto io = [](onnx::ValueInfoProto* v, const std::string& name, int64_t width) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(width);
  };
  io(g->add_input(), "x", w.k);
  io(g->add_output(), "y", w.n);
  onnx::NodeProto* node = g->add_node();
  node->set_op_type("MatMulNBits");
  node->set_domain("com.microsoft");
  node->set_name("fc");
  node->add_input("x");
  node->add_input("B");
  node->add_input("scales");
  node->add_input(zp == ZeroPoints::kNone ? "" : "zero_points");
  if (with_bias) {
    node->add_input("");  // g_idx
    node->add_input("bias");
  }
  node->add_output("y");
  auto attr = [&](const char* name, int64_t v) {
    auto* a = node->add_attribute();
    a->set_name(name);
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  };
  attr("K", w.k);
  attr("N", w.n);
  attr("bits", bits);
  attr("block_size", block_attr != 0 ? block_attr : w.block);
  if (constant_b) {
    AddInitializer(g, "B", onnx::TensorProto::UINT8, {w.n, w.blocks, w.block / 2}, w.q4.data(),
                   w.q4.size());
  } else {
    onnx::ValueInfoProto* b = g->add_input();
    b->set_name("B");
    auto* tt = b->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::UINT8);
    for (int64_t d : {w.n, w.blocks, w.block / 2}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  AddInitializer(g, "scales", onnx::TensorProto::FLOAT, {w.n * w.blocks}, w.scales.data(),
                 w.scales.size() * sizeof(float));
  if (zp == ZeroPoints::kPackedUint8) {
    AddInitializer(g, "zero_points", onnx::TensorProto::UINT8,
                   {static_cast<int64_t>(w.zp_u8.size())}, w.zp_u8.data(), w.zp_u8.size());
  } else if (zp == ZeroPoints::kFloat) {
    AddInitializer(g, "zero_points", onnx::TensorProto::FLOAT, {w.n * w.blocks}, w.zp_f32.data(),
                   w.zp_f32.size() * sizeof(float));
  }
  if (with_bias) {
    AddInitializer(g, "bias", onnx::TensorProto::FLOAT, {w.n}, w.bias.data(),
                   w.bias.size() * sizeof(float));
  }
  return m.SerializeAsString();
}

struct Case {
  int64_t k, n, block;
  ZeroPoints zp;
  bool bias;
};

class MatMulNbitsModelTest : public ::testing::TestWithParam<Case> {};

TEST_P(MatMulNbitsModelTest, MatchesTheDequantisedProduct) {
  const Case c = GetParam();
  const Weights w = RandomWeights(c.k, c.n, c.block);
  auto compiled = CompileOnnxBytes(Model(w, c.zp, c.bias));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("nbits/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  for (int64_t batch : {1, 3, 6}) {
    HostTensor x(DType::kFloat32, {batch, c.k});
    std::mt19937 rng(static_cast<uint32_t>(batch));
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (int64_t i = 0; i < batch * c.k; ++i) x.data_as<float>()[i] = uniform(rng);
    auto y = (*loaded)->Run({x});
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ((*y)[0].shape(), (std::vector<int64_t>{batch, c.n}));
    for (int64_t r = 0; r < batch; ++r) {
      for (int64_t col = 0; col < c.n; ++col) {
        double want = c.bias ? w.bias[col] : 0.0;
        for (int64_t row = 0; row < c.k; ++row) {
          want += double{x.data_as<float>()[r * c.k + row]} * w.At(col, row, c.zp);
        }
        ASSERT_NEAR((*y)[0].data_as<float>()[r * c.n + col], want, 1e-4 * (1 + std::fabs(want)))
            << "batch " << batch << " row " << r << " column " << col;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Forms, MatMulNbitsModelTest,
    ::testing::Values(Case{64, 16, 32, ZeroPoints::kNone, false},
                      Case{100, 24, 32, ZeroPoints::kPackedUint8, true},  // 4 blocks, last short
                      Case{96, 10, 32, ZeroPoints::kPackedUint8, false},  // 3 blocks: odd count
                      Case{80, 7, 16, ZeroPoints::kFloat, true},
                      Case{512, 33, 128, ZeroPoints::kPackedUint8, true}));

TEST(MatMulNbitsModelTest, WhatItDoesNotRunIsRefusedClearly) {
  const Weights w = RandomWeights(64, 8, 32);
  auto bits8 = CompileOnnxBytes(Model(w, ZeroPoints::kNone, false, /*bits=*/8));
  ASSERT_FALSE(bits8.ok());
  EXPECT_EQ(bits8.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_NE(bits8.status().message().find("bits = 4"), std::string::npos) << bits8.status();

  auto runtime_b = CompileOnnxBytes(Model(w, ZeroPoints::kNone, false, 4, /*constant_b=*/false));
  ASSERT_FALSE(runtime_b.ok());
  EXPECT_NE(runtime_b.status().message().find("B must be a constant"), std::string::npos)
      << runtime_b.status();

  // block_size 64 makes the scales of 2 blocks of 32 per column one too many per column.
  auto wrong_block = CompileOnnxBytes(Model(w, ZeroPoints::kNone, false, 4, true, 64));
  ASSERT_FALSE(wrong_block.ok());
  EXPECT_NE(wrong_block.status().message().find("scales is float32[16], expected 8"),
            std::string::npos)
      << wrong_block.status();

  auto odd_block = CompileOnnxBytes(Model(w, ZeroPoints::kNone, false, 4, true, 24));
  ASSERT_FALSE(odd_block.ok());
  EXPECT_NE(odd_block.status().message().find("multiple of 16"), std::string::npos)
      << odd_block.status();
}

}  // namespace
}  // namespace cuvil
