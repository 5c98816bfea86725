// TLS and mutual TLS on both protocols, with certificates made by the openssl tool for the test.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "cuvil/server/server.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream text;
  text << f.rdbuf();
  return text.str();
}

// A CA, a server certificate for localhost/127.0.0.1 and a client certificate, both CA-signed.
class Certificates {
 public:
  // Per process: CTest runs this suite's tests as parallel processes.
  Certificates()
      : dir_(fs::path(::testing::TempDir()) / ("cuvil_tls_" + std::to_string(getpid()))) {
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    testing::RemoveAtExit(dir_);
    const std::string d = dir_.string();
    const std::string script =
        "set -e; cd '" + d +
        "'; exec >openssl.log 2>&1\n"
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 2 "
        "-subj /CN=cuvil-test-ca\n"
        "printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > san.ext\n"
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "
        "/CN=localhost\n"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem "
        "-days 2 -extfile san.ext\n"
        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=client\n"
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem "
        "-days 2\n";
    ok_ = std::system(("sh -c \"" + Escape(script) + "\"").c_str()) == 0;
  }
  bool ok() const { return ok_; }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  static std::string Escape(const std::string& s) {
    std::string out;
    for (char c : s) {
      if (c == '"' || c == '\\' || c == '$' || c == '`') out += '\\';
      out += c;
    }
    return out;
  }
  fs::path dir_;
  bool ok_ = false;
};

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certs_ = new Certificates(); }
  static void TearDownTestSuite() { delete certs_; }

  void StartServer(bool mutual, ServerOptions options = {}) {
    ASSERT_TRUE(certs_->ok()) << "openssl failed; see " << certs_->path("openssl.log");
    options.tls_cert_file = certs_->path("server.pem");
    options.tls_key_file = certs_->path("server.key");
    if (mutual) options.tls_client_ca_file = certs_->path("ca.pem");
    server_ = testing::StartServer(
        testing::MakeRepository(std::string("tls_repo_") +
                                ::testing::UnitTest::GetInstance()->current_test_info()->name()),
        options);
    ASSERT_NE(server_, nullptr);
  }

  bool GrpcLive(std::shared_ptr<grpc::ChannelCredentials> credentials) {
    // An address, not "localhost": gRPC's c-ares resolver leaks a few bytes per lookup, which
    // LeakSanitizer reports. The certificate is still checked against the name "localhost".
    grpc::ChannelArguments args;
    args.SetSslTargetNameOverride("localhost");
    auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                             credentials, args);
    auto stub = inference::GRPCInferenceService::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    inference::ServerLiveResponse live;
    return stub->ServerLive(&ctx, {}, &live).ok() && live.live();
  }

  std::shared_ptr<grpc::ChannelCredentials> Tls(bool with_client_cert) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = ReadFile(certs_->path("ca.pem"));
    if (with_client_cert) {
      ssl.pem_private_key = ReadFile(certs_->path("client.key"));
      ssl.pem_cert_chain = ReadFile(certs_->path("client.pem"));
    }
    return grpc::SslCredentials(ssl);
  }

  int HttpsReady(bool with_client_cert) {
    std::unique_ptr<httplib::SSLClient> client =
        with_client_cert ? std::make_unique<httplib::SSLClient>("localhost", server_->http_port(),
                                                                certs_->path("client.pem"),
                                                                certs_->path("client.key"))
                         : std::make_unique<httplib::SSLClient>("localhost", server_->http_port());
    client->set_ca_cert_path(certs_->path("ca.pem").c_str());
    client->enable_server_certificate_verification(true);
    client->set_connection_timeout(5);
    auto res = client->Get("/v2/health/ready");
    return res ? res->status : -1;
  }

  static Certificates* certs_;
  std::unique_ptr<CuvilServer> server_;
};

Certificates* TlsTest::certs_ = nullptr;

TEST_F(TlsTest, ServesBothProtocolsOverTls) {
  StartServer(/*mutual=*/false);
  EXPECT_TRUE(GrpcLive(Tls(false)));
  EXPECT_FALSE(GrpcLive(grpc::InsecureChannelCredentials()));
  EXPECT_EQ(HttpsReady(false), 200);
  httplib::Client plain("localhost", server_->http_port());
  plain.set_connection_timeout(5);
  auto res = plain.Get("/v2/health/ready");
  EXPECT_TRUE(!res || res->status != 200);
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificate) {
  StartServer(/*mutual=*/true);
  EXPECT_TRUE(GrpcLive(Tls(true)));
  EXPECT_FALSE(GrpcLive(Tls(false)));
  EXPECT_EQ(HttpsReady(true), 200);
  EXPECT_NE(HttpsReady(false), 200);
}

// Issue 38 (a) over TLS: connections that never finish the handshake, or finish it and then
// trickle a header block, hold no handler thread and are cut at the header deadline, while a new
// client's health check is answered.
TEST_F(TlsTest, SlowTlsClientsDoNotStopHealth) {
  ServerOptions options;
  options.http_threads = 2;
  options.http_header_timeout_secs = 2;
  StartServer(/*mutual=*/false, options);
  std::vector<int> slow;
  for (int i = 0; i < 16; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(server_->http_port()));
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    // The start of a TLS record header (a ClientHello that never completes), or nothing.
    if (i % 2 == 0) {
      ASSERT_EQ(::send(fd, "\x16\x03\x01", 3, MSG_NOSIGNAL), 3);
    }
    slow.push_back(fd);
  }
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(HttpsReady(false), 200);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  // Every slow connection is closed by the server by its 2 s deadline (generous slack).
  for (int fd : slow) {
    pollfd p{fd, POLLIN, 0};
    bool closed = false;
    while (!closed && std::chrono::steady_clock::now() - start < std::chrono::seconds(10)) {
      if (::poll(&p, 1, 100) > 0) {
        char buf[256];
        closed = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT) <= 0;
      }
    }
    EXPECT_TRUE(closed);
    ::close(fd);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(8));
  EXPECT_EQ(HttpsReady(false), 200);
}

TEST_F(TlsTest, BadTlsSettingsFailTheStart) {
  ASSERT_TRUE(certs_->ok());
  ServerOptions options;
  options.model_repositories = {testing::MakeRepository("tls_bad_repo")};
  options.grpc_port = options.http_port = options.metrics_port = 0;
  options.tls_cert_file = certs_->path("server.pem");
  auto no_key = CuvilServer::Start(options);
  EXPECT_EQ(no_key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(no_key.status().message(), ::testing::HasSubstr("--tls-key"));
  options.tls_key_file = certs_->path("missing.key");
  auto missing = CuvilServer::Start(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.status().message(), ::testing::HasSubstr("missing.key"));
  options.tls_key_file = certs_->path("client.key");  // Not the certificate's key.
  auto mismatched = CuvilServer::Start(options);
  EXPECT_FALSE(mismatched.ok());
}

}  // namespace
}  // namespace cuvil
