// End-to-end tests of the gRPC front end against an in-process server on ephemeral ports.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "admin.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "health.grpc.pb.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

class GrpcServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartServer(testing::MakeRepository("grpc_repo"));
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
  }

  inference::ModelInferRequest MlpRequest(const HostTensor& input) {
    inference::ModelInferRequest q = testing::RawInferRequest("mlp", input);
    q.set_id("req-42");
    return q;
  }

  grpc::Status Infer(const inference::ModelInferRequest& q, inference::ModelInferResponse* r) {
    grpc::ClientContext ctx;
    return stub_->ModelInfer(&ctx, q, r);
  }

  std::unique_ptr<CuvilServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(GrpcServerTest, HealthAndMetadata) {
  grpc::ClientContext c1, c2, c3, c4;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&c1, {}, &live).ok());
  EXPECT_TRUE(live.live());
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(stub_->ServerReady(&c2, {}, &ready).ok());
  EXPECT_TRUE(ready.ready());
  inference::ModelMetadataRequest mq;
  mq.set_name("lenet");
  inference::ModelMetadataResponse meta;
  ASSERT_TRUE(stub_->ModelMetadata(&c3, mq, &meta).ok());
  EXPECT_EQ(meta.inputs(0).name(), "input");
  EXPECT_EQ(meta.inputs(0).datatype(), "FP32");
  EXPECT_THAT(meta.inputs(0).shape(), ::testing::ElementsAre(-1, 1, 28, 28));
  EXPECT_THAT(meta.versions(), ::testing::ElementsAre("1"));
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckResponse h;
  ASSERT_TRUE(health->Check(&c4, {}, &h).ok());
  EXPECT_EQ(h.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// Every method is on the completion-queue API; a method no service defines is still answered
// (by gRPC, UNIMPLEMENTED), and the server goes on serving.
TEST_F(GrpcServerTest, UnknownMethodIsUnimplemented) {
  grpc::GenericStub generic(channel_);
  grpc::ClientContext ctx;
  grpc::CompletionQueue cq;
  grpc::ByteBuffer response;
  grpc::Status status;
  auto call = generic.PrepareUnaryCall(&ctx, "/inference.GRPCInferenceService/NoSuchMethod",
                                       grpc::ByteBuffer(), &cq);
  call->StartCall();
  call->Finish(&response, &status, reinterpret_cast<void*>(1));
  void* tag = nullptr;
  bool ok = false;
  ASSERT_TRUE(cq.Next(&tag, &ok));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  grpc::ClientContext live_ctx;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(stub_->ServerLive(&live_ctx, {}, &live).ok());
  EXPECT_TRUE(live.live());
}

TEST_F(GrpcServerTest, InferMatchesReferenceForEveryBatchSize) {
  for (const char* model : {"mlp", "lenet"}) {
    for (int set = 0; set < 3; ++set) {
      HostTensor input = testing::ReadReference(model, set, "input");
      HostTensor expected = testing::ReadReference(model, set, "output");
      inference::ModelInferRequest q = MlpRequest(input);
      q.set_model_name(model);
      inference::ModelInferResponse r;
      grpc::Status s = Infer(q, &r);
      ASSERT_TRUE(s.ok()) << model << ": " << s.error_message();
      EXPECT_EQ(r.id(), "req-42");
      EXPECT_EQ(r.model_version(), "1");
      ASSERT_EQ(r.raw_output_contents_size(), 1);
      EXPECT_EQ(r.outputs(0).shape(0), input.shape()[0]);
      ASSERT_EQ(r.raw_output_contents(0).size(), expected.byte_size());
      testing::ExpectClose(reinterpret_cast<const float*>(r.raw_output_contents(0).data()),
                           expected);
    }
  }
}

TEST_F(GrpcServerTest, TypedContentsAndStreaming) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor expected = testing::ReadReference("mlp", 0, "output");
  inference::ModelInferRequest q;
  q.set_model_name("mlp");
  auto* in = q.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(784);
  for (int64_t i = 0; i < input.num_elements(); ++i)
    in->mutable_contents()->add_fp32_contents(input.data_as<float>()[i]);
  q.add_outputs()->set_name("output");
  grpc::ClientContext ctx;
  auto stream = stub_->ModelStreamInfer(&ctx);
  ASSERT_TRUE(stream->Write(q));
  inference::ModelInferRequest bad = q;
  bad.set_model_name("no_such_model");
  ASSERT_TRUE(stream->Write(bad));
  stream->WritesDone();
  inference::ModelStreamInferResponse r1, r2;
  ASSERT_TRUE(stream->Read(&r1));
  ASSERT_TRUE(stream->Read(&r2));
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(r1.error_message(), "");
  testing::ExpectClose(
      reinterpret_cast<const float*>(r1.infer_response().raw_output_contents(0).data()), expected);
  EXPECT_THAT(r2.error_message(), HasSubstr("no_such_model"));
}

TEST_F(GrpcServerTest, PriorityAndTimeoutParametersAreChecked) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  struct Case {
    const char* key;
    std::function<void(inference::InferParameter*)> set;
  };
  // Before: a string read as 0, 2^32 + 1 wrapped to priority 1, a negative timeout to 2^64 - 1.
  const std::vector<Case> cases = {
      {"priority", [](auto* p) { p->set_string_param("high"); }},
      {"priority", [](auto* p) { p->set_uint64_param((uint64_t{1} << 32) + 1); }},
      {"priority", [](auto* p) { p->set_int64_param(-1); }},
      {"timeout", [](auto* p) { p->set_bool_param(true); }},
      {"timeout", [](auto* p) { p->set_int64_param(-5); }},
  };
  for (const Case& c : cases) {
    inference::ModelInferRequest q = MlpRequest(input);
    c.set(&(*q.mutable_parameters())[c.key]);
    inference::ModelInferResponse r;
    grpc::Status s = Infer(q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.key;
    EXPECT_THAT(s.error_message(), HasSubstr(c.key));
  }
  inference::ModelInferRequest q = MlpRequest(input);
  (*q.mutable_parameters())["priority"].set_uint64_param(1);
  (*q.mutable_parameters())["timeout"].set_int64_param(1000000);
  inference::ModelInferResponse r;
  EXPECT_TRUE(Infer(q, &r).ok());
}

TEST_F(GrpcServerTest, BadRequestsAreRejectedAndChangeNothing) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  struct Case {
    const char* what;
    std::function<void(inference::ModelInferRequest&)> mutate;
    grpc::StatusCode code;
    const char* message;
  };
  std::vector<Case> cases = {
      {"unknown model", [](auto& q) { q.set_model_name("nope"); }, grpc::StatusCode::NOT_FOUND,
       "nope"},
      {"unknown version", [](auto& q) { q.set_model_version("7"); }, grpc::StatusCode::NOT_FOUND,
       "version 7"},
      {"wrong input name", [](auto& q) { q.mutable_inputs(0)->set_name("x"); },
       grpc::StatusCode::INVALID_ARGUMENT, "'x'"},
      {"wrong dtype", [](auto& q) { q.mutable_inputs(0)->set_datatype("INT32"); },
       grpc::StatusCode::INVALID_ARGUMENT, "expected datatype FP32, got INT32"},
      {"wrong shape", [](auto& q) { q.mutable_inputs(0)->set_shape(1, 785); },
       grpc::StatusCode::INVALID_ARGUMENT, "expected shape [-1,784], got [1,785]"},
      {"raw contents above the declared shape",
       [](auto& q) { q.mutable_inputs(0)->set_shape(1, 783); }, grpc::StatusCode::INVALID_ARGUMENT,
       "more than the 3132 bytes the inputs' shapes and datatypes declare"},
      {"batch above max", [](auto& q) { q.mutable_inputs(0)->set_shape(0, 33); },
       grpc::StatusCode::INVALID_ARGUMENT, "batch size 33"},
      {"byte size mismatch", [](auto& q) { q.mutable_raw_input_contents(0)->resize(100); },
       grpc::StatusCode::INVALID_ARGUMENT, "needs 3136 bytes, got 100"},
      {"unknown output", [](auto& q) { q.add_outputs()->set_name("logits"); },
       grpc::StatusCode::INVALID_ARGUMENT, "'logits'"},
      {"missing input",
       [](auto& q) {
         q.clear_inputs();
         q.clear_raw_input_contents();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "missing input 'input'"},
  };
  for (const Case& c : cases) {
    inference::ModelInferRequest q = MlpRequest(input);
    c.mutate(q);
    inference::ModelInferResponse r;
    grpc::Status s = Infer(q, &r);
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.message)) << c.what;
  }
  // The model still serves correctly.
  inference::ModelInferResponse r;
  ASSERT_TRUE(Infer(MlpRequest(input), &r).ok());
  testing::ExpectClose(reinterpret_cast<const float*>(r.raw_output_contents(0).data()),
                       testing::ReadReference("mlp", 0, "output"));
}

// gRPC refuses a message over --max-request-bytes itself, with RESOURCE_EXHAUSTED (this test
// expected INVALID_ARGUMENT from the handler before the receive limit was set to the request cap).
// A second server on a port the first listens on fails to start on each listener (gRPC and
// httplib would otherwise share the port through SO_REUSEPORT, the kernel splitting connections
// between two servers), and the first keeps serving.
TEST_F(GrpcServerTest, ASecondServerOnAPortInUseFailsToStart) {
  const std::string repo = testing::MakeRepository("grpc_port_in_use_repo");
  for (const char* listener : {"grpc", "http", "metrics"}) {
    ServerOptions options;
    options.model_repositories = {repo};
    options.grpc_port = 0;
    options.http_port = 0;
    options.metrics_port = 0;
    options.exit_timeout_secs = 5;
    const std::string which = listener;
    if (which == "grpc") options.grpc_port = server_->grpc_port();
    if (which == "http") options.http_port = server_->http_port();
    if (which == "metrics") options.metrics_port = server_->metrics_port();
    auto second = CuvilServer::Start(options);
    ASSERT_FALSE(second.ok()) << listener;
    EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
    EXPECT_THAT(second.status().message(), HasSubstr("bind")) << second.status();
  }
  grpc::ClientContext ctx;
  inference::ServerLiveRequest req;
  inference::ServerLiveResponse res;
  ASSERT_TRUE(stub_->ServerLive(&ctx, req, &res).ok());
  EXPECT_TRUE(res.live());
}

TEST(GrpcServerLimitsTest, OversizedRequestIsResourceExhausted) {
  ServerOptions options;
  options.max_request_bytes = 1000;
  auto server = testing::StartServer(testing::MakeRepository("limits_repo"), options);
  ASSERT_NE(server, nullptr);
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->grpc_port()), grpc::InsecureChannelCredentials()));
  inference::ModelInferRequest q =
      testing::RawInferRequest("mlp", HostTensor(DType::kFloat32, {1, 784}));
  grpc::ClientContext ctx;
  inference::ModelInferResponse r;
  grpc::Status s = stub->ModelInfer(&ctx, q, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("larger than max"));
  // A request within the limit still gets through (to a model-level answer).
  grpc::ClientContext ctx2;
  inference::ModelInferRequest small;
  small.set_model_name("nope");
  EXPECT_EQ(stub->ModelInfer(&ctx2, small, &r).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST(GrpcServerLimitsTest, CallsOverTheConcurrencyCapAreResourceExhausted) {
  ServerOptions options;
  options.grpc_max_concurrent_calls = 1;
  auto server = testing::StartServer(testing::MakeRepository("cap_repo"), options);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  // An open stream holds the only slot: once it has answered, its handler is running.
  grpc::ClientContext stream_ctx;
  auto stream = stub->ModelStreamInfer(&stream_ctx);
  ASSERT_TRUE(stream->Write(testing::RawInferRequest("mlp", input)));
  inference::ModelStreamInferResponse first;
  ASSERT_TRUE(stream->Read(&first));
  EXPECT_EQ(first.error_message(), "");
  {
    grpc::ClientContext ctx;
    inference::ModelInferResponse r;
    grpc::Status s = stub->ModelInfer(&ctx, testing::RawInferRequest("mlp", input), &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("concurrent call limit"));
  }
  {
    // Probes are not counted: a busy server is not a dead one.
    grpc::ClientContext ctx;
    inference::ServerLiveResponse live;
    EXPECT_TRUE(stub->ServerLive(&ctx, {}, &live).ok());
  }
  stream->WritesDone();
  ASSERT_TRUE(stream->Finish().ok());
  // The slot is free again once the stream has finished.
  grpc::ClientContext ctx;
  inference::ModelInferResponse r;
  ASSERT_TRUE(stub->ModelInfer(&ctx, testing::RawInferRequest("mlp", input), &r).ok());
}

// Threads of this process (the server runs in it).
int ProcessThreads() {
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++n;
  }
  return n;
}

TEST(GrpcServerAsyncTest, OpenStreamsTakeNoThreadEach) {
  ServerOptions options;
  // All 48 streams on one connection (the default cap follows the in-flight budget).
  options.grpc_max_streams_per_connection = 64;
  auto server = testing::StartServer(testing::MakeRepository("async_repo"), options);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor expected = testing::ReadReference("mlp", 0, "output");
  // One stream first, so gRPC's own threads (the client channel's) exist before counting.
  constexpr int kStreams = 48;
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<
      grpc::ClientReaderWriter<inference::ModelInferRequest, inference::ModelStreamInferResponse>>>
      streams;
  int before = 0;
  for (int i = 0; i < kStreams; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    streams.push_back(stub->ModelStreamInfer(contexts.back().get()));
    ASSERT_TRUE(streams.back()->Write(testing::RawInferRequest("mlp", input)));
    inference::ModelStreamInferResponse r;
    ASSERT_TRUE(streams.back()->Read(&r));
    ASSERT_EQ(r.error_message(), "");
    ASSERT_EQ(r.infer_response().raw_output_contents(0).size(), expected.byte_size());
    if (i == 0) before = ProcessThreads();
  }
  // Every stream is open and has been served: a synchronous server would hold a thread for each.
  EXPECT_LT(ProcessThreads() - before, kStreams / 4);
  for (auto& stream : streams) {
    stream->WritesDone();
    EXPECT_TRUE(stream->Finish().ok());
  }
}

TEST_F(GrpcServerTest, LoadAndUnloadWhileRequestsFlow) {
  HostTensor input = testing::ReadReference("mlp", 1, "input");
  HostTensor expected = testing::ReadReference("mlp", 1, "output");
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 3; ++t) {
    clients.emplace_back([&] {
      while (!stop) {
        inference::ModelInferResponse r;
        grpc::Status s = Infer(MlpRequest(input), &r);
        if (s.ok() && r.raw_output_contents(0).size() == expected.byte_size())
          ++ok;
        else
          ++failed;
      }
    });
  }
  // Unload and reload lenet repeatedly, through the repository API, while mlp serves.
  for (int i = 0; i < 3; ++i) {
    grpc::ClientContext c1, c2;
    inference::RepositoryModelUnloadRequest uq;
    uq.set_model_name("lenet");
    inference::RepositoryModelUnloadResponse ur;
    ASSERT_TRUE(stub_->RepositoryModelUnload(&c1, uq, &ur).ok());
    inference::RepositoryModelLoadRequest lq;
    lq.set_model_name("lenet");
    inference::RepositoryModelLoadResponse lr;
    ASSERT_TRUE(stub_->RepositoryModelLoad(&c2, lq, &lr).ok());
  }
  stop = true;
  for (auto& c : clients) c.join();
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GT(ok.load(), 0);
  grpc::ClientContext ctx;
  inference::RepositoryIndexRequest iq;
  inference::RepositoryIndexResponse index;
  ASSERT_TRUE(stub_->RepositoryIndex(&ctx, iq, &index).ok());
  ASSERT_EQ(index.models_size(), 2);
  EXPECT_EQ(index.models(0).name(), "lenet");
  EXPECT_EQ(index.models(0).state(), "READY");
}

TEST(GrpcAdminTest, TokenIsRequiredAndFunctionsAreListed) {
  ServerOptions options;
  options.admin_token = "s3cret";
  auto server = testing::StartServer(testing::MakeRepository("admin_repo"), options);
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto admin = cuvil::admin::v1::ModelAdmin::NewStub(channel);
  {
    grpc::ClientContext ctx;
    cuvil::admin::v1::ListModelsResponse r;
    EXPECT_EQ(admin->ListModels(&ctx, {}, &r).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer wrong");
    inference::RepositoryModelUnloadRequest q;
    q.set_model_name("mlp");
    inference::RepositoryModelUnloadResponse r;
    auto stub = inference::GRPCInferenceService::NewStub(channel);
    EXPECT_EQ(stub->RepositoryModelUnload(&ctx, q, &r).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Bearer s3cret");
  cuvil::admin::v1::ListModelsResponse models;
  ASSERT_TRUE(admin->ListModels(&ctx, {}, &models).ok());
  ASSERT_EQ(models.models_size(), 2);
  EXPECT_EQ(models.models(1).name(), "mlp");
  EXPECT_EQ(models.models(1).state(), "READY");
  EXPECT_EQ(models.models(1).namespace_(), "mlp/1");
  EXPECT_GT(models.models(1).weights_bytes(), 2000000u);
  EXPECT_EQ(models.models(1).cuvil_precision(), "float32:3");
  grpc::ClientContext ctx2;
  ctx2.AddMetadata("authorization", "Bearer s3cret");
  cuvil::admin::v1::ListFunctionsRequest fq;
  fq.set_name("mlp");
  cuvil::admin::v1::ListFunctionsResponse fns;
  ASSERT_TRUE(admin->ListFunctions(&ctx2, fq, &fns).ok());
  ASSERT_EQ(fns.functions_size(), 3);  // 3 Gemm (the 2 Relus are fused into their epilogues).
  EXPECT_EQ(fns.functions(0).op_type(), "Gemm");
  EXPECT_THAT(fns.functions(0).signature(), HasSubstr("float32[batch,784]"));
  EXPECT_EQ(fns.functions(0).precision(), "float32");
  EXPECT_EQ(fns.functions(0).parent(), "");  // A kernel of the graph itself.
  grpc::ClientContext ctx3;
  ctx3.AddMetadata("authorization", "Bearer s3cret");
  cuvil::admin::v1::PatchFunctionResponse pr;
  EXPECT_EQ(admin->PatchFunction(&ctx3, {}, &pr).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

// LLVM IR for an elementwise kernel over batch*width floats (args = {in, out}) writing
// 2 * max(in, 0): a doubling Relu, or a doubling copy of non-negative data.
std::string DoublingReluIr(const std::string& symbol, int64_t width) {
  return absl::StrCat(R"(
define i32 @)",
                      symbol, R"((ptr %args, i64 %batch) {
entry:
  %in = load ptr, ptr %args
  %op = getelementptr ptr, ptr %args, i64 1
  %out = load ptr, ptr %op
  %n = mul i64 %batch, )",
                      width, R"(
  %empty = icmp eq i64 %n, 0
  br i1 %empty, label %exit, label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %ia = getelementptr float, ptr %in, i64 %i
  %v = load float, ptr %ia
  %pos = fcmp ogt float %v, 0.0
  %r = select i1 %pos, float %v, float 0.0
  %d = fmul float %r, 2.0
  %oa = getelementptr float, ptr %out, i64 %i
  store float %d, ptr %oa
  %i1 = add i64 %i, 1
  %done = icmp eq i64 %i1, %n
  br i1 %done, label %exit, label %loop
exit:
  ret i32 0
}
)");
}

TEST_F(GrpcServerTest, PatchFunctionSwitchesBetweenRequestsAndRollsBack) {
  auto admin = cuvil::admin::v1::ModelAdmin::NewStub(channel_);
  cuvil::admin::v1::ListFunctionsResponse fns;
  {
    grpc::ClientContext ctx;
    cuvil::admin::v1::ListFunctionsRequest fq;
    fq.set_name("lenet");
    ASSERT_TRUE(admin->ListFunctions(&ctx, fq, &fns).ok());
  }
  // lenet's Flatten: a copy of batch*W non-negative floats (its Relus are fused into the Convs).
  std::string relu, sig;
  for (const auto& f : fns.functions()) {
    if (f.op_type() == "Flatten") relu = f.symbol(), sig = f.signature();
  }
  ASSERT_FALSE(relu.empty());
  const std::string out_prefix =
      "-> (float32[batch,";  // (float32[batch,...]) -> (float32[batch,W])
  const size_t out = sig.find(out_prefix);
  ASSERT_NE(out, std::string::npos) << sig;
  const int64_t width = std::stoll(sig.substr(out + out_prefix.size()));

  HostTensor input = testing::ReadReference("lenet", 0, "input");
  HostTensor expected = testing::ReadReference("lenet", 0, "output");
  auto output = [&]() {
    inference::ModelInferResponse r;
    inference::ModelInferRequest q = MlpRequest(input);
    q.set_model_name("lenet");
    grpc::Status s = Infer(q, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<float> v(expected.num_elements());
    if (s.ok()) std::memcpy(v.data(), r.raw_output_contents(0).data(), v.size() * sizeof(float));
    return v;
  };
  const std::vector<float> before = output();
  testing::ExpectClose(before.data(), expected);
  auto patch = [&](const std::string& ir, bool force, cuvil::admin::v1::PatchFunctionResponse* r) {
    grpc::ClientContext ctx;
    cuvil::admin::v1::PatchFunctionRequest q;
    q.set_name("lenet");
    q.set_function(relu);
    q.set_body(ir);
    q.set_force(force);
    q.set_author("grpc-test");
    return admin->PatchFunction(&ctx, q, r);
  };
  cuvil::admin::v1::PatchFunctionResponse pr;
  // Refused: a syntax error, a wrong signature, and (without force) a validation mismatch. The
  // model keeps serving the old code.
  EXPECT_EQ(patch("define i32 @" + relu + "(", false, &pr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(patch("define i32 @" + relu + "(ptr %a) {\n  ret i32 0\n}", false, &pr).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  grpc::Status refused = patch(DoublingReluIr(relu, width), false, &pr);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("validation"));
  EXPECT_EQ(output(), before);

  ASSERT_TRUE(patch(DoublingReluIr(relu, width), true, &pr).ok());
  EXPECT_GT(pr.max_abs_diff(), 0);
  const std::vector<float> patched = output();
  EXPECT_NE(patched, before);
  EXPECT_EQ(output(), patched);  // Every response after the switch.
  {
    grpc::ClientContext ctx;
    cuvil::admin::v1::ListPatchesRequest q;
    q.set_name("lenet");
    cuvil::admin::v1::ListPatchesResponse r;
    ASSERT_TRUE(admin->ListPatches(&ctx, q, &r).ok());
    ASSERT_EQ(r.patches_size(), 1);
    EXPECT_EQ(r.patches(0).patch_id(), pr.patch_id());
    EXPECT_EQ(r.patches(0).author(), "grpc-test");
    EXPECT_EQ(r.patches(0).kind(), "ir");
    EXPECT_THAT(r.patches(0).functions(), ::testing::ElementsAre(relu));
    EXPECT_TRUE(r.patches(0).active());
  }
  // A snapshot taken while patched restores the patched code under the same patch id; a damaged
  // one is refused and changes nothing.
  {
    grpc::ClientContext sctx;
    cuvil::admin::v1::SnapshotRequest sq;
    sq.set_name("lenet");
    cuvil::admin::v1::SnapshotResponse snap;
    ASSERT_TRUE(admin->Snapshot(&sctx, sq, &snap).ok());
    EXPECT_EQ(snap.version(), 1);
    cuvil::admin::v1::RestoreSnapshotRequest bad;
    bad.set_snapshot(snap.snapshot().substr(0, snap.snapshot().size() / 2));
    grpc::ClientContext bctx;
    cuvil::admin::v1::RestoreSnapshotResponse br;
    EXPECT_EQ(admin->RestoreSnapshot(&bctx, bad, &br).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_EQ(output(), patched);
    cuvil::admin::v1::RestoreSnapshotRequest rq;
    rq.set_snapshot(snap.snapshot());
    grpc::ClientContext rctx;
    cuvil::admin::v1::RestoreSnapshotResponse rr;
    grpc::Status rs = admin->RestoreSnapshot(&rctx, rq, &rr);
    ASSERT_TRUE(rs.ok()) << rs.error_message();
    EXPECT_EQ(rr.name(), "lenet");
    EXPECT_THAT(rr.patch_ids(), ::testing::ElementsAre(pr.patch_id()));
    EXPECT_EQ(output(), patched);  // The restored version serves the patched code.
  }
  {
    grpc::ClientContext ctx;
    cuvil::admin::v1::RollbackRequest q;
    q.set_name("lenet");
    q.set_patch_id("999999");
    cuvil::admin::v1::RollbackResponse r;
    EXPECT_EQ(admin->Rollback(&ctx, q, &r).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  grpc::ClientContext ctx;
  cuvil::admin::v1::RollbackRequest q;
  q.set_name("lenet");
  q.set_patch_id(pr.patch_id());
  cuvil::admin::v1::RollbackResponse r;
  ASSERT_TRUE(admin->Rollback(&ctx, q, &r).ok());
  EXPECT_EQ(output(), before);
}

TEST_F(GrpcServerTest, LoadParametersAreValidatedLikeHttp) {
  for (const testing::BadLoadCase& c : testing::BadLoadCases()) {
    inference::RepositoryModelLoadRequest q;
    q.set_model_name(c.model);
    for (const auto& p : c.params) {
      inference::ModelRepositoryParameter& param = (*q.mutable_parameters())[p.key];
      switch (p.kind) {
        case testing::BadLoadCase::Param::kString:
          param.set_string_param(p.value);
          break;
        case testing::BadLoadCase::Param::kBytes:
          param.set_bytes_param(p.value);
          break;
        case testing::BadLoadCase::Param::kInt:
          param.set_int64_param(std::stoi(p.value));
          break;
      }
    }
    grpc::ClientContext ctx;
    inference::RepositoryModelLoadResponse r;
    grpc::Status s = stub_->RepositoryModelLoad(&ctx, q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << c.what;
    EXPECT_EQ(s.error_message(), c.message) << c.what;
  }
  {
    grpc::ClientContext ctx;
    inference::RepositoryModelUnloadRequest q;
    q.set_model_name("a\nb");
    inference::RepositoryModelUnloadResponse r;
    grpc::Status s = stub_->RepositoryModelUnload(&ctx, q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("invalid model name"));
  }
  // A good inline load: the model's bytes in a file: parameter.
  inference::RepositoryModelLoadRequest q;
  q.set_model_name("mlp_grpc");
  (*q.mutable_parameters())["file:4/model.onnx"].set_bytes_param(testing::ReadExampleModel("mlp"));
  grpc::ClientContext ctx;
  inference::RepositoryModelLoadResponse lr;
  grpc::Status s = stub_->RepositoryModelLoad(&ctx, q, &lr);
  ASSERT_TRUE(s.ok()) << s.error_message();
  HostTensor input = testing::ReadReference("mlp", 2, "input");
  inference::ModelInferResponse r;
  ASSERT_TRUE(Infer(testing::RawInferRequest("mlp_grpc", input), &r).ok());
  EXPECT_EQ(r.model_version(), "4");
  testing::ExpectClose(reinterpret_cast<const float*>(r.raw_output_contents(0).data()),
                       testing::ReadReference("mlp", 2, "output"));
}

TEST(GrpcAdminTest, InlineLoadNamesFollowRepositoryRules) {
  auto server = testing::StartServer(testing::MakeRepository("inline_names_repo"));
  ASSERT_NE(server, nullptr);
  auto admin = cuvil::admin::v1::ModelAdmin::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->grpc_port()), grpc::InsecureChannelCredentials()));
  const std::string bytes = testing::ReadExampleModel("mlp");
  for (const std::string& name : {std::string("a/b"), std::string(".."), std::string("a\\b"),
                                  std::string("tab\there"), std::string(300, 'n'), std::string()}) {
    grpc::ClientContext ctx;
    cuvil::admin::v1::LoadModelRequest q;
    q.set_name(name);
    q.set_onnx_model(bytes);
    q.set_wait(true);
    cuvil::admin::v1::LoadModelResponse r;
    grpc::Status s = admin->LoadModel(&ctx, q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << name;
    EXPECT_THAT(s.error_message(), HasSubstr("invalid model name")) << name;
  }
  EXPECT_EQ(server->models()->Index().size(), 2u);  // Nothing was added.
}

TEST(GrpcAdminTest, InlineLoadAndBadModelKeepOthersServing) {
  auto server = testing::StartServer(testing::MakeRepository("inline_repo"));
  ASSERT_NE(server, nullptr);
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server->grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto admin = cuvil::admin::v1::ModelAdmin::NewStub(channel);
  std::ifstream f(testing::SourceDir() + "/examples/model-repository/mlp/1/model.onnx",
                  std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  {
    grpc::ClientContext ctx;
    cuvil::admin::v1::LoadModelRequest q;
    q.set_name("mlp_inline");
    q.set_onnx_model(bytes);
    q.set_version(3);
    q.set_wait(true);
    cuvil::admin::v1::LoadModelResponse r;
    grpc::Status s = admin->LoadModel(&ctx, q, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_THAT(r.versions(), ::testing::ElementsAre(3));
  }
  {
    grpc::ClientContext ctx;
    cuvil::admin::v1::LoadModelRequest q;
    q.set_name("broken");
    q.set_onnx_model(bytes.substr(0, bytes.size() / 3));
    q.set_wait(true);
    cuvil::admin::v1::LoadModelResponse r;
    grpc::Status s = admin->LoadModel(&ctx, q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("not a valid ONNX model"));
  }
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  HostTensor input = testing::ReadReference("mlp", 2, "input");
  inference::ModelInferRequest q = testing::RawInferRequest("mlp_inline", input);
  grpc::ClientContext ctx;
  inference::ModelInferResponse r;
  ASSERT_TRUE(stub->ModelInfer(&ctx, q, &r).ok());
  EXPECT_EQ(r.model_version(), "3");
  testing::ExpectClose(reinterpret_cast<const float*>(r.raw_output_contents(0).data()),
                       testing::ReadReference("mlp", 2, "output"));
}

}  // namespace
}  // namespace cuvil

namespace cuvil {
namespace {

bool WaitForReady(CuvilServer& server, const std::string& model, bool ready) {
  for (int i = 0; i < 200; ++i) {
    if (server.models()->Get(model, "").ok() == ready) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(ModelControlModeTest, ExplicitModeLoadsOnlyTheNamedModels) {
  ServerOptions options;
  options.control_mode = ServerOptions::ControlMode::kExplicit;
  options.load_models = {"lenet"};
  auto server = testing::StartServer(testing::MakeRepository("explicit_repo"), options);
  ASSERT_NE(server, nullptr);
  EXPECT_TRUE(server->models()->Get("lenet", "").ok());
  EXPECT_EQ(server->models()->Get("mlp", "").status().code(), absl::StatusCode::kNotFound);
  LoadRequest load;
  load.name = "mlp";
  ASSERT_TRUE(server->models()->Load(load).ok());
  EXPECT_TRUE(server->models()->Get("mlp", "").ok());
}

TEST(ModelControlModeTest, PollModeFollowsTheRepository) {
  namespace fs = std::filesystem;
  std::string repo = testing::MakeRepository("poll_repo");
  fs::path parked = fs::path(::testing::TempDir()) / "parked_mlp";
  fs::remove_all(parked);
  fs::rename(fs::path(repo) / "mlp", parked);
  ServerOptions options;
  options.control_mode = ServerOptions::ControlMode::kPoll;
  options.poll_interval_secs = 1;
  auto server = testing::StartServer(repo, options);
  ASSERT_NE(server, nullptr);
  EXPECT_FALSE(server->models()->Get("mlp", "").ok());
  fs::rename(parked, fs::path(repo) / "mlp");  // A new model appears...
  EXPECT_TRUE(WaitForReady(*server, "mlp", true));
  fs::remove_all(fs::path(repo) / "lenet");  // ...and another disappears.
  EXPECT_TRUE(WaitForReady(*server, "lenet", false));
  EXPECT_TRUE(server->models()->Get("mlp", "").ok());
}

}  // namespace
}  // namespace cuvil
