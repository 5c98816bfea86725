// Profiling patches on a live server (issue 8): the automatic rollback at the end of the window
// is a patch event (cuvil_patches_total, switch histogram), the per-kernel table's total matches
// the server's compute_infer over the same window, and latency after the rollback is back to
// the unpatched figure. Prints the measured figures (bench/profile_patch.md records them).
//
// CUVIL_PROFILE_MODEL=<name of a ../shared/models model> measures that model instead of lenet.
#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "admin.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpc_service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

namespace av1 = cuvil::admin::v1;
namespace fs = std::filesystem;

// The value of the sample whose line starts with `prefix` (name and labels), or -1.
double Sample(const std::string& body, const std::string& prefix) {
  size_t pos = 0;
  while ((pos = body.find(prefix, pos)) != std::string::npos) {
    if (pos == 0 || body[pos - 1] == '\n') {
      const size_t end = body.find('\n', pos);
      const std::string line = body.substr(pos, end - pos);
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    pos += prefix.size();
  }
  return -1;
}

// Executions and their summed compute_infer (per execution, from batch_stats: a batch of several
// requests counts once, as the kernels run once).
struct ComputeTotals {
  uint64_t executions = 0;
  uint64_t infer_ns = 0;
};

class ProfilePatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* env = std::getenv("CUVIL_PROFILE_MODEL");
    model_ = env != nullptr && *env != '\0' ? env : "lenet";
    const std::string repo = testing::MakeRepository("profile_patch_repo");
    if (!fs::exists(fs::path(repo) / model_)) {
      // A zoo model: its ONNX file, the config completed from it.
      fs::create_directories(fs::path(repo) / model_ / "1");
      fs::copy_file(fs::path(testing::SharedModels()) / model_ / "model.onnx",
                    fs::path(repo) / model_ / "1" / "model.onnx");
      std::FILE* f = std::fopen((fs::path(repo) / model_ / "config.pbtxt").c_str(), "w");
      ASSERT_NE(f, nullptr);
      std::fprintf(f, "name: \"%s\"\nmax_batch_size: 8\n", model_.c_str());
      std::fclose(f);
    }
    server_ = testing::StartServer(repo);
    ASSERT_NE(server_, nullptr);
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->grpc_port()),
                                       grpc::InsecureChannelCredentials());
    stub_ = inference::GRPCInferenceService::NewStub(channel);
    admin_ = av1::ModelAdmin::NewStub(channel);
    inference::ModelMetadataRequest mq;
    mq.set_name(model_);
    inference::ModelMetadataResponse meta;
    grpc::ClientContext ctx;
    ASSERT_TRUE(stub_->ModelMetadata(&ctx, mq, &meta).ok());
    ASSERT_EQ(meta.inputs_size(), 1);
    request_ = testing::RawInferRequest(model_, testing::ReadReference(model_, 0, "input"));
    request_.mutable_inputs(0)->set_name(meta.inputs(0).name());
  }

  void Infer() {
    grpc::ClientContext ctx;
    inference::ModelInferResponse r;
    grpc::Status s = stub_->ModelInfer(&ctx, request_, &r);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  ComputeTotals Totals() {
    inference::ModelStatisticsRequest q;
    q.set_name(model_);
    inference::ModelStatisticsResponse r;
    grpc::ClientContext ctx;
    EXPECT_TRUE(stub_->ModelStatistics(&ctx, q, &r).ok());
    ComputeTotals t;
    for (const auto& m : r.model_stats()) {
      t.executions += m.execution_count();
      for (const auto& b : m.batch_stats()) t.infer_ns += b.compute_infer().ns();
    }
    return t;
  }

  // Mean compute_infer per execution over `n` sequential requests, in microseconds.
  double MeanComputeUs(int n) {
    const ComputeTotals before = Totals();
    for (int i = 0; i < n; ++i) Infer();
    const ComputeTotals after = Totals();
    EXPECT_EQ(after.executions - before.executions, static_cast<uint64_t>(n));
    return static_cast<double>(after.infer_ns - before.infer_ns) / 1000.0 /
           static_cast<double>(std::max<uint64_t>(after.executions - before.executions, 1));
  }

  av1::PatchInfo Patch(const std::string& id) {
    av1::ListPatchesRequest q;
    q.set_name(model_);
    av1::ListPatchesResponse r;
    grpc::ClientContext ctx;
    EXPECT_TRUE(admin_->ListPatches(&ctx, q, &r).ok());
    for (const auto& p : r.patches()) {
      if (p.patch_id() == id) return p;
    }
    ADD_FAILURE() << "no patch " << id;
    return {};
  }

  std::string Metrics() {
    httplib::Client client("127.0.0.1", server_->metrics_port());
    auto res = client.Get("/metrics");
    EXPECT_TRUE(res && res->status == 200);
    return res ? res->body : "";
  }

  std::string model_;
  std::unique_ptr<CuvilServer> server_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub_;
  std::unique_ptr<av1::ModelAdmin::Stub> admin_;
  inference::ModelInferRequest request_;
};

TEST_F(ProfilePatchTest, TableMatchesComputeInferAndTheAutomaticRollbackIsCounted) {
  // Unpatched latency, after a warm-up.
  const int kRequests = model_ == "lenet" ? 2000 : 200;
  for (int i = 0; i < kRequests / 10; ++i) Infer();
  const double before_us = MeanComputeUs(kRequests);

  // Profile for 2 s while one client sends requests back to back; the window ends by itself.
  av1::PatchFunctionRequest pq;
  pq.set_name(model_);
  pq.set_kind("profile");
  pq.set_profile_seconds(2);
  pq.set_author("profile-test");
  av1::PatchFunctionResponse pr;
  const ComputeTotals start = Totals();
  {
    grpc::ClientContext ctx;
    grpc::Status s = admin_->PatchFunction(&ctx, pq, &pr);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  int profiled = 0;
  av1::PatchInfo info;
  for (;;) {
    Infer();
    ++profiled;
    info = Patch(pr.patch_id());
    if (!info.active()) break;
    ASSERT_LT(profiled, 10'000'000);
  }
  const ComputeTotals end = Totals();
  const uint64_t executions = end.executions - start.executions;
  const double compute_ms = static_cast<double>(end.infer_ns - start.infer_ns) / 1e6;
  uint64_t kernel_ns = 0;
  uint64_t max_calls = 0;
  for (const auto& row : info.profile()) {
    kernel_ns += row.total_ns();
    max_calls = std::max<uint64_t>(max_calls, row.calls());
  }
  const double kernel_ms = static_cast<double>(kernel_ns) / 1e6;
  const double ratio = kernel_ms / compute_ms;
  ASSERT_GT(info.profile_size(), 0);
  // Every execution but possibly the one that raced the rollback ran the wrappers (and only
  // those: the patch's validation run is not counted).
  EXPECT_GE(max_calls + 1, executions);
  EXPECT_LE(max_calls, executions);

  const double exec_us = compute_ms * 1000 / static_cast<double>(executions);
  const double after_us = MeanComputeUs(kRequests);
  std::printf(
      "profile_patch model=%s executions=%llu kernel_table_ms=%.3f compute_infer_ms=%.3f "
      "ratio=%.4f kernels=%d unpatched_us=%.1f profiled_us=%.1f after_rollback_us=%.1f "
      "after_vs_unpatched=%.4f\n",
      model_.c_str(), static_cast<unsigned long long>(executions), kernel_ms, compute_ms, ratio,
      info.profile_size(), before_us, compute_ms * 1000 / static_cast<double>(executions), after_us,
      after_us / before_us);
  // The kernels run inside compute_infer, so the table cannot exceed it. What is left is the
  // server's fixed work per execution inside compute_infer (shape checks, output tensor, arena,
  // execution guard, the entry point between kernels): about 3 us, 9% of lenet's 32 us at batch
  // 1 on the Zen 3 host, 0.1% of resnet18's. The 10% bound is asserted where that fixed
  // cost is small against an execution; below 1 ms a looser one.
  EXPECT_LE(ratio, 1.0);
  EXPECT_GE(ratio, exec_us >= 1000 ? 0.9 : 0.8);
  // Loose: the machine is shared, so only a gross slowdown after the rollback fails.
  EXPECT_LT(after_us, before_us * 1.5 + 20);

  // Both the patch and its automatic rollback are patch events.
  const std::string body = Metrics();
  const std::string labels = "model=\"" + model_ + "\",version=\"1\",kind=\"";
  EXPECT_EQ(Sample(body, "cuvil_patches_total{" + labels + "profile\",result=\"ok\"}"), 1);
  EXPECT_EQ(Sample(body, "cuvil_patches_total{" + labels + "rollback\",result=\"ok\"}"), 1);
  EXPECT_EQ(Sample(body, "cuvil_patch_switch_duration_seconds_count{kind=\"rollback\"}"), 1);
}

TEST_F(ProfilePatchTest, WaitAnswersAfterTheRollbackWasRecorded) {
  av1::PatchFunctionRequest pq;
  pq.set_name(model_);
  pq.set_kind("profile");
  pq.set_profile_seconds(0.3);
  pq.set_wait(true);
  av1::PatchFunctionResponse pr;
  {
    grpc::ClientContext ctx;
    grpc::Status s = admin_->PatchFunction(&ctx, pq, &pr);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  // With wait the answer comes once the window ended and the rollback was counted.
  const std::string body = Metrics();
  const std::string labels = "model=\"" + model_ + "\",version=\"1\",kind=\"";
  EXPECT_EQ(Sample(body, "cuvil_patches_total{" + labels + "rollback\",result=\"ok\"}"), 1);
  EXPECT_FALSE(Patch(pr.patch_id()).active());
  // A rollback by hand of the finished patch is refused and counted as such, not as a second
  // rollback.
  av1::RollbackRequest rq;
  rq.set_name(model_);
  rq.set_patch_id(pr.patch_id());
  av1::RollbackResponse rr;
  grpc::ClientContext ctx;
  EXPECT_EQ(admin_->Rollback(&ctx, rq, &rr).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  const std::string after = Metrics();
  EXPECT_EQ(Sample(after, "cuvil_patches_total{" + labels + "rollback\",result=\"ok\"}"), 1);
  EXPECT_EQ(Sample(after, "cuvil_patches_total{" + labels + "rollback\",result=\"refused\"}"), 1);
}

}  // namespace
}  // namespace cuvil
