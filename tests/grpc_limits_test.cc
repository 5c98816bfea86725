// Issue 38: no unauthenticated gRPC request may exhaust the server's memory. Starts a real
// cuvil-server process (its own, so its memory is measured apart from the client's), floods it
// with concurrent ~60 MiB ModelInfer messages built to amplify — 1-byte raw_input_contents
// entries to mlp, empty `inputs` to a model that does not exist — and checks every call gets a
// clear error, the server's peak resident memory stays bounded, and mlp still answers.
//
// The same flood at scale (a measurement, not a CI test; it takes minutes):
//   CUVIL_GRPC_FLOOD_CALLS=512 CUVIL_GRPC_FLOOD_INFLIGHT_BYTES=1073741824 \
//     build/bin/grpc_limits_test --gtest_filter='*Flood*'
// prints the server's peak RSS against --max-inflight-bytes. CUVIL_SERVER_BIN overrides the
// server binary (e.g. an older build, to measure it before a fix).
#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cuvil/runtime/sanitizers.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr size_t kMessageBytes = size_t{60} << 20;
constexpr int64_t kMaxRequestBytes = int64_t{64} << 20 | 4096;  // Above the 60 MiB messages.

std::string ServerBinary() {
  const char* bin = std::getenv("CUVIL_SERVER_BIN");
  return bin != nullptr ? bin : CUVIL_SERVER_BINARY;
}

// A kB field of /proc/PID/status ("VmRSS", "VmHWM"), in bytes; 0 when unreadable.
size_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

// A cuvil-server child process serving mlp on free ports. `prepare`, when given, may add models
// to the repository (then named by --load-model in `extra_args`) before the server starts.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra_args,
                         const std::function<void(const std::string& repo)>& prepare = nullptr) {
    repo_ = testing::MakeRepository("grpc_limits");
    if (prepare) prepare(repo_);
    std::vector<std::string> args = {ServerBinary(),
                                     "--model-repository",
                                     repo_,
                                     "--model-control-mode",
                                     "explicit",
                                     "--load-model",
                                     "mlp",
                                     "--grpc-port",
                                     "0",
                                     "--http-port",
                                     "0",
                                     "--metrics-port",
                                     "0",
                                     "--no-jit-cache",
                                     "--max-request-bytes",
                                     std::to_string(kMaxRequestBytes)};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    int out[2];
    if (pipe(out) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      close(out[0]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    log_ = fdopen(out[0], "r");
    // The listening line gives the ports; "server ready" comes once mlp is loaded.
    const std::regex listening(R"(listening grpc=(\S+) http=(\S+))");
    char line[4096];
    while (fgets(line, sizeof(line), log_) != nullptr) {
      std::cmatch m;
      if (std::regex_search(line, m, listening)) {
        address_ = m[1].str();
        http_address_ = m[2].str();
      }
      if (std::strstr(line, "server ready") != nullptr) break;
    }
    // Keep draining the log so the server never blocks writing it.
    drain_ = std::thread([f = log_] {
      char buf[4096];
      while (fgets(buf, sizeof(buf), f) != nullptr) {
      }
    });
  }

  ~ServerProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
    if (drain_.joinable()) drain_.join();
    if (log_ != nullptr) fclose(log_);
  }

  pid_t pid() const { return pid_; }
  const std::string& address() const { return address_; }
  // host:port of the HTTP front end.
  const std::string& http_address() const { return http_address_; }

 private:
  std::string repo_;
  pid_t pid_ = -1;
  FILE* log_ = nullptr;
  std::thread drain_;
  std::string address_;
  std::string http_address_;
};

// A channel to `address`; `own_connection`: on a TCP connection of its own, not one shared with
// other channels to the same address.
std::shared_ptr<grpc::Channel> Channel(const std::string& address, bool own_connection = false) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(INT_MAX);
  args.SetMaxReceiveMessageSize(INT_MAX);
  if (own_connection) args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

// ~`message_bytes` (60 MiB): mlp's one declared input, then 1-byte raw_input_contents entries (3
// wire bytes each).
grpc::Slice OneByteRawEntriesToMlp(size_t message_bytes = kMessageBytes) {
  inference::ModelInferRequest q;
  q.set_model_name("mlp");
  auto* in = q.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  in->add_shape(1);
  in->add_shape(784);
  std::string bytes = q.SerializeAsString();
  bytes.reserve(message_bytes);
  while (bytes.size() + 3 <= message_bytes) bytes.append("\x3a\x01\x00", 3);
  return grpc::Slice(bytes);
}

// ~`message_bytes` (60 MiB): a model that does not exist, then empty `inputs` entries (2 wire
// bytes each).
grpc::Slice EmptyInputsToUnknownModel(size_t message_bytes = kMessageBytes) {
  std::string bytes("\x0a\x0bno_such_mod", 13);
  bytes.reserve(message_bytes);
  while (bytes.size() + 2 <= message_bytes) bytes.append("\x2a\x00", 2);
  return grpc::Slice(bytes);
}

struct FloodResult {
  std::vector<grpc::Status> statuses;  // Calls alternate: mlp first, then the unknown model.
  std::chrono::milliseconds took{0};
};

// Sends `calls` ModelInfer calls at once, alternating the two messages (of `message_bytes`), and
// waits for them all; round-robin over `stubs` (each on a connection of its own) when given.
FloodResult Flood(grpc::GenericStub& stub, int calls, size_t message_bytes = kMessageBytes,
                  const std::vector<std::unique_ptr<grpc::GenericStub>>* stubs = nullptr) {
  const grpc::Slice slices[2] = {OneByteRawEntriesToMlp(message_bytes),
                                 EmptyInputsToUnknownModel(message_bytes)};
  FloodResult result;
  result.statuses.resize(static_cast<size_t>(calls));
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<grpc::ByteBuffer> requests(static_cast<size_t>(calls));
  std::vector<grpc::ByteBuffer> responses(static_cast<size_t>(calls));
  std::mutex mu;
  std::condition_variable cv;
  int left = calls;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) {
    auto ctx = std::make_unique<grpc::ClientContext>();
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    grpc::Slice slice = slices[i % 2];  // A reference, not a copy: every call shares the bytes.
    requests[static_cast<size_t>(i)] = grpc::ByteBuffer(&slice, 1);
    grpc::GenericStub& via = stubs != nullptr && !stubs->empty()
                                 ? *(*stubs)[static_cast<size_t>(i) % stubs->size()]
                                 : stub;
    via.UnaryCall(ctx.get(), "/inference.GRPCInferenceService/ModelInfer", grpc::StubOptions(),
                  &requests[static_cast<size_t>(i)], &responses[static_cast<size_t>(i)],
                  [&, i](grpc::Status s) {
                    std::lock_guard<std::mutex> l(mu);
                    result.statuses[static_cast<size_t>(i)] = std::move(s);
                    if (--left == 0) cv.notify_all();
                  });
    contexts.push_back(std::move(ctx));
  }
  std::unique_lock<std::mutex> l(mu);
  cv.wait(l, [&] { return left == 0; });
  result.took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  return result;
}

void ExpectMlpStillAnswers(const std::string& address) {
  auto stub = inference::GRPCInferenceService::NewStub(Channel(address));
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  inference::ModelInferResponse r;
  grpc::Status s = stub->ModelInfer(&ctx, testing::RawInferRequest("mlp", input), &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(r.raw_output_contents_size(), 1);
  testing::ExpectClose(r.raw_output_contents(0).data(), testing::ReadReference("mlp", 0, "output"));
}

TEST(GrpcLimitsTest, ConcurrentAmplifyingMessagesAreRefusedWithinAMemoryBound) {
  // At least 10 times --max-request-bytes, so gRPC takes the 60 MiB messages (InflightBudgetSplit:
  // a fifth of the budget is gRPC's resource quota, and messages above half of it are refused).
  ServerProcess server({"--max-inflight-bytes", std::to_string(size_t{650} << 20)});
  ASSERT_GT(server.pid(), 0);
  ASSERT_FALSE(server.address().empty()) << "the server did not start";
  const size_t rss_before = StatusBytes(server.pid(), "VmRSS");
  ASSERT_GT(rss_before, 0u);
  auto channel = Channel(server.address());
  grpc::GenericStub stub(channel);
  FloodResult flood = Flood(stub, 16);
  const size_t peak = StatusBytes(server.pid(), "VmHWM");
  std::printf(
      "server RSS before %zu MB, peak during 16 calls of 60 MiB %zu MB (+%zu MB), %lld ms\n",
      rss_before >> 20, peak >> 20, (peak - rss_before) >> 20,
      static_cast<long long>(flood.took.count()));
  for (size_t i = 0; i < flood.statuses.size(); ++i) {
    const grpc::Status& s = flood.statuses[i];
    ASSERT_FALSE(s.ok()) << "call " << i;
    // Refused for what it holds, or for the budget while others are in flight: by the call
    // (its message names the flag) or, while gRPC itself still reads it, by the transport's
    // resource quota (it resets the stream with ENHANCE_YOUR_CALM).
    if (s.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      EXPECT_THAT(s.error_message(), AnyOf(HasSubstr("--max-inflight-bytes"),
                                           HasSubstr("RST_STREAM with error code 11")))
          << i;
    } else if (i % 2 == 0) {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << i << s.error_message();
      EXPECT_THAT(s.error_message(), HasSubstr("raw_input_contents entries")) << i;
    } else {
      EXPECT_THAT(s.error_code(),
                  AnyOf(grpc::StatusCode::INVALID_ARGUMENT, grpc::StatusCode::NOT_FOUND))
          << i;
      EXPECT_THAT(s.error_message(), AnyOf(HasSubstr("inputs"), HasSubstr("no_such_mod"))) << i;
    }
  }
  // Before the fix: 1.7 GB per mlp call and 6.8 GB per unknown-model call. AddressSanitizer's
  // quarantine and redzones keep freed request buffers resident a while longer.
#if defined(CUVIL_ASAN)
  constexpr size_t kBound = size_t{1} << 30;
#else
  constexpr size_t kBound = size_t{400} << 20;
#endif
  EXPECT_LT(peak - rss_before, kBound);
  ExpectMlpStillAnswers(server.address());
}

// A ModelStreamInfer stream driven with raw messages (one operation at a time), so a test can
// send ~60 MiB amplifying messages without building them as protobuf objects in the client.
class RawInferStream {
 public:
  RawInferStream(grpc::GenericStub& stub, const std::string& method) {
    ctx_.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    rw_ = stub.PrepareCall(&ctx_, method, &cq_);
    rw_->StartCall(Tag(1));
    started_ = Await(1);
  }
  ~RawInferStream() {
    cq_.Shutdown();
    void* tag;
    bool ok;
    while (cq_.Next(&tag, &ok)) {
    }
  }
  bool started() const { return started_; }
  bool Write(const grpc::Slice& message) {
    grpc::ByteBuffer buffer(&message, 1);
    rw_->Write(buffer, Tag(2));
    return Await(2);
  }
  bool Read(inference::ModelStreamInferResponse* response) {
    grpc::ByteBuffer buffer;
    rw_->Read(&buffer, Tag(3));
    if (!Await(3)) return false;
    return grpc::SerializationTraits<inference::ModelStreamInferResponse>::Deserialize(&buffer,
                                                                                       response)
        .ok();
  }
  grpc::Status Finish() {
    rw_->WritesDone(Tag(4));
    Await(4);
    grpc::Status status;
    rw_->Finish(&status, Tag(5));
    Await(5);
    return status;
  }

 private:
  static void* Tag(intptr_t n) { return reinterpret_cast<void*>(n); }
  bool Await(intptr_t n) {
    void* tag = nullptr;
    bool ok = false;
    return cq_.Next(&tag, &ok) && ok && tag == Tag(n);
  }
  grpc::CompletionQueue cq_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> rw_;
  bool started_ = false;
};

// Issue 38: a ModelStreamInfer message gets ModelInfer's checks — counted and checked against
// the model it names before protobuf or anything proportional to it sees the message — instead
// of being parsed whole (1.7 GB for 60 MiB of 1-byte raw entries, 6.8 GB for 60 MiB of empty
// inputs). Each refused message is answered on the stream, which goes on serving.
TEST(GrpcLimitsTest, StreamMessagesAreCheckedBeforeTheyAreParsed) {
  // gRPC's resource quota (a fifth of the budget) must take a whole 60 MiB message with room to
  // spare: near it, the transport resets the stream (RST_STREAM 11) before any handler sees it.
  ServerProcess server({"--max-inflight-bytes", std::to_string(size_t{1} << 30)});
  ASSERT_FALSE(server.address().empty()) << "the server did not start";
  const size_t rss_before = StatusBytes(server.pid(), "VmRSS");
  ASSERT_GT(rss_before, 0u);
  auto channel = Channel(server.address());
  grpc::GenericStub stub(channel);
  RawInferStream stream(stub, "/inference.GRPCInferenceService/ModelStreamInfer");
  ASSERT_TRUE(stream.started());

  inference::ModelStreamInferResponse r;
  ASSERT_TRUE(stream.Write(OneByteRawEntriesToMlp()));
  ASSERT_TRUE(stream.Read(&r));
  EXPECT_THAT(r.error_message(), HasSubstr("raw_input_contents entries"));

  ASSERT_TRUE(stream.Write(EmptyInputsToUnknownModel()));
  ASSERT_TRUE(stream.Read(&r));
  EXPECT_THAT(r.error_message(), HasSubstr("more than 4096 inputs"));

  // Within the hard caps, an unknown model is refused before the header is parsed.
  std::string unknown("\x0a\x0bno_such_mod", 13);
  for (int i = 0; i < 4000; ++i) unknown.append("\x2a\x00", 2);
  ASSERT_TRUE(stream.Write(grpc::Slice(unknown)));
  ASSERT_TRUE(stream.Read(&r));
  EXPECT_THAT(r.error_message(), HasSubstr("no_such_mod"));
  EXPECT_EQ(r.infer_response().model_name(), "no_such_mod");

  // The same stream still serves a good request.
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  ASSERT_TRUE(
      stream.Write(grpc::Slice(testing::RawInferRequest("mlp", input).SerializeAsString())));
  ASSERT_TRUE(stream.Read(&r));
  EXPECT_EQ(r.error_message(), "");
  ASSERT_EQ(r.infer_response().raw_output_contents_size(), 1);
  testing::ExpectClose(r.infer_response().raw_output_contents(0).data(),
                       testing::ReadReference("mlp", 0, "output"));
  EXPECT_TRUE(stream.Finish().ok());

  const size_t peak = StatusBytes(server.pid(), "VmHWM");
  std::printf("server RSS before %zu MB, peak over the stream %zu MB (+%zu MB)\n", rss_before >> 20,
              peak >> 20, (peak - rss_before) >> 20);
#if defined(CUVIL_ASAN)
  constexpr size_t kBound = size_t{1} << 30;
#else
  constexpr size_t kBound = size_t{400} << 20;
#endif
  EXPECT_LT(peak - rss_before, kBound);
  ExpectMlpStillAnswers(server.address());
}

// The measurement above at scale; skipped unless CUVIL_GRPC_FLOOD_CALLS is set (see the top).
TEST(GrpcLimitsTest, FloodReport) {
  const char* calls_env = std::getenv("CUVIL_GRPC_FLOOD_CALLS");
  if (calls_env == nullptr) GTEST_SKIP() << "set CUVIL_GRPC_FLOOD_CALLS to run";
  const char* inflight_env = std::getenv("CUVIL_GRPC_FLOOD_INFLIGHT_BYTES");
  std::vector<std::string> args = {"--grpc-max-concurrent-calls", "1024"};
  if (inflight_env != nullptr) {
    args.push_back("--max-inflight-bytes");
    args.push_back(inflight_env);
  }
  ServerProcess server(args);
  ASSERT_FALSE(server.address().empty()) << "the server did not start";
  const size_t rss_before = StatusBytes(server.pid(), "VmRSS");
  auto channel = Channel(server.address());
  grpc::GenericStub stub(channel);
  FloodResult flood = Flood(stub, std::atoi(calls_env));
  const size_t peak = StatusBytes(server.pid(), "VmHWM");
  std::map<std::string, int> codes;
  for (const grpc::Status& s : flood.statuses) {
    codes[std::to_string(s.error_code()) + " " + s.error_message().substr(0, 90)]++;
  }
  std::printf(
      "%s calls of 60 MiB in %lld ms: server RSS before %zu MB, peak %zu MB, "
      "--max-inflight-bytes %s\n",
      calls_env, static_cast<long long>(flood.took.count()), rss_before >> 20, peak >> 20,
      inflight_env != nullptr ? inflight_env : "default");
  for (const auto& [what, n] : codes) std::printf("  %5d x code %s\n", n, what.c_str());
  ExpectMlpStillAnswers(server.address());
}

// The flood of FloodReport against a server started elsewhere (bench/grpc_flood.py runs it
// beside its own clients and samples): skipped unless CUVIL_GRPC_FLOOD_ADDRESS (host:port) and
// CUVIL_GRPC_FLOOD_CALLS are set; CUVIL_GRPC_FLOOD_MIB sets the messages' size (60) and
// CUVIL_GRPC_FLOOD_CONNECTIONS spreads the calls over that many TCP connections (1). Prints how
// the calls ended.
TEST(GrpcLimitsTest, FloodAnotherServer) {
  const char* address = std::getenv("CUVIL_GRPC_FLOOD_ADDRESS");
  const char* calls_env = std::getenv("CUVIL_GRPC_FLOOD_CALLS");
  if (address == nullptr || calls_env == nullptr) {
    GTEST_SKIP() << "set CUVIL_GRPC_FLOOD_ADDRESS and CUVIL_GRPC_FLOOD_CALLS to run";
  }
  const char* mib_env = std::getenv("CUVIL_GRPC_FLOOD_MIB");
  const size_t message_bytes =
      mib_env != nullptr ? static_cast<size_t>(std::atoi(mib_env)) << 20 : kMessageBytes;
  grpc::GenericStub stub(Channel(address));
  std::vector<std::unique_ptr<grpc::GenericStub>> stubs;
  if (const char* n = std::getenv("CUVIL_GRPC_FLOOD_CONNECTIONS"); n != nullptr) {
    for (int i = 0; i < std::atoi(n); ++i) {
      stubs.push_back(std::make_unique<grpc::GenericStub>(Channel(address, true)));
    }
  }
  FloodResult flood = Flood(stub, std::atoi(calls_env), message_bytes, &stubs);
  std::map<std::string, int> codes;
  for (const grpc::Status& s : flood.statuses) {
    codes[std::to_string(s.error_code()) + " " + s.error_message().substr(0, 90)]++;
  }
  std::printf("%s gRPC calls of %zu MiB in %lld ms\n", calls_env, message_bytes >> 20,
              static_cast<long long>(flood.took.count()));
  for (const auto& [what, n] : codes) std::printf("  %5d x code %s\n", n, what.c_str());
}

// One HTTP/1.1 exchange on a new connection to `address` (host:port): sends `head` then `body`
// (with `hold` > 0, all of it but its last byte, then that byte `hold` later) and reads until the
// server closes. The answer, or "" when the connection failed.
std::string HttpExchange(const std::string& address, const std::string& head,
                         const std::string& body,
                         std::chrono::milliseconds hold = std::chrono::milliseconds(0)) {
  const size_t colon = address.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(address.substr(colon + 1))));
  if (inet_pton(AF_INET, address.substr(0, colon).c_str(), &sa.sin_addr) != 1) return "";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval timeout{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  std::string answer;
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) == 0) {
    bool sent = true;
    auto send_all = [&](const char* data, size_t size) {
      for (size_t off = 0; sent && off < size;) {
        const ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0) sent = false;  // The server may answer and close before reading it all.
        off += n > 0 ? static_cast<size_t>(n) : 0;
      }
    };
    send_all(head.data(), head.size());
    const size_t first = hold.count() > 0 && !body.empty() ? body.size() - 1 : body.size();
    send_all(body.data(), first);
    if (first < body.size()) {
      std::this_thread::sleep_for(hold);
      send_all(body.data() + first, body.size() - first);
    }
    char buf[65536];
    for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;) answer.append(buf, n);
  }
  close(fd);
  return answer;
}

// An HTTP POST of `body` to `path`, closing the connection after the answer (`hold`: see
// HttpExchange).
std::string HttpPost(const std::string& address, const std::string& path,
                     const std::string& content_type, const std::string& body,
                     const std::string& extra_headers = "",
                     std::chrono::milliseconds hold = std::chrono::milliseconds(0)) {
  return HttpExchange(address,
                      "POST " + path + " HTTP/1.1\r\nHost: " + address + "\r\nContent-Type: " +
                          content_type + "\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\n" + extra_headers + "Connection: close\r\n\r\n",
                      body, hold);
}

// The status code of an HTTP answer ("HTTP/1.1 503 ..."), or 0.
int HttpStatus(const std::string& answer) {
  return answer.size() > 12 && answer.starts_with("HTTP/1.1 ") ? std::atoi(answer.c_str() + 9) : 0;
}

// A binary-extension inference body for mlp: a JSON header declaring `bytes` of input, then
// that many zero bytes (the server refuses the size once it has the body).
std::pair<std::string, std::string> MlpBinaryBody(size_t bytes) {
  std::string header = R"({"inputs":[{"name":"input","datatype":"FP32","shape":[1,784],)"
                       R"("parameters":{"binary_data_size":)" +
                       std::to_string(bytes) + "}}]}";
  std::string body = header;
  body.append(bytes, '\0');
  return {header, body};
}

// Issue 38: --max-inflight-bytes is one total. A burst of large gRPC messages and large HTTP
// bodies at once (gRPC's receive buffers obey their share, a resource quota; decoded requests
// and HTTP bodies the rest) keeps the server's peak RSS growth near the budget. With gRPC's
// quota at half the budget and the requests' budget the whole of it, the two pools added up:
// 1.9 times the budget at 1 GiB. The HTTP clients hold their bodies' last byte for a second, so
// the admitted ones fill the requests' share while the gRPC burst arrives. Every call and
// request is answered, and mlp still answers after.
TEST(GrpcLimitsTest, MixedGrpcAndHttpBurstStaysWithinTheBudget) {
  constexpr size_t kBudget = size_t{64} << 20;
  constexpr size_t kMessage = size_t{6} << 20;  // Below a tenth of the budget: gRPC takes it.
  ServerProcess server({"--max-inflight-bytes", std::to_string(kBudget), "--max-request-bytes",
                        std::to_string(kMessage + (64 << 10)), "--grpc-max-concurrent-calls",
                        "1024", "--http-body-min-rate", "0"});
  ASSERT_FALSE(server.address().empty()) << "the server did not start";
  ASSERT_FALSE(server.http_address().empty());
  const size_t rss_before = StatusBytes(server.pid(), "VmRSS");
  ASSERT_GT(rss_before, 0u);
  constexpr int kCalls = 48;
  std::vector<std::string> http_answers(kCalls);
  const std::pair<std::string, std::string> mlp_body = MlpBinaryBody(kMessage);
  std::vector<std::thread> posters;
  FloodResult flood;
  {
    grpc::GenericStub stub(Channel(server.address()));
    for (int i = 0; i < kCalls; ++i) {
      posters.emplace_back([&, i] {
        http_answers[i] = HttpPost(
            server.http_address(), "/v2/models/mlp/infer", "application/octet-stream",
            mlp_body.second,
            "Inference-Header-Content-Length: " + std::to_string(mlp_body.first.size()) + "\r\n",
            std::chrono::milliseconds(1000));
      });
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // The bodies are admitted.
    flood = Flood(stub, kCalls, kMessage);
    for (std::thread& t : posters) t.join();
  }
  const size_t peak = StatusBytes(server.pid(), "VmHWM");
  std::map<std::string, int> outcomes;
  for (const grpc::Status& s : flood.statuses) {
    outcomes["gRPC " + std::to_string(s.error_code()) + " " + s.error_message().substr(0, 60)]++;
  }
  for (const std::string& a : http_answers) outcomes["HTTP " + a.substr(0, a.find('\r'))]++;
  std::printf(
      "server RSS before %zu MB, peak during %d gRPC calls and %d HTTP bodies of %zu MiB "
      "%zu MB (+%zu MB), --max-inflight-bytes %zu MiB\n",
      rss_before >> 20, kCalls, kCalls, kMessage >> 20, peak >> 20, (peak - rss_before) >> 20,
      kBudget >> 20);
  for (const auto& [what, n] : outcomes) std::printf("  %4d x %s\n", n, what.c_str());
  for (const grpc::Status& s : flood.statuses) {
    // The wire reader's refusals, the budget's, or the transport's: its resource quota resets
    // streams, or closes the connection (GOAWAY) under the calls still waiting for a stream.
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.error_code(),
                AnyOf(grpc::StatusCode::RESOURCE_EXHAUSTED, grpc::StatusCode::INVALID_ARGUMENT,
                      grpc::StatusCode::NOT_FOUND, grpc::StatusCode::UNAVAILABLE))
        << s.error_message();
  }
  for (const std::string& a : http_answers) {
    // Admitted and refused for its size (400), or refused for the budget (503; the server closes
    // without reading the rest of the body, so the client may see the reset instead: 0).
    EXPECT_THAT(HttpStatus(a), AnyOf(400, 503, 0)) << a.substr(0, 300);
  }
  // The budget, and room for what is not a request's bytes (thread stacks, allocator slack).
  // Before the budget was one total: +110-130 MB here.
#if defined(CUVIL_ASAN)
  constexpr size_t kBound = size_t{1} << 30;
#else
  constexpr size_t kBound = kBudget + (size_t{24} << 20);
#endif
  EXPECT_LT(peak - rss_before, kBound);
  ExpectMlpStillAnswers(server.address());
}

// y[b, j] = x[b, 0] for j < width: a request of 4 bytes a row gets `width` floats a row back.
std::string WideOutputModel(int64_t width) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("wide");
  for (auto [info, name, cols] :
       {std::tuple{g->add_input(), "x", int64_t{1}}, std::tuple{g->add_output(), "y", width}}) {
    info->set_name(name);
    auto* tt = info->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::FLOAT);
    tt->mutable_shape()->add_dim()->set_dim_param("batch");
    tt->mutable_shape()->add_dim()->set_dim_value(cols);
  }
  onnx::TensorProto* ones = g->add_initializer();
  ones->set_name("ones");
  ones->set_data_type(onnx::TensorProto::FLOAT);
  ones->add_dims(width);
  ones->mutable_raw_data()->assign(static_cast<size_t>(width) * sizeof(float), '\0');
  for (int64_t i = 0; i < width; ++i) {
    const float one = 1.0f;
    std::memcpy(ones->mutable_raw_data()->data() + i * sizeof(float), &one, sizeof(float));
  }
  onnx::NodeProto* n = g->add_node();
  n->set_op_type("Mul");
  n->add_input("x");
  n->add_input("ones");
  n->add_output("y");
  return model.SerializeAsString();
}

// Issue 38: a response's outputs are charged to the budget before the request runs, from the
// output shapes its inputs resolve: the tensors, and over HTTP the body they are encoded into
// (JSON text at up to 16 bytes an FP32 value). One that cannot fit gets RESOURCE_EXHAUSTED or
// HTTP 413 alone, RESOURCE_EXHAUSTED or 503 with Retry-After while others hold the budget.
TEST(GrpcLimitsTest, ResponsesAreChargedToTheBudget) {
  static constexpr int64_t kWidth = int64_t{512} << 10;  // 2 MiB of FP32 a row.
  constexpr size_t kBudget = size_t{16} << 20;           // 8 MiB for requests.
  // HTTP bodies up to 6 MiB (the holder's below); gRPC takes messages of a tenth of the budget.
  ServerProcess server(
      {"--max-inflight-bytes", std::to_string(kBudget), "--max-request-bytes",
       std::to_string(size_t{6} << 20), "--http-body-min-rate", "0", "--load-model", "wide"},
      [](const std::string& repo) {
        const std::string dir = repo + "/wide/1";
        std::filesystem::create_directories(dir);
        std::ofstream(dir + "/model.onnx", std::ios::binary) << WideOutputModel(kWidth);
        std::ofstream(repo + "/wide/config.pbtxt")
            << "name: \"wide\"\nplatform: \"onnxruntime_onnx\"\n"
               "max_batch_size: 4\n"
               "input [ { name: \"x\" data_type: TYPE_FP32 dims: [ 1 ] } ]\n"
               "output [ { name: \"y\" data_type: TYPE_FP32 dims: [ "
            << kWidth << " ] } ]\n";
      });
  ASSERT_FALSE(server.address().empty()) << "the server did not start";
  const std::string& http = server.http_address();
  auto json_body = [](int rows, bool binary) {
    std::string data;
    for (int i = 0; i < rows; ++i) data += i ? ",2" : "2";
    return R"({"inputs":[{"name":"x","datatype":"FP32","shape":[)" + std::to_string(rows) +
           R"(,1],"data":[)" + data + R"(]}],"outputs":[{"name":"y","parameters":{"binary_data":)" +
           (binary ? "true" : "false") + "}}]}";
  };
  // Binary: 2 MiB of tensor and 2 MiB of body fit in 8 MiB.
  std::string answer =
      HttpPost(http, "/v2/models/wide/infer", "application/json", json_body(1, true));
  EXPECT_EQ(HttpStatus(answer), 200) << answer.substr(0, 300);
  EXPECT_GT(answer.size(), size_t{2} << 20);
  // JSON: 512 Ki values of up to 16 bytes of text each, 8 MiB, beside the tensor: never fits.
  answer = HttpPost(http, "/v2/models/wide/infer", "application/json", json_body(1, false));
  EXPECT_EQ(HttpStatus(answer), 413) << answer.substr(0, 300);
  EXPECT_THAT(answer, HasSubstr("an HTTP inference with its response of"));
  EXPECT_THAT(answer, HasSubstr("bytes all requests in flight may hold (--max-inflight-bytes "
                                "16777216 less 8388608 set aside for gRPC's receive buffers)"));
  // gRPC: the raw response refers to the tensors. Two rows (4 MiB) fit; four rows (8 MiB) with
  // the message's own bytes do not.
  auto stub = inference::GRPCInferenceService::NewStub(Channel(server.address()));
  auto grpc_infer = [&stub](int rows, inference::ModelInferResponse* r) {
    inference::ModelInferRequest q;
    q.set_model_name("wide");
    auto* in = q.add_inputs();
    in->set_name("x");
    in->set_datatype("FP32");
    in->add_shape(rows);
    in->add_shape(1);
    const std::vector<float> x(static_cast<size_t>(rows), 2.0f);
    q.add_raw_input_contents()->assign(reinterpret_cast<const char*>(x.data()),
                                       x.size() * sizeof(float));
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    return stub->ModelInfer(&ctx, q, r);
  };
  inference::ModelInferResponse r;
  grpc::Status s = grpc_infer(2, &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(r.raw_output_contents_size(), 1);
  EXPECT_EQ(r.raw_output_contents(0).size(), size_t{4} << 20);
  s = grpc_infer(4, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("a gRPC ModelInfer request with its response of"));
  EXPECT_THAT(s.error_message(), HasSubstr("is larger than the 8388608 bytes"));

  // A client holds 5 MiB of the budget with a body it declared and does not send: a response
  // that fits alone is refused as busy meanwhile, over HTTP and gRPC.
  const size_t colon = http.rfind(':');
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(http.substr(colon + 1))));
  inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  const std::string held =
      "POST /v2/models/mlp/infer HTTP/1.1\r\nHost: " + http +
      "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(size_t{5} << 20) +
      "\r\n\r\n{    ";
  auto open_holder = [&]() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)), 0);
    EXPECT_EQ(send(fd, held.data(), held.size(), MSG_NOSIGNAL), static_cast<ssize_t>(held.size()));
    return fd;
  };
  int holder = open_holder();
  bool busy = false;
  // Until the holder's request has reserved its body: up to 20 s, since a loaded CI host (the
  // whole suite on two cores) once took more than 5 s to read the holder's headers. A probe
  // below holds 4 MiB while it runs, so the holder's 5 MiB may come just then and be refused
  // as busy itself (its answer arrives on its socket): then it is sent again.
  for (int i = 0; i < 400 && !busy; ++i) {
    pollfd answered{holder, POLLIN, 0};
    if (poll(&answered, 1, 0) == 1) {
      close(holder);
      holder = open_holder();
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    answer = HttpPost(http, "/v2/models/wide/infer", "application/json", json_body(1, true));
    busy = HttpStatus(answer) == 503;
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(busy) << answer.substr(0, 300);
  EXPECT_THAT(answer, HasSubstr("Retry-After: 1"));
  EXPECT_THAT(answer, HasSubstr("server is busy: an HTTP inference with its response of"));
  EXPECT_THAT(answer, HasSubstr("--max-inflight-bytes"));
  s = grpc_infer(2, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("server is busy: a gRPC ModelInfer request with its "
                                           "response of"));
  close(holder);
  // The holder's bytes come back: the same requests are served.
  bool served = false;
  for (int i = 0; i < 100 && !served; ++i) {
    served = grpc_infer(2, &r).ok();
    if (!served) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(served);
  // (The call's bytes come back once the server has deleted it, just after its answer.)
  for (int i = 0; i < 100; ++i) {
    answer = HttpPost(http, "/v2/models/wide/infer", "application/json", json_body(1, true));
    if (HttpStatus(answer) != 503) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(HttpStatus(answer), 200) << answer.substr(0, 300);
  ExpectMlpStillAnswers(server.address());
}

}  // namespace
}  // namespace cuvil
