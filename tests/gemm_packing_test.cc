// The register-blocked product over compile-time packed weights against a naive reference, for
// row counts around the 4-row block and column counts around the 16-column panel.
#include <random>

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

TEST(GemmPackingTest, MatchesNaiveProductAroundBlockEdges) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  int id = 0;
  for (bool matmul : {false, true}) {
    for (int64_t n : {1, 10, 16, 17, 40}) {
      for (int64_t k : {1, 7, 33, 1500}) {  // 1500: big enough to split across threads.
        std::vector<float> w(n * k), bias(n);
        for (float& v : w) v = dist(rng);
        for (float& v : bias) v = dist(rng);
        auto compiled = CompileOnnxBytes(LinearModel(k, n, matmul, w, bias));
        ASSERT_TRUE(compiled.ok()) << compiled.status();
        auto loaded = (*engine)->Load("gemm/" + std::to_string(id++), std::move(*compiled));
        ASSERT_TRUE(loaded.ok()) << loaded.status();
        for (int64_t batch : {1, 3, 4, 5, 9}) {
          SetIntraOpThreads(batch % 2 == 0 ? 1 : 3);  // Panels split across threads, or not.
          int64_t rows = matmul ? batch * 3 : batch;
          std::vector<int64_t> shape = matmul ? std::vector<int64_t>{batch, 3, k} : std::vector<int64_t>{batch, k};
          HostTensor x(DType::kFloat32, shape);
          for (int64_t i = 0; i < x.num_elements(); ++i) x.data_as<float>()[i] = dist(rng);
          auto y = (*loaded)->Run({x});
          ASSERT_TRUE(y.ok()) << y.status();
          for (int64_t r = 0; r < rows; ++r) {
            for (int64_t c = 0; c < n; ++c) {
              double want = matmul ? 0 : bias[c];
              for (int64_t j = 0; j < k; ++j) {
                want += x.data_as<float>()[r * k + j] * (matmul ? w[j * n + c] : w[c * k + j]);
              }
              ASSERT_NEAR((*y)[0].data_as<float>()[r * n + c], want, 1e-4)
                  << (matmul ? "MatMul" : "Gemm") << " n=" << n << " k=" << k << " batch=" << batch
                  << " row " << r << " col " << c << " threads " << IntraOpThreads();
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace cuvil
