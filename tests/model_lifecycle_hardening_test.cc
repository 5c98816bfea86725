// Regression tests for model lifecycle defects: configs that loosen a model's signature, configs
// and models that allocate without bound, warm-up files outside the model folder, reloads that
// leave a model without a serving version, and poll mode fighting the admin API.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/server.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "server_test_util.h"
#include "test_models.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

void WriteFile(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// y = Relu(x), x float32[batch, width].
std::string ReluModel(int64_t width) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("relu");
  for (auto* info : {g->add_input(), g->add_output()}) {
    info->set_name(info == &g->input(0) ? "x" : "y");
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(width);
  }
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Relu");
  n->add_input("x");
  n->add_output("y");
  return model.SerializeAsString();
}

// y = Gather(table, ids) with table a float32[4, 2] constant (row r holds r, r) and ids
// int64[batch].
std::string GatherModel() {
  return testing::GatherTableModel(4, 2, [](int64_t r, int64_t) { return static_cast<float>(r); });
}

const VersionStatus* FindVersion(const std::vector<VersionStatus>& index, const std::string& name,
                                 int64_t version) {
  for (const VersionStatus& v : index) {
    if (v.name == name && v.version == version) return &v;
  }
  return nullptr;
}

class LifecycleHardeningTest : public ::testing::Test {
 protected:
  // Starts a server on a fresh copy of the example repository after `edit` changed it.
  void Start(const std::function<void(const fs::path&)>& edit, ServerOptions options = {}) {
    repo_ =
        testing::MakeRepository(::testing::UnitTest::GetInstance()->current_test_info()->name());
    edit(repo_);
    server_ = testing::StartServer(repo_.string(), options);
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  grpc::Status InferMlp(const std::vector<int64_t>& shape, const std::string& raw,
                        inference::ModelInferResponse* response) {
    inference::ModelInferRequest q;
    q.set_model_name("mlp");
    auto* in = q.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    for (int64_t d : shape) in->add_shape(d);
    q.add_raw_input_contents(raw);
    grpc::ClientContext ctx;
    return stub_->ModelInfer(&ctx, q, response);
  }

  // The example mlp still answers its reference output.
  void ExpectMlpServes() {
    HostTensor input = testing::ReadReference("mlp", 0, "input");
    HostTensor want = testing::ReadReference("mlp", 0, "output");
    inference::ModelInferResponse r;
    grpc::Status s =
        InferMlp(input.shape(),
                 std::string(reinterpret_cast<const char*>(input.data()), input.byte_size()), &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    ASSERT_EQ(r.raw_output_contents_size(), 1);
    testing::ExpectClose(r.raw_output_contents(0).data(), want);
  }

  fs::path repo_;
  std::unique_ptr<CuvilServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(LifecycleHardeningTest, ConfigMayNotLoosenTheModelsFixedDims) {
  // Before the fix the server accepted [1,1] (the compiled code read 3 KB past the request) and
  // crashed on [1,0].
  Start([](const fs::path& repo) {
    WriteFile(repo / "mlp/config.pbtxt",
              "name: \"mlp\"\nmax_batch_size: 8\n"
              "input [ { name: \"input\" data_type: TYPE_FP32 dims: [ -1 ] } ]\n");
  });
  inference::ModelInferResponse r;
  grpc::Status narrow = InferMlp({1, 1}, std::string(4, '\0'), &r);
  EXPECT_EQ(narrow.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(narrow.error_message(), HasSubstr("expected shape [-1,784], got [1,1]"));
  grpc::Status empty = InferMlp({1, 0}, "", &r);
  EXPECT_EQ(empty.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // The config the server reports is the narrowed one.
  grpc::ClientContext ctx;
  inference::ModelConfigRequest cq;
  cq.set_name("mlp");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(stub_->ModelConfig(&ctx, cq, &config).ok());
  EXPECT_THAT(config.config().input(0).dims(), ::testing::ElementsAre(784));
  ExpectMlpServes();
}

TEST_F(LifecycleHardeningTest, WarmupFilesMustStayInsideTheModelFolder) {
  Start([](const fs::path& repo) {
    WriteFile(repo / "secret.bin", std::string(784 * 4, '\x01'));
    fs::create_directories(repo / "mlp/warmup");
    fs::create_symlink(repo / "secret.bin", repo / "mlp/warmup/link.bin");
  });
  const std::string base = ReadFile(repo_ / "mlp/config.pbtxt");
  for (const std::string& file : {std::string("../../secret.bin"), (repo_ / "secret.bin").string(),
                                  std::string("link.bin")}) {
    LoadRequest load;
    load.name = "mlp";
    load.config_pbtxt = base +
                        "model_warmup [ { name: \"w\" batch_size: 1 inputs { key: \"input\" value "
                        "{ data_type: TYPE_FP32 dims: [ 784 ] input_data_file: \"" +
                        file + "\" } } } ]\n";
    absl::Status s = server_->models()->Load(load);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << file;
    EXPECT_THAT(s.message(), HasSubstr("input_data_file")) << file;
  }
  // The failed reloads left the serving version alone.
  ExpectMlpServes();
}

TEST_F(LifecycleHardeningTest, ConfigValuesThatAllocateAreBounded) {
  Start([](const fs::path&) {});
  const std::string base =
      "name: \"mlp\"\ninput [ { name: \"input\" data_type: TYPE_FP32 dims: [ 784 ] } ]\n";
  struct Case {
    std::string config;
    std::string message;
  };
  const std::vector<Case> cases = {
      {base + "max_batch_size: 8\ndynamic_batching { priority_levels: 4000000000 "
              "default_priority_level: 1 }",
       "priority_levels"},
      {base + "max_batch_size: 8\ninstance_group [ { count: 1000000 kind: KIND_CPU } ]",
       "instance"},
      {base + "max_batch_size: 2147483647", "max_batch_size"},
      {base + "max_batch_size: 8\nmodel_warmup [ { name: \"w\" batch_size: 1 count: 4000000000 "
              "inputs { key: \"input\" value { data_type: TYPE_FP32 dims: [ 784 ] zero_data: true "
              "} } } ]",
       "count"},
  };
  for (const Case& c : cases) {
    LoadRequest load;
    load.name = "mlp";
    load.config_pbtxt = c.config;
    absl::Status s = server_->models()->Load(load);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.config;
    EXPECT_THAT(s.message(), HasSubstr(c.message)) << c.config;
  }
  ExpectMlpServes();
}

TEST_F(LifecycleHardeningTest, HugeFixedInputFailsTheLoadNotTheProcess) {
  Start([](const fs::path&) {});
  // 2^36 floats per row (256 GiB): compiling it is fine, allocating its warm-up input is not.
  LoadRequest load;
  load.name = "huge";
  load.model_bytes[1] = ReluModel(int64_t{1} << 36);
  load.config_pbtxt = "name: \"huge\"\nmax_batch_size: 1\n";
  absl::Status s = server_->models()->Load(load);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  ExpectMlpServes();
}

TEST_F(LifecycleHardeningTest, ReloadKeepsServingUntilTheNewVersionIsReady) {
  Start([](const fs::path&) {});
  fs::copy(repo_ / "mlp/1", repo_ / "mlp/2", fs::copy_options::recursive);
  LoadRequest load;
  load.name = "mlp";
  load.wait = false;
  ASSERT_TRUE(server_->models()->Load(load).ok());
  // Version 1 must keep answering until version 2 takes over: never "no READY version".
  int failures = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto model = server_->models()->Get("mlp", "");
    if (!model.ok()) {
      ++failures;
      ADD_FAILURE() << model.status();
    } else if ((*model)->version() == 2) {
      break;
    }
    std::this_thread::yield();
    if (failures > 3) break;
  }
  EXPECT_EQ(failures, 0);
  auto model = server_->models()->Get("mlp", "");
  ASSERT_TRUE(model.ok());
  EXPECT_EQ((*model)->version(), 2);
  // Version 1 retires once 2 is READY.
  for (int i = 0; i < 100 && server_->models()->Get("mlp", "1").ok(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(server_->models()->Get("mlp", "1").ok());
}

TEST_F(LifecycleHardeningTest, RequestsHoldingARetiredVersionRunOnItsSuccessor) {
  // A front end looks the version up, then submits: a reload in between used to fail the request
  // with "scheduler is draining" (seen in the soak test).
  Start([](const fs::path&) {});
  auto v1 = server_->models()->Get("mlp", "");
  ASSERT_TRUE(v1.ok());
  fs::copy(repo_ / "mlp/1", repo_ / "mlp/2", fs::copy_options::recursive);
  LoadRequest load;
  load.name = "mlp";
  ASSERT_TRUE(server_->models()->Load(load).ok());
  ASSERT_FALSE(server_->models()->Get("mlp", "1").ok());  // Version 1 is retired and drained.

  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor want = testing::ReadReference("mlp", 0, "output");
  WireRequest wire;
  wire.inputs.push_back({"input", "FP32", input.shape(), input.data(), input.byte_size(), {}});
  auto request = BuildInferenceRequest(**v1, std::move(wire));
  ASSERT_TRUE(request.ok()) << request.status();
  InferenceResponse response = InferBlocking(**v1, *std::move(request));
  ASSERT_TRUE(response.status.ok()) << response.status;
  ASSERT_EQ(response.outputs.size(), 1u);
  testing::ExpectClose(response.outputs[0].tensor.data(), want);
}

TEST_F(LifecycleHardeningTest, FailedNewVersionLeavesTheOldOneServing) {
  Start([](const fs::path&) {});
  WriteFile(repo_ / "mlp/2/model.onnx", "not an onnx model");
  LoadRequest load;
  load.name = "mlp";
  EXPECT_FALSE(server_->models()->Load(load).ok());
  auto model = server_->models()->Get("mlp", "");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->version(), 1);
  ExpectMlpServes();
}

TEST_F(LifecycleHardeningTest, OutOfRangeIndicesFailTheRequestNotTheServer) {
  Start([](const fs::path&) {});
  LoadRequest load;
  load.name = "gather";
  load.model_bytes[1] = GatherModel();
  load.config_pbtxt = "name: \"gather\"\nmax_batch_size: 4\n";
  ASSERT_TRUE(server_->models()->Load(load).ok());
  auto infer = [&](int64_t id, inference::ModelInferResponse* r) {
    inference::ModelInferRequest q;
    q.set_model_name("gather");
    auto* in = q.add_inputs();
    in->set_name("ids");
    in->set_datatype("INT64");
    in->add_shape(1);
    q.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    grpc::ClientContext ctx;
    return stub_->ModelInfer(&ctx, q, r);
  };
  inference::ModelInferResponse r;
  grpc::Status bad = infer(1000, &r);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(), HasSubstr("out of data bounds"));
  grpc::Status good = infer(3, &r);
  ASSERT_TRUE(good.ok()) << good.error_message();
  float row[2];
  std::memcpy(row, r.raw_output_contents(0).data(), sizeof(row));
  EXPECT_EQ(row[0], 3.0f);
  ExpectMlpServes();
}

TEST_F(LifecycleHardeningTest, PollModeRespectsTheAdminApi) {
  ServerOptions options;
  options.control_mode = ServerOptions::ControlMode::kPoll;
  options.poll_interval_secs = 1;
  Start([](const fs::path&) {}, options);
  // An inline model (no folder) and an operator's unload must survive the next polls.
  LoadRequest inline_load;
  inline_load.name = "inline_relu";
  inline_load.model_bytes[1] = ReluModel(4);
  ASSERT_TRUE(server_->models()->Load(inline_load).ok());
  ASSERT_TRUE(server_->models()->Unload("lenet").ok());
  // A repository model whose folder disappears is still unloaded by the poll.
  fs::remove_all(repo_ / "mlp");
  std::this_thread::sleep_for(std::chrono::milliseconds(3500));
  auto index = server_->models()->Index();
  const VersionStatus* inline_v = FindVersion(index, "inline_relu", 1);
  ASSERT_NE(inline_v, nullptr);
  EXPECT_EQ(inline_v->state, ModelState::kReady);
  const VersionStatus* lenet = FindVersion(index, "lenet", 1);
  ASSERT_NE(lenet, nullptr);
  EXPECT_EQ(lenet->state, ModelState::kUnavailable);
  EXPECT_FALSE(server_->models()->Get("mlp", "").ok());
  // An operator's load brings lenet back, and the poll leaves it loaded.
  LoadRequest reload;
  reload.name = "lenet";
  ASSERT_TRUE(server_->models()->Load(reload).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_TRUE(server_->models()->Get("lenet", "").ok());
}

}  // namespace
}  // namespace cuvil
