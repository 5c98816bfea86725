// Snapshots larger than the gRPC message limit (a big model's weights): the unary Snapshot says to
// stream, SnapshotStream and RestoreSnapshotStream carry the artifact in chunks, the restored
// version serves the same outputs, and a restore above --max-snapshot-bytes is refused.
#include <cstring>
#include <string>

#include "admin.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server_test_util.h"
#include "test_models.h"

namespace cuvil {
namespace {

namespace av1 = cuvil::admin::v1;
using ::testing::HasSubstr;

constexpr int64_t kCols = 16;
// 48 MiB of weights: with the ONNX source the artifact is well above the 64 MiB message limit.
constexpr int64_t kRows = (int64_t{48} << 20) / (kCols * 4);

// y = Gather(table, ids): table float32[kRows, kCols] with table[r][c] = r * kCols + c (exact in
// float32), ids int64[batch].
std::string BigGatherModel() {
  return testing::GatherTableModel(
      kRows, kCols, [](int64_t r, int64_t c) { return static_cast<float>(r * kCols + c); });
}

class SnapshotStreamTest : public ::testing::Test {
 protected:
  void Start(ServerOptions options = {}) {
    server_ = testing::StartServer(testing::MakeRepository("snapshot_stream_repo"), options);
    ASSERT_NE(server_, nullptr);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                   grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel_);
    admin_ = av1::ModelAdmin::NewStub(channel_);
  }

  // Rows `id` of the big model's table, as served.
  std::vector<float> Row(int64_t id) {
    inference::ModelInferRequest q;
    q.set_model_name("big");
    auto* in = q.add_inputs();
    in->set_name("ids");
    in->set_datatype("INT64");
    in->add_shape(1);
    q.add_raw_input_contents(std::string(reinterpret_cast<const char*>(&id), sizeof(id)));
    grpc::ClientContext ctx;
    inference::ModelInferResponse r;
    grpc::Status s = stub_->ModelInfer(&ctx, q, &r);
    EXPECT_TRUE(s.ok()) << s.error_message();
    std::vector<float> row(kCols);
    if (s.ok() && r.raw_output_contents_size() == 1 &&
        r.raw_output_contents(0).size() == row.size() * sizeof(float)) {
      std::memcpy(row.data(), r.raw_output_contents(0).data(), row.size() * sizeof(float));
    }
    return row;
  }

  // The artifact of `model` through SnapshotStream; the status of the stream in `status`.
  std::string StreamSnapshot(const std::string& model, grpc::Status* status,
                             int64_t* total_bytes = nullptr, int* chunks = nullptr) {
    av1::SnapshotRequest q;
    q.set_name(model);
    grpc::ClientContext ctx;
    auto reader = admin_->SnapshotStream(&ctx, q);
    std::string artifact;
    av1::SnapshotChunk chunk;
    int n = 0;
    while (reader->Read(&chunk)) {
      if (n++ == 0 && total_bytes != nullptr) *total_bytes = chunk.total_bytes();
      EXPECT_LE(chunk.data().size(), size_t{1} << 20);
      artifact += chunk.data();
    }
    *status = reader->Finish();
    if (chunks != nullptr) *chunks = n;
    return artifact;
  }

  grpc::Status StreamRestore(const std::string& artifact, av1::RestoreSnapshotResponse* r) {
    grpc::ClientContext ctx;
    auto writer = admin_->RestoreSnapshotStream(&ctx, r);
    constexpr size_t kChunk = 1 << 20;
    av1::SnapshotChunk chunk;
    for (size_t offset = 0; offset < artifact.size(); offset += kChunk) {
      chunk.set_data(artifact.substr(offset, kChunk));
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  std::unique_ptr<CuvilServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<av1::ModelAdmin::Stub> admin_;
};

TEST_F(SnapshotStreamTest, ArtifactAboveTheMessageLimitTravelsInChunks) {
  Start();
  LoadRequest load;
  load.name = "big";
  load.model_bytes[1] = BigGatherModel();
  load.config_pbtxt = "name: \"big\"\nmax_batch_size: 4\n";
  load.wait = true;
  ASSERT_TRUE(server_->models()->Load(load).ok());
  const int64_t id = kRows - 7;
  std::vector<float> want(kCols);
  for (int64_t c = 0; c < kCols; ++c) want[c] = static_cast<float>(id * kCols + c);
  ASSERT_EQ(Row(id), want);

  // The unary call cannot carry it and says what to use instead.
  {
    av1::SnapshotRequest q;
    q.set_name("big");
    grpc::ClientContext ctx;
    av1::SnapshotResponse r;
    grpc::Status s = admin_->Snapshot(&ctx, q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(s.error_message(), HasSubstr("SnapshotStream"));
  }
  grpc::Status status;
  int64_t total = 0;
  int chunks = 0;
  const std::string artifact = StreamSnapshot("big", &status, &total, &chunks);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GT(artifact.size(), size_t{64} << 20);
  EXPECT_EQ(static_cast<size_t>(total), artifact.size());
  EXPECT_GT(chunks, 64);

  // A truncated artifact is refused and changes nothing.
  av1::RestoreSnapshotResponse bad;
  EXPECT_EQ(StreamRestore(artifact.substr(0, artifact.size() - 1000), &bad).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Row(id), want);

  // Unload, then restore from the artifact alone: the same table serves again.
  ASSERT_TRUE(server_->models()->Unload("big").ok());
  av1::RestoreSnapshotResponse restored;
  grpc::Status rs = StreamRestore(artifact, &restored);
  ASSERT_TRUE(rs.ok()) << rs.error_message();
  EXPECT_EQ(restored.name(), "big");
  EXPECT_EQ(restored.version(), 1);
  EXPECT_FALSE(restored.recompiled());  // Same host: the object code is reused.
  EXPECT_EQ(Row(id), want);
  EXPECT_EQ(Row(0)[1], 1.0f);
}

TEST_F(SnapshotStreamTest, RestoreAboveMaxSnapshotBytesIsRefused) {
  ServerOptions options;
  options.max_snapshot_bytes = 4096;
  Start(options);
  grpc::Status status;
  const std::string artifact = StreamSnapshot("lenet", &status);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_GT(artifact.size(), 4096u);
  av1::RestoreSnapshotResponse r;
  grpc::Status s = StreamRestore(artifact, &r);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(s.error_message(), HasSubstr("--max-snapshot-bytes"));
  // Small artifacts still go through the unary calls.
  av1::SnapshotRequest q;
  q.set_name("lenet");
  grpc::ClientContext ctx;
  av1::SnapshotResponse unary;
  ASSERT_TRUE(admin_->Snapshot(&ctx, q, &unary).ok());
  // The same artifact but for its creation time.
  EXPECT_EQ(unary.snapshot().size(), artifact.size());
}

}  // namespace
}  // namespace cuvil
