// End-to-end tests of the HTTP/REST front end with a real HTTP client on ephemeral ports.
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "server_test_util.h"
#include "test_models.h"

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
    return {
        {"id", "abc"},
        {"inputs",
         {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()}, {"data", data}}}}};
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
  json header = {{"inputs",
                  {{{"name", "input"},
                    {"datatype", "FP32"},
                    {"shape", input.shape()},
                    {"parameters", {{"binary_data_size", input.byte_size()}}}}}},
                 {"outputs", {{{"name", "output"}, {"parameters", {{"binary_data", true}}}}}}};
  std::string head = header.dump();
  std::string body =
      head + std::string(reinterpret_cast<const char*>(input.data()), input.byte_size());
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
  auto unknown =
      client_->Post("/v2/models/nope/infer", InferBody(input).dump(), "application/json");
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
  EXPECT_EQ(
      client_->Post("/v2/models/mlp/infer", InferBody(input).dump(), "application/json")->status,
      200);
}

TEST_F(HttpServerTest, UnloadAndLoadThroughRepositoryApi) {
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  ASSERT_EQ(
      client_->Post("/v2/repository/models/lenet/unload", auth, "", "application/json")->status,
      200);
  EXPECT_EQ(client_->Get("/v2/models/lenet/ready")->status, 400);
  ASSERT_EQ(client_->Post("/v2/repository/models/lenet/load", auth, "", "application/json")->status,
            200);
  EXPECT_EQ(client_->Get("/v2/models/lenet/ready")->status, 200);
  auto stats = client_->Get("/v2/models/mlp/stats");
  ASSERT_EQ(stats->status, 200);
  EXPECT_EQ(json::parse(stats->body)["model_stats"][0]["inference_count"],
            0);  // Warmup is not counted.
}

TEST_F(HttpServerTest, AdminAndRepositoryRoutesRefuseBrowsers) {
  const std::string self = "127.0.0.1:" + std::to_string(server_->http_port());
  auto error = [](const httplib::Result& res) {
    return json::parse(res->body)["error"].get<std::string>();
  };
  // A form or a "simple" fetch cannot send application/json cross-origin without a preflight.
  for (const char* type : {"text/plain", "application/x-www-form-urlencoded"}) {
    httplib::Headers auth = {{"Authorization", "Bearer tok"}};
    auto res = client_->Post("/v2/repository/models/lenet/unload", auth, "{}", type);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 415) << type;
    EXPECT_THAT(error(res), HasSubstr("Content-Type: application/json"));
  }
  {
    // No Content-Type from a browser (a body-less fetch carries Origin) is refused.
    httplib::Request req;
    req.method = "POST";
    req.path = "/v2/admin/models/lenet/unload";
    req.headers = {{"Authorization", "Bearer tok"},
                   {"Content-Length", "0"},
                   {"Origin", "http://127.0.0.1:" + std::to_string(server_->http_port())}};
    auto res = client_->send(req);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 415);
    EXPECT_THAT(error(res), HasSubstr("got none"));
  }
  // A page from another origin, and DNS rebinding (a foreign Host on a loopback-bound server).
  httplib::Headers cross = {{"Authorization", "Bearer tok"}, {"Origin", "http://evil.example"}};
  auto res = client_->Post("/v2/repository/models/lenet/unload", cross, "{}", "application/json");
  EXPECT_EQ(res->status, 403);
  EXPECT_THAT(error(res), HasSubstr("cross-origin"));
  httplib::Headers rebound = {{"Authorization", "Bearer tok"},
                              {"Host", "evil.example:" + std::to_string(server_->http_port())}};
  res = client_->Post("/v2/repository/models/lenet/unload", rebound, "{}", "application/json");
  EXPECT_EQ(res->status, 403);
  EXPECT_THAT(error(res), HasSubstr("not a loopback name"));
  res = client_->Get("/v2/admin/models", rebound);
  EXPECT_EQ(res->status, 403);
  // Nothing was unloaded.
  EXPECT_EQ(client_->Get("/v2/models/lenet/ready")->status, 200);

  // The same origin, and clients that send no Origin, still work.
  httplib::Headers same = {{"Authorization", "Bearer tok"}, {"Origin", "http://" + self}};
  res = client_->Post("/v2/repository/index", same, "", "application/json; charset=utf-8");
  EXPECT_EQ(res->status, 200) << res->body;
  auto listed = client_->Get("/v2/admin/models", {{"Authorization", "Bearer tok"}});
  EXPECT_EQ(listed->status, 200);
  EXPECT_NE(listed->body.find("\"cuvil_precision\":\"float32:"), std::string::npos) << listed->body;

  // Inference routes are untouched: Triton clients send octet-stream, text or nothing.
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  std::string body = InferBody(input).dump();
  for (const char* type : {"text/plain", "application/octet-stream"}) {
    EXPECT_EQ(client_->Post("/v2/models/mlp/infer", body, type)->status, 200) << type;
  }
  httplib::Request req;
  req.method = "POST";
  req.path = "/v2/models/mlp/infer";
  req.body = body;
  req.headers = {{"Content-Length", std::to_string(body.size())}};
  res = client_->send(req);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
}

TEST_F(HttpServerTest, DeepJsonIsRefusedBeforeTheModelIsLookedUp) {
  // Balanced, so a parser would accept it; the model does not exist, so only a check that runs
  // first can answer 400 rather than 404.
  const int depth = 100000;
  std::string body = R"({"inputs":)" + std::string(depth, '[') + std::string(depth, ']') + "}";
  auto res = client_->Post("/v2/models/nope/infer", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body)["error"], "JSON nesting deeper than 64");
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  res =
      client_->Post("/v2/admin/models/load", auth,
                    R"({"name":"x","deep":)" + std::string(100, '[') + std::string(100, ']') + "}",
                    "application/json");
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body)["error"], "JSON nesting deeper than 64");
}

TEST_F(HttpServerTest, LoadParametersAreValidatedLikeGrpc) {
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  for (const testing::BadLoadCase& c : testing::BadLoadCases()) {
    json params = json::object();
    for (const auto& p : c.params) {
      switch (p.kind) {
        case testing::BadLoadCase::Param::kString:
          params[p.key] = p.value;
          break;
        case testing::BadLoadCase::Param::kBytes:
          params[p.key] = absl::Base64Escape(p.value);
          break;
        case testing::BadLoadCase::Param::kInt:
          params[p.key] = std::stoi(p.value);
          break;
      }
    }
    std::string body = json{{"parameters", params}}.dump();
    auto res = client_->Post("/v2/repository/models/" + c.url_model + "/load", auth, body,
                             "application/json");
    ASSERT_TRUE(res) << c.what;
    EXPECT_EQ(res->status, 400) << c.what << ": " << res->body;
    EXPECT_EQ(json::parse(res->body)["error"], c.message) << c.what;
  }
  // Admin inline loads follow the same name rules.
  std::string onnx = absl::Base64Escape(testing::ReadExampleModel("mlp"));
  for (const char* name : {"a/b", "..", "a\\b"}) {
    json load = {{"name", name}, {"onnx_model_base64", onnx}};
    auto res = client_->Post("/v2/admin/models/load", auth, load.dump(), "application/json");
    EXPECT_EQ(res->status, 400) << name;
    EXPECT_THAT(json::parse(res->body)["error"].get<std::string>(),
                HasSubstr("invalid model name"));
  }
  EXPECT_EQ(client_->Get("/v2/models/lenet/ready")->status, 200);
  auto index = client_->Post("/v2/repository/index", auth, "", "application/json");
  EXPECT_EQ(json::parse(index->body).size(), 2u);  // No model was added.

  // A good inline load through the file: parameter (base64 over HTTP) serves.
  json good = {{"parameters", {{"file:2/model.onnx", onnx}}}};
  auto res =
      client_->Post("/v2/repository/models/mlp_http/load", auth, good.dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  HostTensor input = testing::ReadReference("mlp", 1, "input");
  res = client_->Post("/v2/models/mlp_http/infer", InferBody(input).dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["model_version"], "2");
}

// KServe carries tensors only: a model whose graph output is a sequence fails to load, and the
// error says why (the importer resolves sequences inside a graph, not at its interface).
TEST_F(HttpServerTest, SequenceOutputModelIsRefusedWithAClearError) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("sequence_out");
  auto* x = g->add_input();
  x->set_name("x");
  x->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  x->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(2);
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("SequenceConstruct");
  n->add_input("x");
  n->add_input("x");
  n->add_output("s");
  auto* s = g->add_output();
  s->set_name("s");
  s->mutable_type()
      ->mutable_sequence_type()
      ->mutable_elem_type()
      ->mutable_tensor_type()
      ->set_elem_type(onnx::TensorProto::FLOAT);
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  json load = {{"name", "sequence_out"},
               {"onnx_model_base64", absl::Base64Escape(model.SerializeAsString())}};
  auto res = client_->Post("/v2/admin/models/load", auth, load.dump(), "application/json");
  ASSERT_TRUE(res);
  EXPECT_NE(res->status, 200) << res->body;
  EXPECT_THAT(json::parse(res->body)["error"].get<std::string>(),
              HasSubstr("graph output 's' is a sequence: sequence and optional graph inputs and "
                        "outputs are not supported (KServe requests carry tensors only"));
  EXPECT_EQ(client_->Get("/v2/models/sequence_out/ready")->status, 400);
}

TEST(HttpServerLimitsTest, OversizedBodiesGet413) {
  ServerOptions options;
  options.max_request_bytes = 1000;
  auto server = testing::StartServer(testing::MakeRepository("http_limits_repo"), options);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  std::string big(2000, ' ');
  big[0] = '{';
  big.back() = '}';
  auto res = client.Post("/v2/models/mlp/infer", big, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_THAT(json::parse(res->body)["error"].get<std::string>(), HasSubstr("exceeds"));
  // Chunked: no Content-Length for the server to check up front.
  res = client.Post(
      "/v2/models/mlp/infer",
      [&big](size_t offset, httplib::DataSink& sink) {
        if (offset < big.size()) {
          sink.write(big.data() + offset, std::min<size_t>(100, big.size() - offset));
        } else {
          sink.done();
        }
        return true;
      },
      "application/json");
  // The server answers 413 and closes while the client may still be sending chunks; then the
  // client sees the reset instead of the answer. Either way the body is refused, never served.
  if (res) {
    EXPECT_EQ(res->status, 413);
    EXPECT_THAT(json::parse(res->body)["error"].get<std::string>(), HasSubstr("max_request_bytes"));
  }
  // A body within the limit is served.
  httplib::Client fresh("127.0.0.1", server->http_port());
  EXPECT_EQ(fresh.Get("/v2/health/ready")->status, 200);
}

TEST(ServerStartTest, NonLoopbackBindNeedsATokenOrInsecureAdmin) {
  std::string repo = testing::MakeRepository("bind_repo");
  ServerOptions options;
  options.model_repositories = {repo};
  options.control_mode = ServerOptions::ControlMode::kExplicit;  // No models: a quick start.
  options.grpc_port = options.http_port = options.metrics_port = 0;
  options.bind_address = "0.0.0.0";
  auto refused = CuvilServer::Start(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("--admin-token-file"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--insecure-admin"));
  options.insecure_admin = true;
  auto insecure = CuvilServer::Start(options);
  ASSERT_TRUE(insecure.ok()) << insecure.status();
  (*insecure)->Shutdown();
  options.insecure_admin = false;
  options.admin_token = "tok";
  auto with_token = CuvilServer::Start(options);
  ASSERT_TRUE(with_token.ok()) << with_token.status();
  // Bound to every address, the Host check is off but the token is still needed.
  httplib::Client client("127.0.0.1", (*with_token)->http_port());
  httplib::Headers headers = {{"Host", "inference.example"}};
  EXPECT_EQ(client.Get("/v2/admin/models", headers)->status, 401);
  headers.emplace("Authorization", "Bearer tok");
  EXPECT_EQ(client.Get("/v2/admin/models", headers)->status, 200);
}

// ---- Issue 38 (a): slow, idle and numerous clients ----

using SteadyClock = std::chrono::steady_clock;

// A raw blocking loopback connection to `port`, from `source` (any 127.x.y.z works on Linux);
// -1 on failure.
int ConnectFrom(int port, const char* source = "127.0.0.1") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in from{};
  from.sin_family = AF_INET;
  inet_pton(AF_INET, source, &from.sin_addr);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool SendText(int fd, std::string_view text) {
  return ::send(fd, text.data(), text.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(text.size());
}

// Reads one response with an empty or Content-Length body; "" on timeout or close. Bytes of
// the next response (pipelining) are kept for the next call on `fd`.
std::string ReadResponse(int fd, std::chrono::milliseconds timeout) {
  static std::map<int, std::string> carried;
  std::string got = std::move(carried[fd]);
  carried.erase(fd);
  auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    size_t end = got.find("\r\n\r\n");
    if (end != std::string::npos) {
      size_t length = 0;
      size_t at = got.find("Content-Length: ");
      if (at != std::string::npos && at < end) length = std::stoul(got.substr(at + 16));
      if (got.size() >= end + 4 + length) {
        if (got.size() > end + 4 + length) carried[fd] = got.substr(end + 4 + length);
        got.resize(end + 4 + length);
        return got;
      }
    }
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return "";
    got.append(buf, static_cast<size_t>(n));
  }
  return "";
}

// True when the server has closed `fd` (EOF or reset); drains anything it sent before.
bool ServerClosed(int fd) {
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0) return true;
    if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
}

// Sends a byte to every `trickling` connection every 250 ms (so no single read ever times out)
// and watches `waiting` ones, until the server has closed them all or 15 s after `opened`;
// returns how many are still open.
size_t TrickleUntilClosed(const std::vector<int>& trickling, const std::vector<int>& waiting,
                          SteadyClock::time_point opened) {
  std::vector<bool> closed(trickling.size() + waiting.size(), false);
  size_t open_left = closed.size();
  while (open_left > 0 && SteadyClock::now() - opened < std::chrono::seconds(15)) {
    for (size_t i = 0; i < closed.size(); ++i) {
      if (closed[i]) continue;
      const bool trickles = i < trickling.size();
      const int fd = trickles ? trickling[i] : waiting[i - trickling.size()];
      if (ServerClosed(fd) || (trickles && !SendText(fd, "a"))) {
        closed[i] = true;
        --open_left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  return open_left;
}

class HttpSlowClientTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options) {
    server_ = testing::StartServer(testing::MakeRepository("http_slow_repo"), options);
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    for (int fd : fds_) ::close(fd);
  }
  int Open(const char* source = "127.0.0.1") {
    int fd = ConnectFrom(server_->http_port(), source);
    EXPECT_GE(fd, 0);
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  // `count` connections to `port` that sent `head` (an unfinished header block); stops at the
  // first that cannot be opened or written, so callers check the size.
  std::vector<int> OpenSlow(int port, const char* head, int count) {
    std::vector<int> slow;
    for (int i = 0; i < count; ++i) {
      int fd = ConnectFrom(port);
      if (fd < 0) break;
      fds_.push_back(fd);
      if (!SendText(fd, head)) break;
      slow.push_back(fd);
    }
    return slow;
  }

  std::unique_ptr<CuvilServer> server_;
  std::vector<int> fds_;
};

// The finding: connections that send a request line and a header, then trickle, used to hold
// every HTTP thread, so health checks and inference timed out. Now neither slow headers, slow
// bodies nor idle keep-alive connections hold a handler thread, and the slow ones are cut at the
// header deadline however they trickle.
TEST_F(HttpSlowClientTest, SlowAndIdleClientsDoNotStopHealthOrInference) {
  ServerOptions options;
  options.http_threads = 4;
  options.http_header_timeout_secs = 2;
  options.http_idle_timeout_secs = 60;
  Start(options);
  const int port = server_->http_port();
  const auto opened = SteadyClock::now();
  std::vector<int> slow =
      OpenSlow(port, "GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a", 64);
  ASSERT_EQ(slow.size(), 64u);
  // Bodies that never arrive: each is on a handler thread until the minimum rate cuts it.
  std::vector<int> slow_body;
  for (int i = 0; i < 2; ++i) {
    int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendText(fd,
                         "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"));
    slow_body.push_back(fd);
  }
  std::vector<int> idle;
  for (int i = 0; i < 64; ++i) {
    int fd = Open();
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendText(fd, "GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_THAT(ReadResponse(fd, std::chrono::seconds(5)), HasSubstr("200 OK")) << "idle " << i;
    idle.push_back(fd);
  }

  // A new client is answered at once (generous bound: CI machines are loaded).
  httplib::Client fresh("127.0.0.1", port);
  fresh.set_connection_timeout(std::chrono::seconds(1));
  fresh.set_read_timeout(std::chrono::seconds(1));
  auto t0 = SteadyClock::now();
  auto ready = fresh.Get("/v2/health/ready");
  ASSERT_TRUE(ready) << "no answer to /v2/health/ready";
  EXPECT_EQ(ready->status, 200);
  EXPECT_LT(SteadyClock::now() - t0, std::chrono::seconds(1));
  auto live = fresh.Get("/v2/health/live");
  ASSERT_TRUE(live);
  EXPECT_EQ(live->status, 200);
  auto model_ready = fresh.Get("/v2/models/mlp/ready");
  ASSERT_TRUE(model_ready);
  EXPECT_EQ(model_ready->status, 200);
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  json data = json::array();
  for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
  json body = {
      {"inputs",
       {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()}, {"data", data}}}}};
  fresh.set_read_timeout(std::chrono::seconds(10));
  auto infer = fresh.Post("/v2/models/mlp/infer", body.dump(), "application/json");
  ASSERT_TRUE(infer) << "no answer to an infer";
  EXPECT_EQ(infer->status, 200) << infer->body;

  // The slow clients keep trickling a header byte every 250 ms (so no single read ever times
  // out), yet the server closes each at its 2 s header deadline; the slow bodies go too.
  const size_t open_left = TrickleUntilClosed(slow, slow_body, opened);
  const auto all_closed = SteadyClock::now() - opened;
  EXPECT_EQ(open_left, 0u) << "slow connections still open after 15 s";
  // 2 s deadline (the bodies: 2 s grace plus their rate) plus generous scheduling slack.
  EXPECT_LT(all_closed, std::chrono::seconds(12));

  // Idle keep-alive connections were never cut (60 s idle timeout) and still serve.
  for (int fd : {idle.front(), idle.back()}) {
    ASSERT_TRUE(SendText(fd, "GET /v2/models/mlp/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    EXPECT_THAT(ReadResponse(fd, std::chrono::seconds(5)), HasSubstr("200 OK"));
  }
}

TEST_F(HttpSlowClientTest, ConnectionCapsPerAddressAndInAll) {
  ServerOptions options;
  options.http_threads = 2;
  options.http_max_connections = 24;
  options.http_max_connections_per_address = 8;
  Start(options);
  // 8 idle connections from 127.0.0.2; the 9th from there is refused with 503.
  std::vector<int> from_two;
  for (int i = 0; i < 8; ++i) {
    int fd = Open("127.0.0.2");
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendText(fd, "GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    ASSERT_THAT(ReadResponse(fd, std::chrono::seconds(5)), HasSubstr("200 OK"));
    from_two.push_back(fd);
  }
  int ninth = Open("127.0.0.2");
  ASSERT_GE(ninth, 0);
  SendText(ninth, "GET /v2/health/live HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  std::string refused = ReadResponse(ninth, std::chrono::seconds(5));
  EXPECT_THAT(refused, HasSubstr("503"));
  EXPECT_THAT(refused, HasSubstr("too many connections from this address"));
  // Another address is not affected.
  int other = Open("127.0.0.3");
  ASSERT_GE(other, 0);
  ASSERT_TRUE(SendText(other, "GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
  EXPECT_THAT(ReadResponse(other, std::chrono::seconds(5)), HasSubstr("200 OK"));

  // Fill the server to its cap of 24 with idle connections from other addresses: a new client
  // still gets in (the connection idle longest, the first from 127.0.0.2, makes room).
  const char* sources[] = {"127.0.0.4", "127.0.0.5"};
  for (int i = 0; i < 15; ++i) {
    int fd = Open(sources[i % 2]);
    ASSERT_GE(fd, 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  httplib::Client fresh("127.0.0.1", server_->http_port());
  fresh.set_read_timeout(std::chrono::seconds(2));
  auto ready = fresh.Get("/v2/health/ready");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200);
  auto t0 = SteadyClock::now();
  while (!ServerClosed(from_two.front()) && SteadyClock::now() - t0 < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ServerClosed(from_two.front())) << "the oldest idle connection was not evicted";
}

// The scrape port had its own plain httplib server (a thread per connection, 8 threads): 64 clients
// trickling a header held every thread, so Prometheus' scrapes timed out. It now shares the HTTP
// front end's connection stage and deadlines.
TEST_F(HttpSlowClientTest, SlowClientsOnTheMetricsPortDoNotStopScrapes) {
  ServerOptions options;
  options.http_header_timeout_secs = 2;
  Start(options);
  const int port = server_->metrics_port();
  const auto opened = SteadyClock::now();
  std::vector<int> slow =
      OpenSlow(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a", 64);
  ASSERT_EQ(slow.size(), 64u);
  httplib::Client scraper("127.0.0.1", port);
  scraper.set_connection_timeout(std::chrono::seconds(1));
  scraper.set_read_timeout(std::chrono::seconds(2));
  auto t0 = SteadyClock::now();
  auto scrape = scraper.Get("/metrics");
  ASSERT_TRUE(scrape) << "no answer to a scrape";
  EXPECT_EQ(scrape->status, 200);
  EXPECT_THAT(scrape->body, HasSubstr("cuvil_"));
  EXPECT_LT(SteadyClock::now() - t0, std::chrono::seconds(2));
  // Only GET /metrics is served there.
  auto other = scraper.Get("/v2/health/ready");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);
  auto post = scraper.Post("/metrics", "x", "text/plain");
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  // The trickling clients are cut at the 2 s header deadline.
  EXPECT_EQ(TrickleUntilClosed(slow, {}, opened), 0u)
      << "slow metrics connections still open after 15 s";
}

// A connection goes back to the connection thread after each request: keep-alive and pipelined
// requests through handlers still work, and a body a handler leaves unread ends the connection
// instead of being parsed as the next request.
TEST_F(HttpSlowClientTest, KeepAliveAndPipelinedRequests) {
  ServerOptions options;
  options.http_header_timeout_secs = 2;  // httplib drains an oversized body until reads stall.
  Start(options);
  httplib::Client client("127.0.0.1", server_->http_port());
  client.set_keep_alive(true);
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  json data = json::array();
  for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
  const std::string body =
      json{{"inputs",
            {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()}, {"data", data}}}}}
          .dump();
  for (int i = 0; i < 5; ++i) {
    auto res = client.Post("/v2/models/mlp/infer", body, "application/json");
    ASSERT_TRUE(res) << i;
    EXPECT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(client.Get("/v2/models/mlp")->status, 200);
  }
  // Two requests in one write: an infer (handler) then metadata (handler) then a probe.
  int fd = Open();
  ASSERT_GE(fd, 0);
  std::string two =
      "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body +
      "GET /v2/models/mlp HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
      "GET /v2/health/ready HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  ASSERT_TRUE(SendText(fd, two));
  std::string first = ReadResponse(fd, std::chrono::seconds(10));
  EXPECT_THAT(first, HasSubstr("200 OK"));
  EXPECT_THAT(first, HasSubstr("\"outputs\""));
  std::string second = ReadResponse(fd, std::chrono::seconds(10));
  EXPECT_THAT(second, HasSubstr("200 OK"));
  EXPECT_THAT(second, HasSubstr("\"platform\""));
  EXPECT_THAT(ReadResponse(fd, std::chrono::seconds(10)), HasSubstr("200 OK"));
  // An oversized body is refused (httplib first drains what arrives until a read stalls): the
  // server answers 413 and closes, so the rest of the body is never taken for a request.
  int big = Open();
  ASSERT_GE(big, 0);
  ASSERT_TRUE(SendText(big,
                       "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Length: 999999999999\r\n\r\nGET /v2/health/live HTTP/1.1\r\n\r\n"));
  EXPECT_THAT(ReadResponse(big, std::chrono::seconds(10)), HasSubstr("413"));
  auto t0 = SteadyClock::now();
  while (!ServerClosed(big) && SteadyClock::now() - t0 < std::chrono::seconds(10)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(ServerClosed(big));
}

// A server (null on failure) whose repository `name` holds one model, "wide":
// testing::WideScratchModel(rows), with --max-inflight-bytes 256 MiB (requests get half: 128 MiB).
std::unique_ptr<CuvilServer> StartWideScratchServer(const std::string& name, int64_t rows) {
  namespace fs = std::filesystem;
  std::string repo = testing::MakeRepository(name);
  fs::create_directories(fs::path(repo) / "wide" / "1");
  std::ofstream(fs::path(repo) / "wide" / "1" / "model.onnx", std::ios::binary)
      << testing::WideScratchModel(rows);
  ServerOptions options;
  options.max_inflight_bytes = int64_t{256} << 20;
  return testing::StartServer(repo, options);
}

// Issue 38: a model with free dims sizes its scratch memory (arena) from the request's shapes, so
// a request of a few hundred kilobytes could make the server allocate gigabytes (lraspp at
// 2048x2560: 2.3 GB peak for a 63 MB request). Each execution now reserves its scratch in the
// in-flight budget: too large alone is 413, the budget busy 503; small requests still run.
TEST(HttpScratchBudgetTest, ExecutionScratchCountsInTheInflightBudget) {
  auto server = StartWideScratchServer("http_scratch_repo", 1024);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  client.set_read_timeout(std::chrono::seconds(60));
  auto infer = [&](int64_t n) {
    json data = json::array();
    for (int64_t i = 0; i < 2 * n; ++i) data.push_back(static_cast<float>(i % 7) - 3.0f);
    json body = {
        {"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {2, n}}, {"data", data}}}}};
    return client.Post("/v2/models/wide/infer", body.dump(), "application/json");
  };
  // 2 x 1024 x 32768 floats of scratch (256 MiB) for a 256 KiB input: refused before allocating.
  auto big = infer(32768);
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413) << big->body;
  EXPECT_THAT(big->body, HasSubstr("scratch memory"));
  // 8 MiB of scratch fits, and the answer is right.
  auto small = infer(1024);
  ASSERT_TRUE(small);
  ASSERT_EQ(small->status, 200) << small->body;
  json out = json::parse(small->body)["outputs"][0];
  EXPECT_EQ(out["shape"], json::array({2, 1}));
  EXPECT_EQ(out["data"], json::array({9.0f, 9.0f}));  // The largest (i % 7 - 3)^2.
  EXPECT_EQ(client.Get("/v2/health/ready")->status, 200);
}

// A scratch reservation that fits the budget alone but never beside its own request's input is
// refused as too large (413), not as busy (503 "retry later"): retrying it could never succeed.
TEST(HttpScratchBudgetTest, ScratchThatCannotFitBesideItsRequestIs413) {
  auto server = StartWideScratchServer("http_scratch_beside_repo", 16);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  client.set_read_timeout(std::chrono::seconds(60));
  auto infer = [&](int64_t n) {
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.0f;
    json header = {{"inputs",
                    {{{"name", "x"},
                      {"datatype", "FP32"},
                      {"shape", {1, n}},
                      {"parameters", {{"binary_data_size", 4 * n}}}}}}};
    std::string head = header.dump();
    std::string body = head + std::string(reinterpret_cast<const char*>(x.data()), 4 * x.size());
    httplib::Headers headers = {{"Inference-Header-Content-Length", std::to_string(head.size())}};
    return client.Post("/v2/models/wide/infer", headers, body, "application/octet-stream");
  };
  // 1.04M floats: a 4.16 MB input whose execution needs 32 times that in scratch (133 MB, two
  // tensors of 16 tiles),
  // below the 128 MiB on its own but not beside the input its request holds.
  auto big = infer(1'040'000);
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413) << big->body;
  EXPECT_FALSE(big->has_header("Retry-After"));
  EXPECT_THAT(big->body, HasSubstr("scratch memory of 133120000 bytes beside the 4160000 bytes "
                                   "its requests hold is larger than the"));
  // Nothing stays reserved: a request of a quarter of that size runs and answers right.
  auto small = infer(260'000);
  ASSERT_TRUE(small);
  ASSERT_EQ(small->status, 200) << small->body;
  json out = json::parse(small->body)["outputs"][0];
  EXPECT_EQ(out["data"], json::array({9.0f}));
}

// A config's parameters { key: "cuvil_dim_multiples" } reaches the compiler: a model whose
// shapes hold only for multiples of 8 (RAFT's pattern, testing::DimMultipleModel) loads, serves
// multiples of 8 right, and refuses other heights with 400 naming the dim.
TEST(HttpDimMultiplesTest, ConfigDeclaresMultiples) {
  namespace fs = std::filesystem;
  std::string repo = testing::MakeRepository("http_dim_multiples_repo");
  fs::create_directories(fs::path(repo) / "mult" / "1");
  std::ofstream(fs::path(repo) / "mult" / "1" / "model.onnx", std::ios::binary)
      << testing::DimMultipleModel();
  std::ofstream(fs::path(repo) / "mult" / "config.pbtxt")
      << "max_batch_size: 8\n"
         "parameters { key: \"cuvil_dim_multiples\" value { string_value: \"height=8\" } }\n";
  auto server = testing::StartServer(repo, ServerOptions());
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  auto infer = [&](int64_t h) {
    json data = json::array();
    for (int64_t i = 0; i < 4 * h; ++i) data.push_back(static_cast<float>(i));
    json body = {
        {"inputs", {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {1, 4, h}}, {"data", data}}}}};
    return client.Post("/v2/models/mult/infer", body.dump(), "application/json");
  };
  auto ok = infer(16);
  ASSERT_TRUE(ok);
  ASSERT_EQ(ok->status, 200) << ok->body;
  json out = json::parse(ok->body)["outputs"][0];
  EXPECT_EQ(out["shape"], json::array({1, 5, 16}));
  // Channel c at position t holds c * 16 + t: the sum over 4 channels is 96 + 4t.
  EXPECT_EQ(out["data"][0], 96.0f);
  EXPECT_EQ(out["data"][15], 96.0f + 60.0f);
  EXPECT_EQ(out["data"][16], 96.0f);  // The next output channel, the same sums.
  auto bad = infer(12);
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400) << bad->body;
  EXPECT_THAT(bad->body, HasSubstr("dim 2 is 12"));
  EXPECT_EQ(infer(8)->status, 200);
}

// A model exported at batch 1 with free image sizes (torchvision's detectors, ssdlite): no batch
// dim, so max_batch_size 0, and its first free dim (height) is the code's symbol 0. It loads
// (the default warm-up picks sizes its 2x2 pool accepts: 1x1 does not), answers at two sizes
// from one compile, and refuses an odd height with the model's reason.
TEST(HttpUnbatchedFreeDimsTest, ImageModelAtBatchOneServesEverySize) {
  namespace fs = std::filesystem;
  std::string repo = testing::MakeRepository("http_unbatched_free_dims_repo");
  fs::create_directories(fs::path(repo) / "img" / "1");
  std::ofstream(fs::path(repo) / "img" / "1" / "model.onnx", std::ios::binary)
      << testing::PoolUpsampleConcatModel(1);
  auto server = testing::StartServer(repo, ServerOptions());
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  auto config = client.Get("/v2/models/img/config");
  ASSERT_EQ(config->status, 200) << config->body;
  EXPECT_EQ(json::parse(config->body).value("max_batch_size", -1), 0) << config->body;
  auto infer = [&](int64_t h, int64_t w) {
    json data = json::array();
    for (int64_t i = 0; i < h * w; ++i) data.push_back(static_cast<float>(i));
    json body = {
        {"inputs",
         {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {1, 1, h, w}}, {"data", data}}}}};
    return client.Post("/v2/models/img/infer", body.dump(), "application/json");
  };
  for (auto [h, w] : {std::pair<int64_t, int64_t>{4, 6}, {8, 2}, {2, 10}}) {
    auto res = infer(h, w);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << h << "x" << w << ": " << res->body;
    json out = json::parse(res->body)["outputs"][0];
    EXPECT_EQ(out["shape"], json::array({1, 2, h, w}));
    std::vector<float> y = out["data"].get<std::vector<float>>();
    ASSERT_EQ(y.size(), static_cast<size_t>(2 * h * w));
    for (int64_t r = 0; r < h; ++r) {
      for (int64_t c = 0; c < w; ++c) {
        EXPECT_EQ(y[r * w + c], static_cast<float>(r * w + c));  // Channel 0: x itself.
        // Channel 1: the 2x2 block's maximum, its bottom-right element, repeated.
        const float pooled = static_cast<float>((r | 1) * w + (c | 1));
        EXPECT_EQ(y[h * w + r * w + c], pooled) << h << "x" << w << " at " << r << "," << c;
      }
    }
  }
  auto odd = infer(5, 4);
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->status, 400) << odd->body;
  EXPECT_EQ(client.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(infer(4, 4)->status, 200);
}

// Triton lets a config narrow a model's free dims: an image model exported with free height and
// width, configured with dims [1, 4, 6], loads (it was refused), reports those dims, serves 4x6
// images at any batch with the right values from code compiled for 4x6 (a static signature),
// and refuses another size with a clear error; the same model without dims still takes any size.
// A config dim that contradicts a static model dim is refused at load, naming both.
TEST(HttpConfigDimsTest, ConfigDimsFixAFreeImageSize) {
  namespace fs = std::filesystem;
  std::string repo = testing::MakeRepository("http_config_dims_repo");
  for (const char* name : {"fixed", "free"}) {
    fs::create_directories(fs::path(repo) / name / "1");
    std::ofstream(fs::path(repo) / name / "1" / "model.onnx", std::ios::binary)
        << testing::PoolUpsampleConcatModel();
  }
  std::ofstream(fs::path(repo) / "fixed" / "config.pbtxt")
      << "max_batch_size: 4\n"
         "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 1, 4, 6 ] } ]\n";
  std::ofstream(fs::path(repo) / "free" / "config.pbtxt") << "max_batch_size: 4\n";
  auto server = testing::StartServer(repo, ServerOptions());
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  auto config = client.Get("/v2/models/fixed/config");
  ASSERT_EQ(config->status, 200) << config->body;
  EXPECT_EQ(json::parse(config->body)["input"][0]["dims"], json::array({1, 4, 6})) << config->body;
  EXPECT_EQ(json::parse(client.Get("/v2/models/fixed")->body)["inputs"][0]["shape"],
            json::array({-1, 1, 4, 6}));
  auto infer = [&](const std::string& model, int64_t n, int64_t h, int64_t w) {
    json data = json::array();
    for (int64_t i = 0; i < n * h * w; ++i) data.push_back(static_cast<float>(i));
    json body = {
        {"inputs",
         {{{"name", "x"}, {"datatype", "FP32"}, {"shape", {n, 1, h, w}}, {"data", data}}}}};
    return client.Post("/v2/models/" + model + "/infer", body.dump(), "application/json");
  };
  for (int64_t n : {1, 3}) {
    auto res = infer("fixed", n, 4, 6);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    json out = json::parse(res->body)["outputs"][0];
    EXPECT_EQ(out["shape"], json::array({n, 2, 4, 6}));
    std::vector<float> y = out["data"].get<std::vector<float>>();
    ASSERT_EQ(y.size(), static_cast<size_t>(n * 48));
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t r = 0; r < 4; ++r) {
        for (int64_t c = 0; c < 6; ++c) {
          const float x = static_cast<float>(b * 24 + r * 6 + c);
          const float pooled = static_cast<float>(b * 24 + (r | 1) * 6 + (c | 1));
          EXPECT_EQ(y[b * 48 + r * 6 + c], x);
          EXPECT_EQ(y[b * 48 + 24 + r * 6 + c], pooled) << b << " " << r << "," << c;
        }
      }
    }
  }
  auto other = infer("fixed", 1, 8, 2);
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 400) << other->body;
  EXPECT_THAT(other->body, HasSubstr("[1,1,8,2]")) << other->body;
  EXPECT_EQ(infer("free", 1, 8, 2)->status, 200);
  EXPECT_EQ(infer("fixed", 2, 4, 6)->status, 200);

  // dims [3, 4, 6]: the model has one channel.
  json load = {{"parameters", {{"config", R"({"max_batch_size": 4, "input": [{"name": "x",
                  "data_type": "TYPE_FP32", "dims": [3, 4, 6]}]})"}}}};
  auto refused = client.Post("/v2/repository/models/fixed/load", load.dump(), "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400) << refused->body;
  EXPECT_THAT(refused->body, HasSubstr("dims [-1,3,4,6] do not match the model's shape "
                                       "[batch,1,height,width] at dim 1 (from the config's dims; "
                                       "max_batch_size > 0: dims leave out the batch dim 0)"));
  EXPECT_EQ(infer("fixed", 1, 4, 6)->status, 200);  // the loaded version still serves
}

// KServe's storage initializer copies a model to /mnt/models as model.onnx, with no config and
// no version folder, and the ServingRuntime passes --model-name: the server serves it under that
// name, its config completed from the model.
TEST(HttpKServeLayoutTest, ModelFileInTheRepositoryFolderIsServedByName) {
  namespace fs = std::filesystem;
  fs::path dir =
      fs::path(::testing::TempDir()) / ("cuvil_kserve_layout_" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(fs::path(testing::SharedModels()) / "mlp" / "model.onnx", dir / "model.onnx");
  ServerOptions options;
  options.model_name = "digits";
  auto server = testing::StartServer(dir.string(), options);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  EXPECT_EQ(client.Get("/v2/models/digits/ready")->status, 200);
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor expected = testing::ReadReference("mlp", 0, "output");
  json data = json::array();
  for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
  json body = {
      {"inputs",
       {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()}, {"data", data}}}}};
  auto res = client.Post("/v2/models/digits/infer", body.dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  auto got = json::parse(res->body)["outputs"][0]["data"].get<std::vector<float>>();
  testing::ExpectClose(got.data(), expected);
  auto index = client.Post("/v2/repository/index", "{}", "application/json");
  ASSERT_EQ(index->status, 200) << index->body;
  EXPECT_THAT(index->body, HasSubstr("\"digits\""));
  ServerOptions bad;
  bad.model_repositories = {dir.string()};
  bad.model_name = "../etc";
  bad.grpc_port = bad.http_port = bad.metrics_port = 0;
  auto refused = CuvilServer::Start(bad);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("--model-name \"../etc\""));
}

// Issue 38: HTTP request bodies, and the JSON they parse into, are counted in the server-wide
// in-flight budget gRPC uses (--max-inflight-bytes) before they are buffered: a request past it
// gets 503 with Retry-After at once (413 when it alone is larger than the budget), and a
// request's reservation ends with it, also when its client goes away mid-body.
TEST(HttpBudgetTest, BodiesAndParsedJsonAreCountedInTheInflightBudget) {
  ServerOptions options;
  // 1 MiB for requests; the other half is set aside for gRPC's receive buffers.
  options.max_inflight_bytes = 2 << 20;
  options.http_threads = 4;
  options.http_body_min_bytes_per_sec = 0;  // The held body below must not be cut.
  auto server = testing::StartServer(testing::MakeRepository("http_budget_repo"), options);
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  httplib::Client client("127.0.0.1", port);
  auto error_of = [](const httplib::Result& res) {
    return json::parse(res->body)["error"].get<std::string>();
  };
  // A body of spaces inside {}: admitted, it gets 400 for its missing 'inputs'.
  auto blank_body = [](size_t n) {
    std::string body(n, ' ');
    body.front() = '{';
    body.back() = '}';
    return body;
  };

  // One body larger than the whole budget: 413 before a byte of it is read.
  auto res = client.Post("/v2/models/mlp/infer", blank_body(1536 << 10), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_THAT(error_of(res), HasSubstr("an HTTP request body of 1572864 bytes is larger than the "
                                       "1048576 bytes all requests in flight may hold "
                                       "(--max-inflight-bytes 2097152 less 1048576 set aside for "
                                       "gRPC's receive buffers)"));
  // A PUT's body, which httplib would read before finding no route, is refused unread.
  {
    int fd = ConnectFrom(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendText(fd,
                         "PUT /v2/models/mlp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Length: 1572864\r\n\r\n"));
    std::string answer = ReadResponse(fd, std::chrono::seconds(30));
    EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 405")) << answer;
    EXPECT_THAT(answer, HasSubstr("method PUT is not allowed"));
    ::close(fd);
  }

  // A small body of many tiny values parses into far more: reserved before parsing.
  std::string zeros;
  for (int i = 0; i < 100000; ++i) zeros += i ? ",0" : "0";
  res = client.Post(
      "/v2/models/mlp/infer",
      R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],"data":[)" + zeros + "]}]}",
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413) << res->body;
  EXPECT_THAT(error_of(res), HasSubstr("an HTTP request's parsed JSON of"));

  // A client holds 700 KiB of the budget: it declared the body, sent 10 bytes and waits. Then
  // another 700 KiB body does not fit beside it. (Under load the holder's request may reach its
  // handler after the other one and be the refused one: then both start again.)
  bool refused = false;
  int holder = -1;
  for (int i = 0; i < 50 && !refused; ++i) {
    if (holder >= 0) ::close(holder);
    holder = ConnectFrom(port);
    ASSERT_GE(holder, 0);
    ASSERT_TRUE(
        SendText(holder,
                 "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 "Content-Type: application/json\r\nContent-Length: 716800\r\n\r\n{        "));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    res = client.Post("/v2/models/mlp/infer", blank_body(700 << 10), "application/json");
    ASSERT_TRUE(res);
    refused = res->status == 503;
  }
  ASSERT_TRUE(refused) << "never refused: " << res->status << " " << res->body;
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_THAT(error_of(res), HasSubstr("server is busy: an HTTP request body of 716800 bytes"));
  EXPECT_THAT(error_of(res), HasSubstr("--max-inflight-bytes"));
  // The refused body was drained: the same connection serves the next request.
  EXPECT_EQ(client.Get("/v2/models/mlp")->status, 200);
  // Chunked bodies are counted as their chunks arrive.
  const std::string chunked_body = blank_body(700 << 10);
  res = client.Post(
      "/v2/models/mlp/infer",
      [&chunked_body](size_t offset, httplib::DataSink& sink) {
        if (offset < chunked_body.size()) {
          sink.write(chunked_body.data() + offset,
                     std::min<size_t>(64 << 10, chunked_body.size() - offset));
        } else {
          sink.done();
        }
        return true;
      },
      "application/json");
  // The server answers and closes while the client may still be sending chunks; the client may
  // then see the reset instead of the answer. Either way the body is not taken.
  if (res) {
    EXPECT_EQ(res->status, 503) << res->body;
    EXPECT_THAT(error_of(res), HasSubstr("server is busy"));
  }

  // The holder goes away mid-body: its reservation ends with its request.
  ::close(holder);
  httplib::Client fresh("127.0.0.1", port);
  bool admitted = false;
  for (int i = 0; i < 200 && !admitted; ++i) {
    res = fresh.Post("/v2/models/mlp/infer", blank_body(700 << 10), "application/json");
    ASSERT_TRUE(res);
    admitted = res->status != 503;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(admitted) << "the disconnected client's bytes were never released";
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(error_of(res), HasSubstr("'inputs'"));

  // Ordinary JSON inference fits well within the budget.
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  json data = json::array();
  for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
  json body = {
      {"inputs",
       {{{"name", "input"}, {"datatype", "FP32"}, {"shape", input.shape()}, {"data", data}}}}};
  res = fresh.Post("/v2/models/mlp/infer", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  std::vector<float> got = json::parse(res->body)["outputs"][0]["data"].get<std::vector<float>>();
  testing::ExpectClose(got.data(), testing::ReadReference("mlp", 0, "output"));
}

// A large body refused for the budget is not read: the 503 goes out at once and the connection
// closes (draining 60 MiB bodies of a flood held every HTTP worker and stalled all other
// requests: mlp's p99 was 700x its idle p99).
TEST(HttpBudgetTest, ALargeRefusedBodyIsAnsweredUnreadAndTheConnectionCloses) {
  ServerOptions options;
  options.max_inflight_bytes = 32 << 20;  // 16 MiB for requests.
  options.http_threads = 4;
  options.http_body_min_bytes_per_sec = 0;  // Nothing here is cut for being slow.
  auto server = testing::StartServer(testing::MakeRepository("http_budget_close_repo"), options);
  ASSERT_NE(server, nullptr);
  const int port = server->http_port();
  // A client holds 10 MiB of the budget: it declared its body, sent 10 bytes and waits.
  auto open_holder = [&] {
    int fd = ConnectFrom(port);
    if (fd >= 0 &&
        !SendText(fd,
                  "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                  "Content-Type: application/json\r\nContent-Length: 10485760\r\n\r\n{        ")) {
      ::close(fd);
      fd = -1;
    }
    return fd;
  };
  int holder = open_holder();
  ASSERT_GE(holder, 0);
  // Another declares 8 MiB and sends none of it: answered without the server reading it. If
  // a probe's headers reach the server before the holder's, the probe holds the budget and the
  // holder is the one refused: then the holder is opened again and the probe repeated.
  std::string answer;
  const auto give_up = SteadyClock::now() + std::chrono::seconds(90);
  while (SteadyClock::now() < give_up) {
    int fd = ConnectFrom(port);
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(SendText(fd,
                         "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         "Content-Type: application/json\r\nContent-Length: 8388608\r\n\r\n"));
    answer = ReadResponse(fd, std::chrono::seconds(2));
    bool closed = false;
    for (int wait = 0; wait < 250 && !closed && !answer.empty(); ++wait) {
      closed = ServerClosed(fd);
      if (!closed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ::close(fd);
    if (answer.starts_with("HTTP/1.1 503")) {
      EXPECT_THAT(answer, HasSubstr("Connection: close"));
      EXPECT_THAT(answer, HasSubstr("Retry-After: 1"));
      EXPECT_TRUE(closed);
      break;
    }
    if (ServerClosed(holder)) {  // The holder was refused (or cut): it holds nothing now.
      ::close(holder);
      holder = open_holder();
      ASSERT_GE(holder, 0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // The holder not yet admitted.
  }
  EXPECT_THAT(answer, ::testing::StartsWith("HTTP/1.1 503")) << answer;
  ::close(holder);
  // The budget comes back: mlp answers over a fresh connection.
  httplib::Client client("127.0.0.1", port);
  auto res = client.Get("/v2/models/mlp");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
}

}  // namespace
}  // namespace cuvil
