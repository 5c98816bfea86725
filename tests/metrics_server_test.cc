// /metrics of a live server: exact counts after N requests, and promtool accepts the exposition.
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

// The value of the first sample whose line starts with `prefix` (name plus labels), or -1.
double Sample(const std::string& body, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = body.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || body[pos - 1] == '\n') {
      size_t end = body.find('\n', pos);
      std::string line = body.substr(pos, end - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += prefix.size();
  }
  return -1;
}

TEST(MetricsServerTest, CountsAreExactAndPromtoolAcceptsTheScrape) {
  auto server = testing::StartServer(testing::MakeRepository("metrics_repo"));
  ASSERT_NE(server, nullptr);
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->grpc_port()), grpc::InsecureChannelCredentials()));
  HostTensor input = testing::ReadReference("mlp", 1, "input");  // Batch 2.
  constexpr int kRequests = 25, kBad = 3;
  for (int i = 0; i < kRequests + kBad; ++i) {
    inference::ModelInferRequest q = testing::RawInferRequest("mlp", input);
    if (i >= kRequests) q.mutable_inputs(0)->set_datatype("INT64");
    grpc::ClientContext ctx;
    inference::ModelInferResponse r;
    EXPECT_EQ(stub->ModelInfer(&ctx, q, &r).ok(), i < kRequests);
  }
  httplib::Client client("127.0.0.1", server->metrics_port());
  auto res = client.Get("/metrics");
  ASSERT_EQ(res->status, 200);
  EXPECT_THAT(res->get_header_value("Content-Type"), ::testing::HasSubstr("version=0.0.4"));
  const std::string& body = res->body;
  const std::string mlp = "model=\"mlp\",version=\"1\"";
  EXPECT_EQ(Sample(body, "cuvil_inference_requests_total{" + mlp + ",status=\"success\""),
            kRequests);
  EXPECT_EQ(Sample(body, "cuvil_inference_requests_total{" + mlp +
                             ",status=\"failure\",reason=\"invalid_argument\""),
            kBad);
  EXPECT_EQ(Sample(body, "cuvil_inference_samples_total{" + mlp), 2 * kRequests);
  // Requests ran one at a time (no dynamic batching wait is possible here), warmup excluded.
  EXPECT_EQ(Sample(body, "cuvil_inference_executions_total{" + mlp), kRequests);
  EXPECT_EQ(Sample(body, "cuvil_batch_size_count{" + mlp), kRequests);
  EXPECT_EQ(Sample(body, "cuvil_request_duration_seconds_count{" + mlp), kRequests);
  EXPECT_EQ(Sample(body, "cuvil_request_duration_seconds_bucket{" + mlp + ",le=\"+Inf\""),
            kRequests);
  EXPECT_EQ(Sample(body, "cuvil_queue_duration_seconds_count{" + mlp), kRequests);
  EXPECT_EQ(Sample(body, "cuvil_request_latency_seconds_count{" + mlp), kRequests);
  EXPECT_GT(Sample(body, "cuvil_request_latency_seconds{" + mlp + ",quantile=\"0.99\""), 0);
  EXPECT_EQ(Sample(body, "cuvil_model_ready{" + mlp), 1);
  EXPECT_EQ(Sample(body, "cuvil_model_ready{model=\"lenet\",version=\"1\""), 1);
  EXPECT_GT(Sample(body, "process_resident_memory_bytes"), 0);

  std::string path = ::testing::TempDir() + "/scrape.prom";
  std::ofstream(path) << body;
  std::string command = "promtool check metrics < " + path + " 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string output;
  char buf[256];
  while (fgets(buf, sizeof(buf), pipe)) output += buf;
  EXPECT_EQ(pclose(pipe), 0) << output;
  EXPECT_EQ(output, "") << "promtool reported problems";

  // OpenMetrics when the scraper asks for it.
  auto om = client.Get("/metrics", {{"Accept", "application/openmetrics-text;version=1.0.0"}});
  EXPECT_THAT(om->get_header_value("Content-Type"), ::testing::HasSubstr("openmetrics"));
  EXPECT_THAT(om->body, ::testing::EndsWith("# EOF\n"));
}

// An unloaded version's series leave the exposition (loads and unloads of new versions would
// otherwise grow it for ever); loaded again, it is exported again.
TEST(MetricsServerTest, AnUnloadedVersionsSeriesLeaveTheScrape) {
  auto server = testing::StartServer(testing::MakeRepository("metrics_unload_repo"));
  ASSERT_NE(server, nullptr);
  auto stub = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(server->grpc_port()), grpc::InsecureChannelCredentials()));
  httplib::Client client("127.0.0.1", server->metrics_port());
  const std::string lenet = "model=\"lenet\",version=\"1\"";
  ASSERT_EQ(Sample(client.Get("/metrics")->body, "cuvil_model_ready{" + lenet), 1);
  for (int cycle = 0; cycle < 3; ++cycle) {
    {
      grpc::ClientContext ctx;
      inference::RepositoryModelUnloadRequest q;
      q.set_model_name("lenet");
      inference::RepositoryModelUnloadResponse r;
      ASSERT_TRUE(stub->RepositoryModelUnload(&ctx, q, &r).ok());
    }
    // The version object goes once its last request and its scheduler are done.
    std::string body;
    for (int i = 0; i < 100; ++i) {
      body = client.Get("/metrics")->body;
      if (body.find(lenet) == std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_THAT(body, ::testing::Not(::testing::HasSubstr(lenet)));
    EXPECT_EQ(Sample(body, "cuvil_model_ready{model=\"mlp\",version=\"1\""), 1);
    {
      grpc::ClientContext ctx;
      inference::RepositoryModelLoadRequest q;
      q.set_model_name("lenet");
      inference::RepositoryModelLoadResponse r;
      ASSERT_TRUE(stub->RepositoryModelLoad(&ctx, q, &r).ok());
    }
    EXPECT_EQ(Sample(client.Get("/metrics")->body, "cuvil_model_ready{" + lenet), 1);
  }
}

}  // namespace
}  // namespace cuvil
