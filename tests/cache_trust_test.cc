// Issue 38 parts 4-7 against a real server: a model whose external data points at /dev/zero fails
// fast while the others serve; an oversized snapshot file in --snapshot-dir is refused without a
// crash; cache and snapshot folders others can write are refused (unless --insecure-cache-dir);
// snapshot files are written 0600.
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "cuvil/server/server.h"
#include "grpc_service.grpc.pb.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "server_test_util.h"
#include "snapshot.pb.h"
#include "test_models.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;

// Runs `fn` on a thread; fails (ending the process: the thread cannot be stopped) when it has not
// finished within `seconds`.
template <typename Fn>
void FinishesWithin(int seconds, const char* what, Fn&& fn) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([done, &fn] {
    fn();
    done->store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!done->load()) {
    ADD_FAILURE() << what << " did not finish within " << seconds << " s";
    std::fprintf(stderr, "%s hangs: giving up\n", what);
    std::_Exit(1);
  }
  t.join();
}

const VersionStatus* Find(const std::vector<VersionStatus>& index, const std::string& name) {
  for (const VersionStatus& v : index) {
    if (v.name == name) return &v;
  }
  return nullptr;
}

// The example mlp answers its reference output.
void ExpectMlpServes(const CuvilServer& server) {
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server.grpc_port()),
                                     grpc::InsecureChannelCredentials());
  auto stub = inference::GRPCInferenceService::NewStub(channel);
  HostTensor input = testing::ReadReference("mlp", 0, "input");
  HostTensor want = testing::ReadReference("mlp", 0, "output");
  inference::ModelInferRequest q;
  q.set_model_name("mlp");
  auto* in = q.add_inputs();
  in->set_name("input");
  in->set_datatype("FP32");
  for (int64_t d : input.shape()) in->add_shape(d);
  q.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(input.data()), input.byte_size()));
  inference::ModelInferResponse r;
  grpc::ClientContext ctx;
  grpc::Status s = stub->ModelInfer(&ctx, q, &r);
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_EQ(r.raw_output_contents_size(), 1);
  testing::ExpectClose(r.raw_output_contents(0).data(), want);
}

class CacheTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_ =
        testing::MakeRepository(::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(fs::path(repo_) / "lenet");  // mlp is enough; keeps the start short.
    scratch_ = fs::path(repo_ + "-scratch");
    fs::remove_all(scratch_);
    fs::create_directories(scratch_);
  }
  void TearDown() override {
    fs::remove_all(repo_);
    fs::remove_all(scratch_);
  }
  std::string repo_;
  fs::path scratch_;
};

// Finding 5: the cache key hashed `../../dev/zero` before the importer ran: the load never ended
// and burned a core. Now it fails at once with the importer's reason; mlp serves.
TEST_F(CacheTrustTest, ExternalDataOnDevZeroFailsFastAndTheServerKeepsServing) {
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(testing::BinaryWithConstant("Add", 4, 0.0f)));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  c->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = c->add_external_data();
  e->set_key("location");
  e->set_value("../../../../../../../../../../dev/zero");
  fs::create_directories(fs::path(repo_) / "zero" / "1");
  std::ofstream(fs::path(repo_) / "zero" / "1" / "model.onnx", std::ios::binary)
      << model.SerializeAsString();
  ServerOptions options;
  options.jit_cache_dir = (scratch_ / "cache").string();  // A persistent cache, as in production.
  std::unique_ptr<CuvilServer> server;
  FinishesWithin(60, "starting a server with a /dev/zero external-data model",
                 [&] { server = testing::StartServer(repo_, options); });
  ASSERT_NE(server, nullptr);
  const std::vector<VersionStatus> index = server->models()->Index();
  const VersionStatus* zero = Find(index, "zero");
  ASSERT_NE(zero, nullptr);
  EXPECT_NE(zero->state, ModelState::kReady);
  EXPECT_NE(zero->reason.find("escapes the model directory"), std::string::npos) << zero->reason;
  ExpectMlpServes(*server);
}

// Finding 4: a 2-4 GiB snapshot wrapped to a negative int before parsing and killed the server.
// A sparse 2.5 GiB file (no disk or memory used) and one above the 1 GiB default limit are
// refused before they are read; the server starts and serves.
TEST_F(CacheTrustTest, OversizedSnapshotFilesAreRefusedAndTheServerServes) {
  const fs::path snapshots = scratch_ / "snapshots";
  fs::create_directories(snapshots);
  ASSERT_EQ(chmod(snapshots.c_str(), 0700), 0);
  for (const auto& [name, size] : {std::pair<const char*, off_t>{"mlp.7.cuvilsnap", off_t{5} << 29},
                                   {"mlp.8.cuvilsnap", (off_t{1} << 30) + 4096}}) {
    const fs::path file = snapshots / name;
    std::ofstream(file, std::ios::binary) << "cuvil";
    ASSERT_EQ(truncate(file.c_str(), size), 0);
  }
  ServerOptions options;
  options.snapshot_dir = snapshots.string();
  std::unique_ptr<CuvilServer> server;
  FinishesWithin(60, "starting a server over oversized snapshots",
                 [&] { server = testing::StartServer(repo_, options); });
  ASSERT_NE(server, nullptr);
  for (const VersionStatus& v : server->models()->Index()) {
    EXPECT_FALSE(v.name == "mlp" && (v.version == 7 || v.version == 8)) << v.version;
  }
  ExpectMlpServes(*server);
  // Refused files are left alone, never deleted.
  EXPECT_TRUE(fs::exists(snapshots / "mlp.7.cuvilsnap"));
  // The snapshot the server wrote for mlp version 1 is its own: 0600.
  struct stat st;
  ASSERT_EQ(stat((snapshots / "mlp.1.cuvilsnap").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// Finding 7: folders another user may write are refused at start with a message naming the folder,
// its mode and the flag; --insecure-cache-dir allows them.
TEST_F(CacheTrustTest, FoldersOthersCanWriteAreRefusedUnlessAllowed) {
  const fs::path cache = scratch_ / "cache";
  const fs::path snapshots = scratch_ / "snapshots";
  for (const fs::path& dir : {cache, snapshots}) {
    fs::create_directories(dir);
    ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
    ServerOptions options;
    options.model_repositories = {repo_};
    options.grpc_port = options.http_port = options.metrics_port = 0;
    options.exit_timeout_secs = 5;
    (dir == cache ? options.jit_cache_dir : options.snapshot_dir) = dir.string();
    auto refused = CuvilServer::Start(options);
    ASSERT_FALSE(refused.ok()) << dir;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
    for (const std::string& part :
         {dir.string(), std::string("0777"), std::string("--insecure-cache-dir")}) {
      EXPECT_NE(refused.status().message().find(part), std::string::npos) << refused.status();
    }
    options.insecure_cache_dir = true;
    auto allowed = CuvilServer::Start(options);
    ASSERT_TRUE(allowed.ok()) << allowed.status();
    (*allowed)->Shutdown();
    ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  }
}

// Issue 37 finding 6: with --snapshot-dir, the first start after an upgrade loaded the object
// code the older build had written (only kCompilerVersion, never bumped, was compared). A file of
// another build is now compiled again from its ONNX source, serves, and is rewritten by this
// build.
TEST_F(CacheTrustTest, ASnapshotOfAnotherBuildIsCompiledAgainAndRewritten) {
  const fs::path snapshots = scratch_ / "snapshots";
  const fs::path file = snapshots / "mlp.1.cuvilsnap";
  {
    ServerOptions options;
    options.snapshot_dir = snapshots.string();
    auto server = testing::StartServer(repo_, options);
    ASSERT_NE(server, nullptr);
    server->Shutdown();
  }
  ASSERT_TRUE(fs::exists(file));
  auto read = [&] {
    std::ifstream f(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
  };
  // As an older build would have left it: another build identity (checksum made right again).
  cuvil::jitcache::v1::SnapshotArtifact artifact;
  ASSERT_TRUE(artifact.ParseFromString(read()));
  cuvil::jitcache::v1::SnapshotBody body;
  ASSERT_TRUE(body.ParseFromString(artifact.body()));
  const std::string ours = body.identity().build_identity();
  ASSERT_FALSE(ours.empty());
  body.mutable_identity()->set_build_identity(ours + "-older-build");
  artifact.set_body(body.SerializeAsString());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits(artifact.body().data(), artifact.body().size()));
  artifact.set_checksum(std::string(reinterpret_cast<const char*>(c.digest), sizeof c.digest));
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out << artifact.SerializeAsString();
  }
  const fs::path empty = scratch_ / "empty-repository";
  fs::create_directories(empty);
  ServerOptions options;
  options.snapshot_dir = snapshots.string();
  auto server = testing::StartServer(empty.string(), options);
  ASSERT_NE(server, nullptr);
  const std::vector<VersionStatus> index = server->models()->Index();  // Outlives `mlp`.
  const VersionStatus* mlp = Find(index, "mlp");
  ASSERT_NE(mlp, nullptr);
  ASSERT_EQ(mlp->state, ModelState::kReady) << mlp->reason;
  ExpectMlpServes(*server);
  // Rewritten in this build's form: the next start loads its code as it is.
  ASSERT_TRUE(artifact.ParseFromString(read()));
  ASSERT_TRUE(body.ParseFromString(artifact.body()));
  EXPECT_EQ(body.identity().build_identity(), ours);
}
}  // namespace
}  // namespace cuvil
