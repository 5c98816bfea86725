#include "cuvil/observability/server_metrics.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::observability {
namespace {

ServerMetricsOptions Options(std::string version, std::string llvm, bool triton) {
  ServerMetricsOptions o;
  o.version = std::move(version);
  o.llvm = std::move(llvm);
  o.triton_compat = triton;
  return o;
}

using ::testing::HasSubstr;
using ::testing::Not;

// Value of the sample line starting with `series` + " " in a 0.0.4 body, or NaN if absent.
double SampleValue(const std::string& body, std::string_view series) {
  for (absl::string_view piece : absl::StrSplit(body, '\n')) {
    const std::string_view line(piece.data(), piece.size());
    if (line.starts_with(series) && line.size() > series.size() && line[series.size()] == ' ') {
      return std::strtod(std::string(line.substr(series.size() + 1)).c_str(), nullptr);
    }
  }
  return NAN;
}

TEST(ServerMetricsTest, CountsEveryRecordedRequest) {
  ServerMetrics metrics(Options("0.1.0", "19.1.7", false));
  std::shared_ptr<ModelMetrics> m = metrics.ForModel("resnet", "1");
  EXPECT_EQ(metrics.ForModel("resnet", "1"), m);
  constexpr int kN = 1234;
  for (int i = 0; i < kN; ++i) {
    m->RecordSuccess(/*samples=*/2, /*request_ns=*/3'000'000, /*queue_ns=*/1'000'000, 100'000,
                     1'500'000, 100'000);
  }
  m->RecordFailure(FailureReason::kTimeout);
  m->RecordFailure(FailureReason::kTimeout);
  m->RecordFailure(FailureReason::kInvalidArgument);
  for (int i = 0; i < 10; ++i) m->RecordExecution(i < 5 ? 3 : 64);
  m->SetPending(4);
  m->SetReady(true);
  m->SetMemoryBytes(1 << 20);

  const std::string body = metrics.Render("").body;
  const std::string mv = "model=\"resnet\",version=\"1\"";
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_requests_total{", mv,
                                           ",status=\"success\",reason=\"\"}")),
            kN);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_requests_total{", mv,
                                           ",status=\"failure\",reason=\"timeout\"}")),
            2);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_requests_total{", mv,
                                           ",status=\"failure\",reason=\"invalid_argument\"}")),
            1);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_requests_total{", mv,
                                           ",status=\"failure\",reason=\"internal\"}")),
            0);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_samples_total{", mv, "}")), 2 * kN);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_executions_total{", mv, "}")), 10);
  for (const char* h : {"cuvil_request_duration_seconds", "cuvil_queue_duration_seconds",
                        "cuvil_compute_duration_seconds"}) {
    EXPECT_EQ(SampleValue(body, absl::StrCat(h, "_count{", mv, "}")), kN) << h;
    EXPECT_EQ(SampleValue(body, absl::StrCat(h, "_bucket{", mv, ",le=\"+Inf\"}")), kN) << h;
  }
  // 3 ms lands in le=0.005, not le=0.0025.
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_request_duration_seconds_bucket{", mv,
                                           ",le=\"0.0025\"}")),
            0);
  EXPECT_EQ(SampleValue(
                body, absl::StrCat("cuvil_request_duration_seconds_bucket{", mv, ",le=\"0.005\"}")),
            kN);
  EXPECT_NEAR(SampleValue(body, absl::StrCat("cuvil_request_duration_seconds_sum{", mv, "}")),
              kN * 3e-3, 1e-9);
  EXPECT_NEAR(SampleValue(body, absl::StrCat("cuvil_compute_duration_seconds_sum{", mv, "}")),
              kN * 1.7e-3, 1e-9);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_batch_size_bucket{", mv, ",le=\"4\"}")), 5);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_batch_size_bucket{", mv, ",le=\"64\"}")), 10);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_batch_size_count{", mv, "}")), 10);
  EXPECT_NEAR(
      SampleValue(body, absl::StrCat("cuvil_request_latency_seconds{", mv, ",quantile=\"0.99\"}")),
      3e-3, 3e-3 * 0.02);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_request_latency_seconds_count{", mv, "}")), kN);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_pending_requests{", mv, "}")), 4);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_model_ready{", mv, "}")), 1);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_model_memory_bytes{", mv, "}")), 1 << 20);
  EXPECT_EQ(SampleValue(body, "cuvil_build_info{version=\"0.1.0\",llvm=\"19.1.7\"}"), 1);
  // No Triton names unless asked for.
  EXPECT_THAT(body, Not(HasSubstr("nv_inference")));
}

// A version's series live while a handle of it does: a reload of the same version keeps them
// (and their counts); once every handle is gone (unloaded, replaced) they leave the exposition,
// so loading ever new versions does not grow it.
TEST(ServerMetricsTest, SeriesOfAVersionLeaveWithItsLastHandle) {
  ServerMetrics metrics(Options("v", "l", /*triton=*/true));
  const std::string ready = "cuvil_model_ready{model=\"m\",version=\"1\"}";
  const std::string nv = "nv_inference_count{model=\"m\",version=\"1\"}";
  auto first = metrics.ForModel("m", "1");
  first->SetReady(true);
  first->RecordSuccess(3, 1000, 100, 10, 800, 90);
  auto reload = metrics.ForModel("m", "1");  // The same version loaded again.
  EXPECT_EQ(reload.get(), first.get());
  first.reset();  // The old copy retires.
  std::string body = metrics.Render("").body;
  EXPECT_EQ(SampleValue(body, ready), 1);
  EXPECT_EQ(SampleValue(body, nv), 3);  // Counting goes on where it was.
  auto copy = reload;                   // Copies (callbacks) hold it too.
  reload.reset();
  EXPECT_EQ(SampleValue(metrics.Render("").body, ready), 1);
  copy.reset();  // Unloaded: nothing of (m, 1) is exported any more.
  body = metrics.Render("").body;
  EXPECT_THAT(body, Not(HasSubstr("version=\"1\"")));
  // A thousand versions loaded and unloaded leave nothing behind.
  for (int v = 2; v < 1002; ++v) {
    auto h = metrics.ForModel("m", absl::StrCat(v));
    h->SetReady(true);
    h->RecordExecution(1);
  }
  EXPECT_THAT(metrics.Render("").body, Not(HasSubstr("model=\"m\"")));
  // Loaded again later, the version starts afresh.
  auto again = metrics.ForModel("m", "1");
  again->SetReady(true);
  EXPECT_EQ(SampleValue(metrics.Render("").body, ready), 1);
  EXPECT_TRUE(std::isnan(SampleValue(metrics.Render("").body, nv)) ||
              SampleValue(metrics.Render("").body, nv) == 0);
}

TEST(ServerMetricsTest, ColdPathFamilies) {
  ServerMetrics metrics(Options("v", "l", false));
  metrics.RecordCompile("m", 0.3);
  metrics.RecordCacheHit("m");
  metrics.RecordCacheHit("m");
  metrics.RecordCacheMiss("m");
  metrics.RecordCacheCorrupt("m");
  metrics.RecordCacheStoreFailure("m");
  metrics.RecordLoad("m", "2", 1.5);
  metrics.RecordPatch("m", "2", PatchKind::kIr, PatchResult::kOk, 0.002);
  metrics.RecordPatch("m", "2", PatchKind::kRollback, PatchResult::kOk, 0.0001);
  metrics.RecordPatch("m", "2", PatchKind::kIr, PatchResult::kOk, 0.004);
  metrics.RecordPatch("m", "2", PatchKind::kIr, PatchResult::kRefused);
  metrics.RecordRejection("m", RejectionReason::kNoReadyVersion);
  metrics.RecordRejection("m", RejectionReason::kNoReadyVersion);
  metrics.RecordRejection("", RejectionReason::kUnknownModel);
  const std::string body = metrics.Render("").body;
  EXPECT_EQ(SampleValue(body, "cuvil_jit_compile_duration_seconds_count{model=\"m\"}"), 1);
  EXPECT_EQ(SampleValue(body, "cuvil_jit_cache_hits_total{model=\"m\"}"), 2);
  EXPECT_EQ(SampleValue(body, "cuvil_jit_cache_misses_total{model=\"m\"}"), 1);
  EXPECT_EQ(SampleValue(body, "cuvil_jit_cache_corrupt_entries_total{model=\"m\"}"), 1);
  EXPECT_EQ(SampleValue(body, "cuvil_jit_cache_store_failures_total{model=\"m\"}"), 1);
  EXPECT_EQ(SampleValue(body, "cuvil_model_load_duration_seconds_sum{model=\"m\",version=\"2\"}"),
            1.5);
  EXPECT_EQ(
      SampleValue(body, "cuvil_patches_total{model=\"m\",version=\"2\",kind=\"ir\",result=\"ok\"}"),
      2);
  EXPECT_EQ(
      SampleValue(body,
                  "cuvil_patches_total{model=\"m\",version=\"2\",kind=\"ir\",result=\"refused\"}"),
      1);
  EXPECT_EQ(
      SampleValue(body,
                  "cuvil_patches_total{model=\"m\",version=\"2\",kind=\"rollback\",result=\"ok\"}"),
      1);
  // Refused patches switched nothing: only the three that took effect are observed.
  EXPECT_EQ(SampleValue(body, "cuvil_patch_switch_duration_seconds_count{kind=\"ir\"}"), 2);
  EXPECT_EQ(
      SampleValue(body, "cuvil_patch_switch_duration_seconds_bucket{kind=\"ir\",le=\"0.0025\"}"),
      1);
  EXPECT_EQ(
      SampleValue(body, "cuvil_requests_rejected_total{model=\"m\",reason=\"no_ready_version\"}"),
      2);
  EXPECT_EQ(SampleValue(body, "cuvil_requests_rejected_total{model=\"\",reason=\"unknown_model\"}"),
            1);
}

TEST(ServerMetricsTest, ProcessMetricsAreRead) {
  ServerMetrics metrics(Options("v", "l", false));
  const std::string body = metrics.Render("").body;
  EXPECT_GT(SampleValue(body, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GE(SampleValue(body, "process_open_fds"), 3);
  EXPECT_GE(SampleValue(body, "process_cpu_seconds_total"), 0);
  const double start = SampleValue(body, "process_start_time_seconds");
  const double now = static_cast<double>(time(nullptr));
  EXPECT_GT(start, now - 3600);
  EXPECT_LE(start, now + 1);
}

TEST(ServerMetricsTest, TritonCompatNames) {
  ServerMetrics metrics(Options("v", "l", true));
  auto m = metrics.ForModel("bert", "3");
  m->RecordSuccess(4, 2'500'400, 1'000'200, 100'100, 1'200'300, 199'800);
  m->RecordSuccess(4, 2'500'400, 1'000'200, 100'100, 1'200'300, 199'800);
  m->RecordFailure(FailureReason::kRejected);
  m->RecordFailure(FailureReason::kTimeout);
  m->RecordFailure(FailureReason::kInternal);
  m->RecordFailure(FailureReason::kCanceled);
  m->RecordFailure(FailureReason::kNotFound);
  m->RecordExecution(8);
  m->SetPending(2);
  const std::string body = metrics.Render("").body;
  const std::string mv = "{model=\"bert\",version=\"3\"}";
  EXPECT_THAT(body, HasSubstr("# TYPE nv_inference_request_success counter\n"));
  EXPECT_EQ(SampleValue(body, "nv_inference_request_success" + mv), 2);
  EXPECT_EQ(SampleValue(body, "nv_inference_count" + mv), 8);
  EXPECT_EQ(SampleValue(body, "nv_inference_exec_count" + mv), 1);
  EXPECT_EQ(SampleValue(body, "nv_inference_pending_request_count" + mv), 2);
  // Cumulative microseconds, summed in nanoseconds before converting.
  EXPECT_EQ(SampleValue(body, "nv_inference_request_duration_us" + mv), 5000);
  EXPECT_EQ(SampleValue(body, "nv_inference_queue_duration_us" + mv), 2000);
  EXPECT_EQ(SampleValue(body, "nv_inference_compute_input_duration_us" + mv), 200);
  EXPECT_EQ(SampleValue(body, "nv_inference_compute_infer_duration_us" + mv), 2400);
  EXPECT_EQ(SampleValue(body, "nv_inference_compute_output_duration_us" + mv), 399);
  const std::string f = "nv_inference_request_failure{model=\"bert\",version=\"3\",reason=";
  EXPECT_EQ(SampleValue(body, f + "\"REJECTED\"}"), 2);
  EXPECT_EQ(SampleValue(body, f + "\"BACKEND\"}"), 1);
  EXPECT_EQ(SampleValue(body, f + "\"CANCELED\"}"), 1);
  EXPECT_EQ(SampleValue(body, f + "\"OTHER\"}"), 1);
  EXPECT_THAT(body, Not(HasSubstr("nv_inference_count_total")));
  // OpenMetrics keeps the Triton sample names, typed unknown.
  const RenderedMetrics om = metrics.Render("application/openmetrics-text");
  EXPECT_THAT(om.body, HasSubstr("# TYPE nv_inference_count unknown\n"));
  EXPECT_THAT(om.body, HasSubstr("\nnv_inference_count" + mv + " 8\n"));
  EXPECT_THAT(om.body, HasSubstr("# TYPE cuvil_inference_requests counter\n"));
  EXPECT_TRUE(absl::EndsWith(om.body, "# EOF\n"));
}

TEST(ServerMetricsTest, RemoveStopsExportingButHandleStaysValid) {
  ServerMetrics metrics(Options("v", "l", true));
  auto keep = metrics.ForModel("a", "1");
  auto gone = metrics.ForModel("b", "1");
  gone->RecordSuccess(1, 1000, 0, 0, 0, 0);
  metrics.RecordLoad("b", "1", 0.5);
  metrics.RecordPatch("b", "1", PatchKind::kIr, PatchResult::kOk, 0.001);
  metrics.Remove("b", "1");
  gone->RecordSuccess(1, 1000, 0, 0, 0, 0);  // in-flight request after unload: harmless
  gone->SetReady(false);
  const std::string body = metrics.Render("").body;
  EXPECT_THAT(body, HasSubstr("model=\"a\""));
  EXPECT_THAT(body, Not(HasSubstr("model=\"b\"")));
  EXPECT_NE(metrics.ForModel("b", "1"), gone);  // reloading starts fresh series
}

TEST(ServerMetricsTest, ConcurrentRecordingSumsExactly) {
  ServerMetrics metrics(Options("v", "l", true));
  // The version's own handle: its series live while it does.
  const auto version = metrics.ForModel("shared", "1");
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::vector<std::thread> threads;
  std::atomic<bool> go{false};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      auto m = metrics.ForModel("shared", "1");
      while (!go.load()) std::this_thread::yield();
      for (int i = 0; i < kPerThread; ++i) {
        m->RecordSuccess(1, 2000, 1000, 0, 1000, 0);
        m->RecordExecution(1);
      }
    });
  }
  go = true;
  // Scrape concurrently with recording.
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(metrics.Render("").body.empty());
  for (auto& t : threads) t.join();
  const std::string body = metrics.Render("").body;
  const std::string mv = "model=\"shared\",version=\"1\"";
  constexpr double kTotal = double{kThreads} * kPerThread;
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_requests_total{", mv,
                                           ",status=\"success\",reason=\"\"}")),
            kTotal);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_request_duration_seconds_count{", mv, "}")),
            kTotal);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_request_latency_seconds_count{", mv, "}")),
            kTotal);
  EXPECT_EQ(SampleValue(body, absl::StrCat("cuvil_inference_executions_total{", mv, "}")), kTotal);
  EXPECT_EQ(SampleValue(body, absl::StrCat("nv_inference_request_duration_us{", mv, "}")),
            kTotal * 2);
}

TEST(ServerMetricsTest, BatchSizeBuckets) {
  EXPECT_THAT(ServerMetrics::BatchSizeBuckets(128),
              ::testing::ElementsAre(1, 2, 4, 8, 16, 32, 64, 128));
  EXPECT_THAT(ServerMetrics::BatchSizeBuckets(100),
              ::testing::ElementsAre(1, 2, 4, 8, 16, 32, 64, 128));
  EXPECT_THAT(ServerMetrics::BatchSizeBuckets(1), ::testing::ElementsAre(1));
  EXPECT_EQ(ServerMetrics::DurationBuckets().front(), 25e-6);
  EXPECT_EQ(ServerMetrics::DurationBuckets().back(), 10);
}

}  // namespace
}  // namespace cuvil::observability
