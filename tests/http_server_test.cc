// End-to-end tests of the HTTP/REST front end with a real HTTP client on ephemeral ports.
#include <httplib.h>

#include <nlohmann/json.hpp>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.admin_token = "tok";
    server_ = testing::StartServer(testing::MakeRepository("http_repo"), options);
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
  }

  json InferBody(const HostTensor& input) {
    json data = json::array();
    for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
    return {{"id", "abc"},
            {"inputs", {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()}, {"data", data}}}}};
  }

  std::unique_ptr<CuvilServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpServerTest, HealthMetadataConfig) {
  EXPECT_EQ(client_->Get("/v2/health/live")->status, 200);
  EXPECT_EQ(client_->Get("/v2/health/ready")->status, 200);
  auto meta = client_->Get("/v2/models/mlp");
  ASSERT_EQ(meta->status, 200);
  json m = json::parse(meta->body);
  EXPECT_EQ(m["inputs"][0]["shape"], json({-1, 784}));
  EXPECT_EQ(client_->Get("/v2/models/mlp/ready")->status, 200);
  EXPECT_EQ(client_->Get("/v2/models/nope/ready")->status, 400);
  auto config = client_->Get("/v2/models/lenet/config");
  ASSERT_EQ(config->status, 200);
  EXPECT_EQ(json::parse(config->body)["max_batch_size"], 32);
  auto server_meta = json::parse(client_->Get("/v2")->body);
  EXPECT_EQ(server_meta["name"], "cuvil");
}

TEST_F(HttpServerTest, JsonInferMatchesReference) {
  for (int set = 0; set < 3; ++set) {
    HostTensor input = testing::ReadReference("mlp", set, "input");
    HostTensor expected = testing::ReadReference("mlp", set, "output");
    auto res = client_->Post("/v2/models/mlp/infer", InferBody(input).dump(), "application/json");
    ASSERT_EQ(res->status, 200) << res->body;
    json r = json::parse(res->body);
    EXPECT_EQ(r["id"], "abc");
    std::vector<float> got = r["outputs"][0]["data"].get<std::vector<float>>();
    ASSERT_EQ(static_cast<int64_t>(got.size()), expected.num_elements());
    testing::ExpectClose(got.data(), expected);
  }
}

TEST_F(HttpServerTest, BinaryTensorExtension) {
  HostTensor input = testing::ReadReference("lenet", 2, "input");
  HostTensor expected = testing::ReadReference("lenet", 2, "output");
  json header = {{"inputs", {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()},
                              {"parameters", {{"binary_data_size", input.byte_size()}}}}}},
                 {"outputs", {{{"name", "output"}, {"parameters", {{"binary_data", true}}}}}}};
  std::string head = header.dump();
  std::string body = head + std::string(reinterpret_cast<const char*>(input.data()), input.byte_size());
  httplib::Headers headers = {{"Inference-Header-Content-Length", std::to_string(head.size())}};
  auto res = client_->Post("/v2/models/lenet/infer", headers, body, "application/octet-stream");
  ASSERT_EQ(res->status, 200) << res->body;
  size_t json_len = std::stoul(res->get_header_value("Inference-Header-Content-Length"));
  json r = json::parse(res->body.substr(0, json_len));
  ASSERT_EQ(r["outputs"][0]["parameters"]["binary_data_size"], expected.byte_size());
  ASSERT_EQ(res->body.size() - json_len, expected.byte_size());
  testing::ExpectClose(reinterpret_cast<const float*>(res->body.data() + json_len), expected);
}

TEST_F(HttpServerTest, ErrorsUseTritonStatusMapping) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  auto unknown = client_->Post("/v2/models/nope/infer", InferBody(input).dump(), "application/json");
  EXPECT_EQ(unknown->status, 404);
  EXPECT_THAT(json::parse(unknown->body)["error"].get<std::string>(), HasSubstr("nope"));
  json bad_shape = InferBody(input);
  bad_shape["inputs"][0]["shape"] = {1, 783};
  auto res = client_->Post("/v2/models/mlp/infer", bad_shape.dump(), "application/json");
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(json::parse(res->body)["error"].get<std::string>(), HasSubstr("input"));
  auto garbage = client_->Post("/v2/models/mlp/infer", "{not json", "application/json");
  EXPECT_EQ(garbage->status, 400);
  EXPECT_TRUE(json::parse(garbage->body).contains("error"));
  // Repository calls need the admin token.
  EXPECT_EQ(client_->Post("/v2/repository/index", "", "application/json")->status, 401);
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  auto index = client_->Post("/v2/repository/index", auth, "", "application/json");
  ASSERT_EQ(index->status, 200);
  EXPECT_EQ(json::parse(index->body).size(), 2u);
  // The model still serves.
  EXPECT_EQ(client_->Post("/v2/models/mlp/infer", InferBody(input).dump(), "application/json")->status, 200);
}

TEST_F(HttpServerTest, UnloadAndLoadThroughRepositoryApi) {
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  ASSERT_EQ(client_->Post("/v2/repository/models/lenet/unload", auth, "", "application/json")->status, 200);
  EXPECT_EQ(client_->Get("/v2/models/lenet/ready")->status, 400);
  ASSERT_EQ(client_->Post("/v2/repository/models/lenet/load", auth, "", "application/json")->status, 200);
  EXPECT_EQ(client_->Get("/v2/models/lenet/ready")->status, 200);
  auto stats = client_->Get("/v2/models/mlp/stats");
  ASSERT_EQ(stats->status, 200);
  EXPECT_EQ(json::parse(stats->body)["model_stats"][0]["inference_count"], 0);  // Warmup is not counted.
}

}  // namespace
}  // namespace cuvil
