// Shared fixtures for server integration tests: a temporary Triton repository holding the
// example models and a running in-process server bound to ephemeral ports.
#ifndef CUVIL_TESTS_SERVER_TEST_UTIL_H_
#define CUVIL_TESTS_SERVER_TEST_UTIL_H_

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "cuvil/compiler/tensor_file.h"
#include "cuvil/server/server.h"
#include "grpc_service.pb.h"
#include "gtest/gtest.h"

namespace cuvil::testing {

inline std::string SourceDir() {
  const char* dir = std::getenv("CUVIL_SOURCE_DIR");
  return dir ? dir : ".";
}

inline std::string SharedModels() { return SourceDir() + "/../shared/models"; }

// A fresh repository with copies of examples/model-repository.
inline std::string MakeRepository(const std::string& name) {
  namespace fs = std::filesystem;
  fs::path repo = fs::path(::testing::TempDir()) / name;
  fs::remove_all(repo);
  fs::copy(fs::path(SourceDir()) / "examples/model-repository", repo, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(repo)) {
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  return repo.string();
}

inline std::unique_ptr<CuvilServer> StartServer(const std::string& repo, ServerOptions options = {}) {
  options.model_repositories = {repo};
  options.grpc_port = 0;
  options.http_port = 0;
  options.metrics_port = 0;
  options.exit_timeout_secs = 5;
  auto server = CuvilServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

inline HostTensor ReadReference(const std::string& model, int set, const std::string& which) {
  auto t = ReadTensorFile(SharedModels() + "/" + model + "/test_data_set_" + std::to_string(set) + "/" +
                          which + "_0.pb");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t->tensor) : HostTensor();
}

// `got` may point into a wire buffer at any alignment, so it is read with memcpy.
inline void ExpectClose(const void* got, const HostTensor& want, double tol = 1e-3) {
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    float g;
    std::memcpy(&g, static_cast<const char*>(got) + i * sizeof(float), sizeof(float));
    ASSERT_NEAR(g, want.data_as<float>()[i], tol + tol * std::abs(want.data_as<float>()[i])) << "element " << i;
  }
}

// A ModelInfer request feeding `input` raw as the model's FP32 input named "input".
inline inference::ModelInferRequest RawInferRequest(const std::string& model, const HostTensor& input) {
  inference::ModelInferRequest q;
  q.set_model_name(model);
  auto* in = q.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t d : input.shape()) in->add_shape(d);
  q.add_raw_input_contents()->assign(reinterpret_cast<const char*>(input.data()), input.byte_size());
  return q;
}

}  // namespace cuvil::testing

#endif  // CUVIL_TESTS_SERVER_TEST_UTIL_H_
