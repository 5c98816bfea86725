// The register-blocked product over compile-time packed weights against a naive reference, for
// row counts around the register blocks (6 and 12 rows, remainders of 1, 2, 4 and 8) and column
// counts around the panels (16 and 32 columns), with kernels shaped for the host's vector width,
// for 256 bits (the AVX2 path, CUVIL_TARGET_VECTOR_BITS=256), and for the cross targets' widths
// (CompileOptions::vector_bits: 128 as NEON and WebAssembly SIMD, 64 as a Cortex-M7, 32 as scalar
// WebAssembly), run here on the host.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <random>
#include <string>

#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/runtime/parallel.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace cuvil {
namespace {

// y = x @ W^T (+ bias) with W [n, k] constant: PyTorch's Linear as Gemm(transB=1), or, with
// `matmul`, y = x @ W with W [k, n] over x [batch, 3, k].
std::string LinearModel(int64_t k, int64_t n, bool matmul, const std::vector<float>& w,
                        const std::vector<float>& bias) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* g = model.mutable_graph();
  g->set_name("linear");
  auto io = [&](onnx::ValueInfoProto* info, const char* name, int64_t last) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    if (matmul) tt->mutable_shape()->add_dim()->set_dim_value(3);
    tt->mutable_shape()->add_dim()->set_dim_value(last);
  };
  io(g->add_input(), "x", k);
  io(g->add_output(), "y", n);
  auto* wt = g->add_initializer();
  wt->set_name("w");
  wt->set_data_type(onnx::TensorProto::FLOAT);
  wt->add_dims(matmul ? k : n);
  wt->add_dims(matmul ? n : k);
  for (float v : w) wt->add_float_data(v);
  auto* node = g->add_node();
  node->add_input("x");
  node->add_input("w");
  node->add_output("y");
  if (matmul) {
    node->set_op_type("MatMul");
  } else {
    node->set_op_type("Gemm");
    auto* a = node->add_attribute();
    a->set_name("transB");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(1);
    auto* bt = g->add_initializer();
    bt->set_name("bias");
    bt->set_data_type(onnx::TensorProto::FLOAT);
    bt->add_dims(n);
    for (float v : bias) bt->add_float_data(v);
    node->add_input("bias");
  }
  return model.SerializeAsString();
}

// Compile options for kernels shaped for `bits`: "host" and "256" through the environment (the
// host's own widths), the cross targets' widths through CompileOptions::vector_bits.
CompileOptions OptionsForVectorBits(const std::string& bits) {
  CompileOptions options;
  if (bits != "host" && bits != "256") {
    unsetenv("CUVIL_TARGET_VECTOR_BITS");
    options.vector_bits = std::atoi(bits.c_str());
  } else {
    setenv("CUVIL_TARGET_VECTOR_BITS", bits.c_str(), 1);
  }
  return options;
}

TEST(GemmPackingTest, MatchesNaiveProductAroundBlockEdges) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  int id = 0;
  for (const char* bits : {"host", "256", "128", "64", "32"}) {
    const CompileOptions options = OptionsForVectorBits(bits);
    for (bool matmul : {false, true}) {
      for (int64_t n : {1, 10, 16, 17, 33, 40, 64}) {
        for (int64_t k : {1, 7, 33, 1500}) {  // 1500: big enough to split across threads.
          std::vector<float> w(n * k), bias(n);
          for (float& v : w) v = dist(rng);
          for (float& v : bias) v = dist(rng);
          auto compiled = CompileOnnxBytes(LinearModel(k, n, matmul, w, bias), options);
          ASSERT_TRUE(compiled.ok()) << compiled.status();
          auto loaded = (*engine)->Load("gemm/" + std::to_string(id++), std::move(*compiled));
          ASSERT_TRUE(loaded.ok()) << loaded.status();
          for (int64_t batch : {1, 3, 4, 5, 9, 12, 13, 27}) {
            SetIntraOpThreads(batch % 2 == 0 ? 1 : 3);  // Panels split across threads, or not.
            int64_t rows = matmul ? batch * 3 : batch;
            std::vector<int64_t> shape =
                matmul ? std::vector<int64_t>{batch, 3, k} : std::vector<int64_t>{batch, k};
            HostTensor x(DType::kFloat32, shape);
            for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = dist(rng);
            auto y = (*loaded)->Run({x});
            ASSERT_TRUE(y.ok()) << y.status();
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < n; ++c) {
                double want = matmul ? 0 : bias[c], magnitude = std::fabs(want);
                for (int64_t j = 0; j < k; ++j) {
                  const double term =
                      x.data_as<float>()[r * k + j] * (matmul ? w[j * n + c] : w[c * k + j]);
                  want += term;
                  magnitude += std::fabs(term);
                }
                // float32 sums in another order than the double reference: an error bound that
                // grows with the terms' magnitudes (k = 1500 sums to ~40 here).
                ASSERT_NEAR((*y)[0].data_as<float>()[r * n + c], want, 1e-4 + 2e-6 * magnitude)
                    << (matmul ? "MatMul" : "Gemm") << " n=" << n << " k=" << k
                    << " batch=" << batch << " row " << r << " col " << c << " threads "
                    << IntraOpThreads() << " vector bits " << bits;
              }
            }
          }
        }
      }
    }
  }
  unsetenv("CUVIL_TARGET_VECTOR_BITS");
}

// With batch-invariant kernels (CompileOptions::batch_invariant) a row's output has the same
// bits whatever the batch it runs in and however threads split the rows: each of 29 rows run in
// one batch of 29 (register blocks, remainders, split across 3 threads) equals that row run
// alone, for Gemm and for MatMul over [batch, 3, k].
TEST(GemmPackingTest, BatchInvariantRowsHaveTheSameBitsInEveryBatch) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> dist(-1, 1);
  int id = 0;
  for (bool matmul : {false, true}) {
    const int64_t k = 67, n = 40, batch = 29, per = matmul ? 3 : 1;
    std::vector<float> w(n * k), bias(n);
    for (float& v : w) v = dist(rng);
    for (float& v : bias) v = dist(rng);
    CompileOptions options;
    options.batch_invariant = true;
    auto compiled = CompileOnnxBytes(LinearModel(k, n, matmul, w, bias), options);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto loaded = (*engine)->Load("invariant/" + std::to_string(id++), std::move(*compiled));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto shape = [&](int64_t b) {
      return matmul ? std::vector<int64_t>{b, 3, k} : std::vector<int64_t>{b, k};
    };
    HostTensor x(DType::kFloat32, shape(batch));
    for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = dist(rng);
    SetIntraOpThreads(3);
    auto all = (*loaded)->Run({x});
    ASSERT_TRUE(all.ok()) << all.status();
    SetIntraOpThreads(1);
    for (int64_t b = 0; b < batch; ++b) {
      HostTensor one(DType::kFloat32, shape(1));
      std::copy_n(x.data_as<float>() + b * per * k, per * k, one.data_as<float>());
      auto y = (*loaded)->Run({one});
      ASSERT_TRUE(y.ok()) << y.status();
      for (int64_t i = 0; i < per * n; ++i) {
        ASSERT_EQ(std::bit_cast<uint32_t>((*y)[0].data_as<float>()[i]),
                  std::bit_cast<uint32_t>((*all)[0].data_as<float>()[b * per * n + i]))
            << (matmul ? "MatMul" : "Gemm") << " row " << b << " element " << i;
      }
    }
  }
}

// z = x @ y with both operands activations, x [batch, heads, m, k] and y [batch | 1, heads, k, n]:
// attention's Q K^T and P V, which pack B at run time. `heads` 1 and an unbroadcast batch of 1
// make a single matrix, whose panels the threads split; otherwise threads take whole matrices.
std::string ActivationMatMulModel(int64_t heads, int64_t m, int64_t k, int64_t n, bool broadcast) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  auto* g = model.mutable_graph();
  g->set_name("attention_matmul");
  auto io = [&](onnx::ValueInfoProto* info, const char* name, bool batch, int64_t rows,
                int64_t cols) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    if (batch) {
      tt->mutable_shape()->add_dim()->set_dim_param("batch");
    } else {
      tt->mutable_shape()->add_dim()->set_dim_value(1);
    }
    tt->mutable_shape()->add_dim()->set_dim_value(heads);
    tt->mutable_shape()->add_dim()->set_dim_value(rows);
    tt->mutable_shape()->add_dim()->set_dim_value(cols);
  };
  io(g->add_input(), "x", true, m, k);
  io(g->add_input(), "y", !broadcast, k, n);
  io(g->add_output(), "z", true, m, n);
  auto* node = g->add_node();
  node->set_op_type("MatMul");
  node->add_input("x");
  node->add_input("y");
  node->add_output("z");
  return model.SerializeAsString();
}

TEST(GemmPackingTest, RunTimePackedMatMulMatchesNaiveProduct) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1, 1);
  int id = 0;
  for (const char* bits : {"host", "256", "128", "64", "32"}) {
    const CompileOptions options = OptionsForVectorBits(bits);
    for (int64_t heads : {1, 3}) {
      for (bool broadcast : {false, true}) {
        for (auto [m, k, n] : {std::array<int64_t, 3>{13, 9, 33}, {4, 64, 16}, {29, 5, 70}}) {
          auto compiled =
              CompileOnnxBytes(ActivationMatMulModel(heads, m, k, n, broadcast), options);
          ASSERT_TRUE(compiled.ok()) << compiled.status();
          auto loaded = (*engine)->Load("mm/" + std::to_string(id++), std::move(*compiled));
          ASSERT_TRUE(loaded.ok()) << loaded.status();
          for (int64_t batch : {1, 2}) {
            SetIntraOpThreads(batch == 1 ? 2 : 1);
            HostTensor x(DType::kFloat32, {batch, heads, m, k});
            HostTensor y(DType::kFloat32, {broadcast ? 1 : batch, heads, k, n});
            for (HostTensor* t : {&x, &y}) {
              for (int64_t i = 0; i < t->num_elements(); ++i) t->data_as<float>()[i] = dist(rng);
            }
            auto z = (*loaded)->Run({x, y});
            ASSERT_TRUE(z.ok()) << z.status();
            for (int64_t mat = 0; mat < batch * heads; ++mat) {
              const float* xm = x.data_as<float>() + mat * m * k;
              const float* ym = y.data_as<float>() + (broadcast ? mat % heads : mat) * k * n;
              const float* zm = (*z)[0].data_as<float>() + mat * m * n;
              for (int64_t r = 0; r < m; ++r) {
                for (int64_t c = 0; c < n; ++c) {
                  double want = 0;
                  for (int64_t j = 0; j < k; ++j) want += xm[r * k + j] * ym[j * n + c];
                  ASSERT_NEAR(zm[r * n + c], want, 1e-4)
                      << "heads=" << heads << " m=" << m << " k=" << k << " n=" << n
                      << " batch=" << batch << " broadcast=" << broadcast << " matrix " << mat
                      << " row " << r << " col " << c << " vector bits " << bits;
                }
              }
            }
          }
        }
      }
    }
  }
  unsetenv("CUVIL_TARGET_VECTOR_BITS");
}

}  // namespace
}  // namespace cuvil
