// Shared fixtures for server integration tests: a temporary Triton repository holding the
// example models and a running in-process server bound to ephemeral ports.
#ifndef CUVIL_TESTS_SERVER_TEST_UTIL_H_
#define CUVIL_TESTS_SERVER_TEST_UTIL_H_

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

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

// Removes `path` (a scratch folder of this test process) when the process exits normally, so
// repeated runs do not fill the temporary folder. Thread-compatible.
inline void RemoveAtExit(const std::filesystem::path& path) {
  struct Registry {
    std::vector<std::filesystem::path> paths;
    ~Registry() {
      std::error_code ignored;
      for (const auto& p : paths) std::filesystem::remove_all(p, ignored);
    }
  };
  static Registry registry;
  registry.paths.push_back(path);
}

// A fresh repository with copies of examples/model-repository, removed at exit.
inline std::string MakeRepository(const std::string& name) {
  namespace fs = std::filesystem;
  // Per process: CTest runs the tests of one fixture as parallel processes.
  fs::path repo = fs::path(::testing::TempDir()) / (name + "_" + std::to_string(getpid()));
  fs::remove_all(repo);
  RemoveAtExit(repo);
  fs::copy(fs::path(SourceDir()) / "examples/model-repository", repo, fs::copy_options::recursive);
  for (auto& e : fs::recursive_directory_iterator(repo)) {
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  }
  return repo.string();
}

inline std::unique_ptr<CuvilServer> StartServer(const std::string& repo,
                                                ServerOptions options = {}) {
  options.model_repositories = {repo};
  options.grpc_port = 0;
  options.http_port = 0;
  options.metrics_port = 0;
  options.exit_timeout_secs = 5;
  // In-process tests patch and snapshot without a token: the development mode. The default (IR
  // patches and snapshots refused without a token) is tested against a real server process
  // (tests/patch_trust).
  if (options.admin_token.empty() && options.bind_address == "127.0.0.1") {
    options.insecure_admin = true;
  }
  auto server = CuvilServer::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

inline HostTensor ReadReference(const std::string& model, int set, const std::string& which) {
  auto t = ReadTensorFile(SharedModels() + "/" + model + "/test_data_set_" + std::to_string(set) +
                          "/" + which + "_0.pb");
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? std::move(t->tensor) : HostTensor();
}

// `got` may point into a wire buffer at any alignment, so it is read with memcpy.
inline void ExpectClose(const void* got, const HostTensor& want, double tol = 1e-3) {
  for (int64_t i = 0; i < want.num_elements(); ++i) {
    float g;
    std::memcpy(&g, static_cast<const char*>(got) + i * sizeof(float), sizeof(float));
    ASSERT_NEAR(g, want.data_as<float>()[i], tol + tol * std::abs(want.data_as<float>()[i]))
        << "element " << i;
  }
}

// A ModelInfer request feeding `input` raw as the model's FP32 input named "input".
inline inference::ModelInferRequest RawInferRequest(const std::string& model,
                                                    const HostTensor& input) {
  inference::ModelInferRequest q;
  q.set_model_name(model);
  auto* in = q.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t d : input.shape()) in->add_shape(d);
  q.add_raw_input_contents()->assign(reinterpret_cast<const char*>(input.data()),
                                     input.byte_size());
  return q;
}

// The bytes of an example model's ONNX file.
inline std::string ReadExampleModel(const std::string& model) {
  std::ifstream f(SourceDir() + "/examples/model-repository/" + model + "/1/model.onnx",
                  std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// A Triton model load with bad parameters, and the exact InvalidArgument message gRPC
// RepositoryModelLoad and HTTP POST /v2/repository/models/<m>/load must both answer with.
struct BadLoadCase {
  struct Param {
    enum Kind { kString, kBytes, kInt };  // kBytes goes as base64 text over HTTP.
    std::string key;
    Kind kind;
    std::string value;
  };
  std::string what;
  std::string model;
  std::string url_model;  // The model as it appears in an HTTP path (percent-encoded).
  std::vector<Param> params;
  std::string message;
};

inline std::vector<BadLoadCase> BadLoadCases() {
  using P = BadLoadCase::Param;
  return {
      {"unknown parameter",
       "lenet",
       "lenet",
       {{"unload_dependents", P::kInt, "1"}},
       "load parameter 'unload_dependents' is not supported; a load takes 'config' (model "
       "configuration as JSON) and 'file:<version>/model.onnx' (model bytes)"},
      {"config not a string",
       "lenet",
       "lenet",
       {{"config", P::kInt, "1"}},
       "load parameter 'config' must be a string holding the model configuration as JSON"},
      {"empty config",
       "lenet",
       "lenet",
       {{"config", P::kString, ""}},
       "load parameter 'config' is empty"},
      {"deep config",
       "lenet",
       "lenet",
       {{"config", P::kString, std::string(100, '[') + std::string(100, ']')}},
       "load parameter 'config' is not acceptable: JSON nesting deeper than 64"},
      {"version zero",
       "lenet",
       "lenet",
       {{"file:0/model.onnx", P::kBytes, "x"}},
       "load parameter 'file:0/model.onnx' must look like file:<version>/model.onnx with a "
       "positive version"},
      {"not the model file",
       "lenet",
       "lenet",
       {{"file:1/weights.bin", P::kBytes, "x"}},
       "load parameter 'file:1/weights.bin' is not supported: only the version's .onnx model "
       "file can be sent (file:<version>/model.onnx)"},
      {"empty file",
       "lenet",
       "lenet",
       {{"file:1/model.onnx", P::kBytes, ""}},
       "load parameter 'file:1/model.onnx' is empty"},
      {"file not bytes",
       "lenet",
       "lenet",
       {{"file:1/model.onnx", P::kInt, "1"}},
       "load parameter 'file:1/model.onnx' must hold the file's bytes (base64 text over HTTP)"},
      {"control character in name",
       "bad\x01name",
       "bad%01name",
       {},
       "invalid model name \"bad\\x01name\": it must not contain control characters"},
      {"dot-dot name",
       "..",
       "..",
       {{"file:1/model.onnx", P::kBytes, "x"}},
       "invalid model name \"..\": '.' and '..' are not model names"},
  };
}

}  // namespace cuvil::testing

#endif  // CUVIL_TESTS_SERVER_TEST_UTIL_H_
