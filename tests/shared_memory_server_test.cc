// End-to-end tests of Triton's system shared memory extension over gRPC and HTTP: regions a
// client creates with shm_open, registered with the server, then named by inference inputs and
// outputs, against an in-process server on ephemeral ports.
#include <fcntl.h>
#include <httplib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// A client's POSIX shared memory object of `size` bytes, mapped; unlinked at the end.
class ClientShm {
 public:
  explicit ClientShm(size_t size) : size_(size) {
    static std::atomic<int> counter{0};
    key_ = "/cuvil_shm_server_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    base_ = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(base_, MAP_FAILED);
  }
  ~ClientShm() {
    munmap(base_, size_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  // Only the server reads the object once it has shrunk; this side never touches the mapping.
  void Shrink(size_t size) { EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0); }
  uint8_t* at(size_t offset) { return base_ + offset; }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  size_t size_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
};

void SetUint(inference::InferParameter* p, uint64_t v) { p->set_uint64_param(v); }

// Points `params` at `size` bytes at `offset` of region `region`.
template <typename Map>
void ShmParams(Map* params, const std::string& region, uint64_t size, uint64_t offset) {
  (*params)["shared_memory_region"].set_string_param(region);
  SetUint(&(*params)["shared_memory_byte_size"], size);
  if (offset != 0) SetUint(&(*params)["shared_memory_offset"], offset);
}

class GrpcSharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override { Start("grpc_shm_repo", {}); }

  // (Re)starts the server on a fresh copy of the test repository and connects the stub.
  void Start(const std::string& repo, ServerOptions options) {
    server_ = testing::StartServer(testing::MakeRepository(repo), std::move(options));
    ASSERT_NE(server_, nullptr);
    stub_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server_->grpc_port()), grpc::InsecureChannelCredentials()));
  }

  grpc::Status Register(const std::string& name, const std::string& key, uint64_t offset,
                        uint64_t size) {
    inference::SystemSharedMemoryRegisterRequest q;
    q.set_name(name);
    q.set_key(key);
    q.set_offset(offset);
    q.set_byte_size(size);
    inference::SystemSharedMemoryRegisterResponse r;
    grpc::ClientContext ctx;
    return stub_->SystemSharedMemoryRegister(&ctx, q, &r);
  }

  grpc::Status Unregister(const std::string& name) {
    inference::SystemSharedMemoryUnregisterRequest q;
    q.set_name(name);
    inference::SystemSharedMemoryUnregisterResponse r;
    grpc::ClientContext ctx;
    return stub_->SystemSharedMemoryUnregister(&ctx, q, &r);
  }

  grpc::Status Status(const std::string& name, inference::SystemSharedMemoryStatusResponse* r) {
    inference::SystemSharedMemoryStatusRequest q;
    q.set_name(name);
    grpc::ClientContext ctx;
    return stub_->SystemSharedMemoryStatus(&ctx, q, r);
  }

  // Copies `input` to the start of `shm` and registers it as region "in", and the 4096 bytes
  // after it as region "out" (`shm` holds at least input + 4096 bytes).
  void RegisterInputAndOutput(const HostTensor& input, ClientShm* shm) {
    const size_t in_bytes = input.byte_size();
    std::memcpy(shm->at(0), input.data(), in_bytes);
    ASSERT_TRUE(Register("in", shm->key(), 0, in_bytes).ok());
    ASSERT_TRUE(Register("out", shm->key(), in_bytes, 4096).ok());
  }

  grpc::Status Infer(const inference::ModelInferRequest& q, inference::ModelInferResponse* r) {
    grpc::ClientContext ctx;
    return stub_->ModelInfer(&ctx, q, r);
  }

  // An mlp request whose input is `in_size` bytes at `in_offset` of region "in" and whose output
  // goes to region "out" at `out_offset`.
  inference::ModelInferRequest ShmRequest(const std::vector<int64_t>& shape, uint64_t in_size,
                                          uint64_t in_offset, uint64_t out_size,
                                          uint64_t out_offset) {
    inference::ModelInferRequest q;
    q.set_model_name("mlp");
    auto* in = q.add_inputs();
    in->set_name("input");
    in->set_datatype("FP32");
    for (int64_t d : shape) in->add_shape(d);
    ShmParams(in->mutable_parameters(), "in", in_size, in_offset);
    auto* out = q.add_outputs();
    out->set_name("output");
    ShmParams(out->mutable_parameters(), "out", out_size, out_offset);
    return q;
  }

  std::unique_ptr<CuvilServer> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
};

TEST_F(GrpcSharedMemoryTest, RegisterStatusUnregister) {
  ClientShm shm(4096);
  ASSERT_TRUE(Register("a", shm.key(), 64, 1024).ok());
  ASSERT_TRUE(Register("b", shm.key(), 0, 4096).ok());
  grpc::Status dup = Register("a", shm.key(), 0, 16);
  EXPECT_EQ(dup.error_code(), grpc::StatusCode::ALREADY_EXISTS);

  inference::SystemSharedMemoryStatusResponse all;
  ASSERT_TRUE(Status("", &all).ok());
  ASSERT_EQ(all.regions_size(), 2);
  const auto& a = all.regions().at("a");
  EXPECT_EQ(a.name(), "a");
  EXPECT_EQ(a.key(), shm.key());
  EXPECT_EQ(a.offset(), 64u);
  EXPECT_EQ(a.byte_size(), 1024u);
  inference::SystemSharedMemoryStatusResponse one;
  ASSERT_TRUE(Status("b", &one).ok());
  ASSERT_EQ(one.regions_size(), 1);
  EXPECT_EQ(one.regions().at("b").byte_size(), 4096u);
  inference::SystemSharedMemoryStatusResponse none;
  EXPECT_EQ(Status("zz", &none).error_code(), grpc::StatusCode::NOT_FOUND);

  ASSERT_TRUE(Unregister("a").ok());
  inference::SystemSharedMemoryStatusResponse after;
  ASSERT_TRUE(Status("", &after).ok());
  EXPECT_EQ(after.regions_size(), 1);
  ASSERT_TRUE(Unregister("").ok());
  inference::SystemSharedMemoryStatusResponse empty;
  ASSERT_TRUE(Status("", &empty).ok());
  EXPECT_EQ(empty.regions_size(), 0);

  // A key with no object, or a window past the object's end, is refused.
  grpc::Status missing = Register("c", "/cuvil_no_such_shm_object", 0, 16);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing.error_message(), HasSubstr("/cuvil_no_such_shm_object"));
  grpc::Status beyond = Register("c", shm.key(), 4000, 200);
  EXPECT_EQ(beyond.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(beyond.error_message(), HasSubstr("exceeds"));

  // CUDA shared memory does not exist on a CPU server.
  inference::CudaSharedMemoryStatusRequest cq;
  inference::CudaSharedMemoryStatusResponse cr;
  grpc::ClientContext ctx;
  EXPECT_EQ(stub_->CudaSharedMemoryStatus(&ctx, cq, &cr).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

TEST_F(GrpcSharedMemoryTest, InferWithShmInputAndOutputMatchesRawInfer) {
  HostTensor input = testing::ReadReference("mlp", 1, "input");
  HostTensor expected = testing::ReadReference("mlp", 1, "output");
  const size_t in_bytes = input.byte_size();
  const size_t out_bytes = expected.byte_size();
  ClientShm in_shm(in_bytes + 128);
  ClientShm out_shm(out_bytes + 256);
  std::memcpy(in_shm.at(128), input.data(), in_bytes);
  std::memset(out_shm.at(0), 0xAB, out_bytes + 256);
  ASSERT_TRUE(Register("in", in_shm.key(), 64, in_bytes + 64).ok());
  ASSERT_TRUE(Register("out", out_shm.key(), 0, out_bytes + 256).ok());

  inference::ModelInferResponse raw;
  ASSERT_TRUE(Infer(testing::RawInferRequest("mlp", input), &raw).ok());

  inference::ModelInferRequest q = ShmRequest(input.shape(), in_bytes, 64, out_bytes, 32);
  inference::ModelInferResponse r;
  grpc::Status s = Infer(q, &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(r.outputs_size(), 1);
  EXPECT_EQ(r.raw_output_contents_size(), 0);  // The data went to shared memory.
  EXPECT_EQ(r.outputs(0).parameters().at("shared_memory_region").string_param(), "out");
  EXPECT_EQ(r.outputs(0).parameters().at("shared_memory_byte_size").uint64_param(), out_bytes);
  EXPECT_EQ(r.outputs(0).shape(0), input.shape()[0]);
  EXPECT_EQ(std::memcmp(out_shm.at(32), raw.raw_output_contents(0).data(), out_bytes), 0);
  testing::ExpectClose(out_shm.at(32), expected);
  EXPECT_EQ(*out_shm.at(31), 0xAB);  // Nothing outside the given window changes.
  EXPECT_EQ(*out_shm.at(32 + out_bytes), 0xAB);

  // A shm input with a raw-data output.
  inference::ModelInferRequest mixed = ShmRequest(input.shape(), in_bytes, 64, 0, 0);
  mixed.clear_outputs();
  inference::ModelInferResponse mr;
  ASSERT_TRUE(Infer(mixed, &mr).ok());
  ASSERT_EQ(mr.raw_output_contents_size(), 1);
  EXPECT_EQ(mr.raw_output_contents(0), raw.raw_output_contents(0));
}

TEST_F(GrpcSharedMemoryTest, OutOfBoundsUnknownAndWrongSizesAreInvalidArgument) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  const size_t in_bytes = input.byte_size();
  ClientShm shm(in_bytes + 4096);
  ASSERT_NO_FATAL_FAILURE(RegisterInputAndOutput(input, &shm));
  auto expect_error = [&](const inference::ModelInferRequest& q, const std::string& what) {
    inference::ModelInferResponse r;
    grpc::Status s = Infer(q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what;
    return s.error_message();
  };
  // Input window past the region's end, and an offset that would overflow.
  EXPECT_THAT(expect_error(ShmRequest(input.shape(), in_bytes, 4, 40, 0), "past end"),
              HasSubstr("outside region 'in'"));
  EXPECT_THAT(expect_error(ShmRequest(input.shape(), in_bytes, UINT64_MAX - 8, 40, 0), "overflow"),
              HasSubstr("input"));
  // Byte size differing from the tensor's.
  EXPECT_THAT(expect_error(ShmRequest(input.shape(), in_bytes - 4, 0, 40, 0), "size"),
              HasSubstr("input"));
  // Output window past its region.
  EXPECT_THAT(expect_error(ShmRequest(input.shape(), in_bytes, 0, 40, 4090), "out past end"),
              HasSubstr("outside region 'out'"));
  // An output window too small for the result.
  EXPECT_THAT(expect_error(ShmRequest(input.shape(), in_bytes, 0, 8, 0), "out too small"),
              HasSubstr("too small"));
  // Unknown region.
  inference::ModelInferRequest unknown = ShmRequest(input.shape(), in_bytes, 0, 40, 0);
  (*unknown.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
      "nope");
  std::string message = expect_error(unknown, "unknown");
  EXPECT_THAT(message, HasSubstr("unknown shared memory region 'nope'"));
  EXPECT_THAT(message, HasSubstr("input"));
  // A region without a byte size.
  inference::ModelInferRequest no_size = ShmRequest(input.shape(), in_bytes, 0, 40, 0);
  no_size.mutable_inputs(0)->mutable_parameters()->erase("shared_memory_byte_size");
  EXPECT_THAT(expect_error(no_size, "no size"), HasSubstr("shared_memory_byte_size"));
}

TEST_F(GrpcSharedMemoryTest, ShmInputsCountAgainstMaxRequestBytes) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  const size_t in_bytes = input.byte_size();
  ServerOptions options;
  options.max_request_bytes = static_cast<int64_t>(in_bytes) - 1;
  ASSERT_NO_FATAL_FAILURE(Start("grpc_shm_small_limit", options));
  ClientShm shm(in_bytes + 4096);
  ASSERT_NO_FATAL_FAILURE(RegisterInputAndOutput(input, &shm));
  inference::ModelInferResponse r;
  grpc::Status s = Infer(ShmRequest(input.shape(), in_bytes, 0, 40, 0), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("max_request_bytes"));
}

TEST_F(GrpcSharedMemoryTest, ShrunkRegionIsAnErrorNotACrash) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  const size_t in_bytes = input.byte_size();
  ClientShm shm(in_bytes + 4096);
  ASSERT_NO_FATAL_FAILURE(RegisterInputAndOutput(input, &shm));
  shm.Shrink(16);
  inference::ModelInferResponse r;
  grpc::Status s = Infer(ShmRequest(input.shape(), in_bytes, 0, 40, 0), &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("truncated"));
  // The server is still serving.
  inference::ModelInferResponse raw;
  EXPECT_TRUE(Infer(testing::RawInferRequest("mlp", input), &raw).ok());
}

TEST_F(GrpcSharedMemoryTest, UnregisterWhileRequestsAreInFlight) {
  HostTensor input = testing::ReadReference("mlp", 2, "input");
  HostTensor expected = testing::ReadReference("mlp", 2, "output");
  const size_t in_bytes = input.byte_size();
  const size_t out_bytes = expected.byte_size();
  ClientShm in_shm(in_bytes);
  ClientShm out_shm(out_bytes);
  std::memcpy(in_shm.at(0), input.data(), in_bytes);
  ASSERT_TRUE(Register("in", in_shm.key(), 0, in_bytes).ok());
  ASSERT_TRUE(Register("out", out_shm.key(), 0, out_bytes).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, refused{0}, other{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        inference::ModelInferResponse r;
        grpc::Status s = Infer(ShmRequest(input.shape(), in_bytes, 0, out_bytes, 0), &r);
        if (s.ok()) {
          ok.fetch_add(1);
        } else if (s.error_message().find("unknown shared memory region") != std::string::npos) {
          refused.fetch_add(1);
        } else {
          other.fetch_add(1);
        }
      }
    });
  }
  for (int i = 0; i < 100; ++i) {
    const bool input = i % 2 == 1;
    ASSERT_TRUE(Unregister(input ? "in" : "out").ok());
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ASSERT_TRUE((input ? Register("in", in_shm.key(), 0, in_bytes)
                       : Register("out", out_shm.key(), 0, out_bytes))
                    .ok());
    std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  stop.store(true);
  for (auto& t : clients) t.join();
  EXPECT_GT(ok.load(), 0);
  EXPECT_EQ(other.load(), 0);
  // Every successful request wrote the same result: the last one is in the region.
  testing::ExpectClose(out_shm.at(0), expected);
}

class HttpSharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = testing::StartServer(testing::MakeRepository("http_shm_repo"));
    ASSERT_NE(server_, nullptr);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->http_port());
  }

  httplib::Result Register(const std::string& name, const std::string& key, uint64_t offset,
                           uint64_t size) {
    json body = {{"key", key}, {"offset", offset}, {"byte_size", size}};
    return client_->Post("/v2/systemsharedmemory/region/" + name + "/register", body.dump(),
                         "application/json");
  }

  json ShmInferBody(const HostTensor& input, uint64_t in_size, uint64_t in_offset,
                    uint64_t out_size) {
    return {{"inputs",
             {{{"name", "input"},
               {"datatype", "FP32"},
               {"shape", input.shape()},
               {"parameters",
                {{"shared_memory_region", "in"},
                 {"shared_memory_byte_size", in_size},
                 {"shared_memory_offset", in_offset}}}}}},
            {"outputs",
             {{{"name", "output"},
               {"parameters",
                {{"shared_memory_region", "out"}, {"shared_memory_byte_size", out_size}}}}}}};
  }

  std::unique_ptr<CuvilServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

TEST_F(HttpSharedMemoryTest, RegisterStatusUnregister) {
  ClientShm shm(2048);
  auto reg = Register("a", shm.key(), 8, 1000);
  ASSERT_EQ(reg->status, 200) << reg->body;
  ASSERT_EQ(Register("b", shm.key(), 0, 2048)->status, 200);
  auto dup = Register("a", shm.key(), 0, 8);
  EXPECT_EQ(dup->status, 400);
  EXPECT_THAT(json::parse(dup->body)["error"].get<std::string>(), HasSubstr("already"));

  auto all = client_->Get("/v2/systemsharedmemory/status");
  ASSERT_EQ(all->status, 200);
  json list = json::parse(all->body);
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0], json({{"name", "a"}, {"key", shm.key()}, {"offset", 8}, {"byte_size", 1000}}));
  auto one = client_->Get("/v2/systemsharedmemory/region/b/status");
  ASSERT_EQ(one->status, 200);
  EXPECT_EQ(json::parse(one->body)[0]["byte_size"], 2048);
  auto none = client_->Get("/v2/systemsharedmemory/region/zz/status");
  EXPECT_EQ(none->status, 404);
  EXPECT_THAT(json::parse(none->body)["error"].get<std::string>(), HasSubstr("'zz'"));

  ASSERT_EQ(
      client_->Post("/v2/systemsharedmemory/region/a/unregister", "", "application/json")->status,
      200);
  EXPECT_EQ(json::parse(client_->Get("/v2/systemsharedmemory/status")->body).size(), 1u);
  ASSERT_EQ(client_->Post("/v2/systemsharedmemory/unregister", "", "application/json")->status,
            200);
  EXPECT_EQ(json::parse(client_->Get("/v2/systemsharedmemory/status")->body), json::array());

  auto missing = Register("c", "/cuvil_no_such_shm_object", 0, 8);
  EXPECT_EQ(missing->status, 400);
  EXPECT_THAT(json::parse(missing->body)["error"].get<std::string>(),
              HasSubstr("/cuvil_no_such_shm_object"));
  EXPECT_EQ(Register("c", shm.key(), 2000, 100)->status, 400);
  auto no_size = client_->Post("/v2/systemsharedmemory/region/c/register",
                               json{{"key", shm.key()}}.dump(), "application/json");
  EXPECT_EQ(no_size->status, 400);
  EXPECT_EQ(client_->Get("/v2/cudasharedmemory/status")->status, 501);
}

TEST_F(HttpSharedMemoryTest, InferWithShmInputAndOutputMatchesJsonInfer) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor expected = testing::ReadReference("mlp", 0, "output");
  const size_t in_bytes = input.byte_size();
  const size_t out_bytes = expected.byte_size();
  ClientShm in_shm(in_bytes + 16);
  ClientShm out_shm(out_bytes);
  std::memcpy(in_shm.at(16), input.data(), in_bytes);
  ASSERT_EQ(Register("in", in_shm.key(), 0, in_bytes + 16)->status, 200);
  ASSERT_EQ(Register("out", out_shm.key(), 0, out_bytes)->status, 200);

  auto res = client_->Post("/v2/models/mlp/infer",
                           ShmInferBody(input, in_bytes, 16, out_bytes).dump(), "application/json");
  ASSERT_EQ(res->status, 200) << res->body;
  json r = json::parse(res->body);
  const json& out = r["outputs"][0];
  EXPECT_EQ(out["name"], "output");
  EXPECT_FALSE(out.contains("data"));
  EXPECT_EQ(out["parameters"]["shared_memory_region"], "out");
  EXPECT_EQ(out["parameters"]["shared_memory_byte_size"], out_bytes);
  testing::ExpectClose(out_shm.at(0), expected);

  // The same values as a plain JSON request.
  json plain = ShmInferBody(input, in_bytes, 16, out_bytes);
  json data = json::array();
  for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
  plain["inputs"][0].erase("parameters");
  plain["inputs"][0]["data"] = data;
  plain.erase("outputs");
  auto pres = client_->Post("/v2/models/mlp/infer", plain.dump(), "application/json");
  ASSERT_EQ(pres->status, 200);
  std::vector<float> got = json::parse(pres->body)["outputs"][0]["data"].get<std::vector<float>>();
  ASSERT_EQ(got.size() * sizeof(float), out_bytes);
  testing::ExpectClose(got.data(), expected);
}

TEST_F(HttpSharedMemoryTest, ErrorsNameTheTensorAndRegion) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  const size_t in_bytes = input.byte_size();
  ClientShm shm(in_bytes + 64);
  std::memcpy(shm.at(0), input.data(), in_bytes);
  ASSERT_EQ(Register("in", shm.key(), 0, in_bytes)->status, 200);
  ASSERT_EQ(Register("out", shm.key(), in_bytes, 64)->status, 200);
  auto error = [&](const json& body) {
    auto res = client_->Post("/v2/models/mlp/infer", body.dump(), "application/json");
    EXPECT_EQ(res->status, 400) << res->body;
    return json::parse(res->body)["error"].get<std::string>();
  };
  EXPECT_THAT(error(ShmInferBody(input, in_bytes, 4, 40)), HasSubstr("outside region 'in'"));
  json unknown = ShmInferBody(input, in_bytes, 0, 40);
  unknown["outputs"][0]["parameters"]["shared_memory_region"] = "gone";
  EXPECT_THAT(error(unknown), HasSubstr("unknown shared memory region 'gone'"));
  json classified = ShmInferBody(input, in_bytes, 0, 40);
  classified["outputs"][0]["parameters"]["classification"] = 3;
  EXPECT_THAT(error(classified), HasSubstr("'classification' cannot be combined"));
  json negative = ShmInferBody(input, in_bytes, 0, 40);
  negative["inputs"][0]["parameters"]["shared_memory_offset"] = -1;
  EXPECT_THAT(error(negative), HasSubstr("shared_memory_offset"));
  shm.Shrink(8);
  EXPECT_THAT(error(ShmInferBody(input, in_bytes, 0, 40)), HasSubstr("truncated"));
  EXPECT_EQ(client_->Get("/v2/health/live")->status, 200);
}

// Issue 38 (b): a web page (foreign Host or Origin, a "simple" Content-Type) must not register,
// list or use shared memory: those routes get the admin routes' browser defences, and so does an
// inference that names a region.
TEST_F(HttpSharedMemoryTest, BrowsersCannotRegisterListOrUseRegions) {
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor expected = testing::ReadReference("mlp", 0, "output");
  const size_t in_bytes = input.byte_size();
  const size_t out_bytes = expected.byte_size();
  ClientShm victim(in_bytes + out_bytes);
  std::memcpy(victim.at(0), input.data(), in_bytes);
  const std::string body =
      json{{"key", victim.key()}, {"offset", 0}, {"byte_size", in_bytes + out_bytes}}.dump();
  const std::string self = "127.0.0.1:" + std::to_string(server_->http_port());
  auto error = [](const httplib::Result& res) {
    return res ? json::parse(res->body).value("error", std::string()) : std::string("no answer");
  };

  // The finding's request: foreign Host and Origin, text/plain.
  httplib::Headers evil = {{"Host", "evil.example"}, {"Origin", "http://evil.example"}};
  auto reg = client_->Post("/v2/systemsharedmemory/region/v/register", evil, body, "text/plain");
  ASSERT_TRUE(reg);
  EXPECT_EQ(reg->status, 403) << reg->body;
  EXPECT_THAT(error(reg), HasSubstr("not a loopback name"));
  // A foreign page on a loopback Host (DNS rebinding aside): the Origin check.
  httplib::Headers foreign = {{"Host", self}, {"Origin", "http://evil.example"}};
  reg =
      client_->Post("/v2/systemsharedmemory/region/v/register", foreign, body, "application/json");
  EXPECT_EQ(reg->status, 403) << reg->body;
  EXPECT_THAT(error(reg), HasSubstr("cross-origin"));
  // A same-origin "simple" request (no preflight): the Content-Type check.
  httplib::Headers same = {{"Origin", "http://" + self}};
  reg = client_->Post("/v2/systemsharedmemory/region/v/register", same, body, "text/plain");
  EXPECT_EQ(reg->status, 415) << reg->body;
  auto status = client_->Get("/v2/systemsharedmemory/status", foreign);
  EXPECT_EQ(status->status, 403) << status->body;
  EXPECT_EQ(
      client_->Post("/v2/systemsharedmemory/unregister", foreign, "", "application/json")->status,
      403);
  EXPECT_EQ(json::parse(client_->Get("/v2/systemsharedmemory/status")->body), json::array());

  // Registered by a real client, a region still cannot be read or written from a foreign page.
  ASSERT_EQ(Register("in", victim.key(), 0, in_bytes)->status, 200);
  ASSERT_EQ(Register("out", victim.key(), in_bytes, out_bytes)->status, 200);
  const std::string infer = ShmInferBody(input, in_bytes, 0, out_bytes).dump();
  auto res = client_->Post("/v2/models/mlp/infer", foreign, infer, "application/json");
  EXPECT_EQ(res->status, 403) << res->body;
  EXPECT_THAT(error(res), HasSubstr("cross-origin"));
  res = client_->Post("/v2/models/mlp/infer", evil, infer, "text/plain");
  EXPECT_EQ(res->status, 403) << res->body;
  for (size_t i = 0; i < out_bytes; ++i) ASSERT_EQ(victim.at(in_bytes)[i], 0) << "byte " << i;
  // Same origin (or no browser at all) is served.
  res = client_->Post("/v2/models/mlp/infer", same, infer, "application/octet-stream");
  ASSERT_EQ(res->status, 200) << res->body;
  testing::ExpectClose(victim.at(in_bytes), expected);
  // Inference without shared memory keeps answering any origin.
  json plain = ShmInferBody(input, in_bytes, 0, out_bytes);
  json data = json::array();
  for (int64_t i = 0; i < input.num_elements(); ++i) data.push_back(input.data_as<float>()[i]);
  plain["inputs"][0].erase("parameters");
  plain["inputs"][0]["data"] = data;
  plain.erase("outputs");
  EXPECT_EQ(client_->Post("/v2/models/mlp/infer", foreign, plain.dump(), "text/plain")->status,
            200);
}

// With an admin token, the shared-memory routes (status included: it lists every region's key)
// need it, as admin routes do.
TEST(HttpSharedMemoryTokenTest, SharedMemoryRoutesNeedTheAdminToken) {
  ServerOptions options;
  options.admin_token = "tok";
  auto server = testing::StartServer(testing::MakeRepository("http_shm_token_repo"), options);
  ASSERT_NE(server, nullptr);
  httplib::Client client("127.0.0.1", server->http_port());
  ClientShm shm(64);
  const std::string body = json{{"key", shm.key()}, {"byte_size", 64}}.dump();
  auto status = client.Get("/v2/systemsharedmemory/status");
  EXPECT_EQ(status->status, 401) << status->body;
  EXPECT_EQ(
      client.Post("/v2/systemsharedmemory/region/r/register", body, "application/json")->status,
      401);
  EXPECT_EQ(client.Post("/v2/systemsharedmemory/unregister", "", "application/json")->status, 401);
  httplib::Headers auth = {{"Authorization", "Bearer tok"}};
  EXPECT_EQ(client.Post("/v2/systemsharedmemory/region/r/register", auth, body, "application/json")
                ->status,
            200);
  status = client.Get("/v2/systemsharedmemory/status", auth);
  ASSERT_EQ(status->status, 200);
  EXPECT_EQ(json::parse(status->body).size(), 1u);
  // Health, metadata and inference stay open.
  EXPECT_EQ(client.Get("/v2/health/ready")->status, 200);
  EXPECT_EQ(client.Get("/v2/models/mlp")->status, 200);
}

}  // namespace
}  // namespace cuvil
