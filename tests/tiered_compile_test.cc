// Tiered compilation in cuvil-server with a JIT cache folder: a version becomes READY on its quick
// tier (which is not written to disk), the background tier-up writes the full tier's entry and
// swaps its kernels in, another process then loads that entry directly, and a full tier whose
// entry cannot be written is counted and swapped in all the same.
#include <httplib.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "cuvil/jitcache/object_cache.h"
#include "cuvil/server/infer_request_builder.h"
#include "cuvil/server/server.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server_test_util.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

// The .cjc entries in `dir`.
std::vector<std::string> Entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".cjc") out.push_back(e.path().string());
  }
  return out;
}

// Runs `command` and returns what it printed on stdout, then its exit status.
std::pair<std::string, int> RunCommand(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return {"", -1};
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  return {out, pclose(p)};
}

class TieredCompileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    repo_ = testing::MakeRepository("tiered_" + name);
    cache_dir_ =
        fs::path(::testing::TempDir()) / ("tiered_cache_" + name + "_" + std::to_string(getpid()));
    fs::remove_all(cache_dir_);
    fs::create_directories(cache_dir_);
    testing::RemoveAtExit(cache_dir_);
  }
  void TearDown() override {
    server_.reset();
    fs::remove_all(repo_);
    fs::remove_all(cache_dir_);
  }

  void Start() {
    ServerOptions options;
    options.jit_cache_dir = cache_dir_.string();
    options.compile_tier = CompileTier::kTiered;
    server_ = testing::StartServer(repo_.string(), options);
    ASSERT_NE(server_, nullptr);
  }

  // Waits (up to 60 s) until `model`'s serving version has had its full tier swapped in.
  bool WaitForTierSwap(const std::string& model) {
    for (int i = 0; i < 600; ++i) {
      auto v = server_->models()->Get(model, "");
      if (v.ok()) {
        for (const PatchRecord& p : (*v)->loaded().patches().Patches()) {
          if (p.author == "tiered-compilation") return true;
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  // lenet on its first reference set, checked against the reference output.
  void ExpectLenetServes() {
    auto v = server_->models()->Get("lenet", "");
    ASSERT_TRUE(v.ok()) << v.status();
    HostTensor input = testing::ReadReference("lenet", 0, "input");
    HostTensor want = testing::ReadReference("lenet", 0, "output");
    WireRequest wire;
    wire.inputs.push_back({"input", "FP32", input.shape(), input.data(), input.byte_size(), {}});
    auto request = BuildInferenceRequest(**v, std::move(wire));
    ASSERT_TRUE(request.ok()) << request.status();
    InferenceResponse response = InferBlocking(**v, *std::move(request));
    ASSERT_TRUE(response.status.ok()) << response.status;
    ASSERT_EQ(response.outputs.size(), 1u);
    testing::ExpectClose(response.outputs[0].tensor.data(), want);
  }

  std::string Metrics() {
    httplib::Client client("127.0.0.1", server_->metrics_port());
    auto res = client.Get("/metrics");
    return res ? res->body : "";
  }

  // The metrics once they show `line` (patch events are counted just after the swap), up to 10 s.
  std::string MetricsWith(const std::string& line) {
    std::string body;
    for (int i = 0; i < 100; ++i) {
      body = Metrics();
      if (body.find(line) != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return body;
  }

  fs::path repo_;
  fs::path cache_dir_;
  std::unique_ptr<CuvilServer> server_;
};

TEST_F(TieredCompileTest, FullTierIsCachedInTheBackgroundAndAnotherProcessLoadsIt) {
  Start();
  ExpectLenetServes();  // The quick tier, or already the full one.
  ASSERT_TRUE(WaitForTierSwap("lenet"));
  ASSERT_TRUE(WaitForTierSwap("mlp"));
  ExpectLenetServes();  // The full tier.

  // Only full tiers are on disk: one entry per model, under the full tier's key.
  auto cache = ObjectCache::Create({.dir = cache_dir_.string()});
  ASSERT_TRUE(cache.ok()) << cache.status();
  const std::string lenet = (repo_ / "lenet/1/model.onnx").string();
  auto full_key = (*cache)->Key(lenet, "", CompileOptions());
  ASSERT_TRUE(full_key.ok()) << full_key.status();
  CompileOptions quick;
  quick.opt_level = kFastTierOptLevel;
  auto quick_key = (*cache)->Key(lenet, "", quick);
  ASSERT_TRUE(quick_key.ok()) << quick_key.status();
  EXPECT_EQ(Entries(cache_dir_).size(), 2u);
  EXPECT_TRUE(fs::exists((*cache)->EntryPath(*full_key)));
  EXPECT_FALSE(fs::exists((*cache)->EntryPath(*quick_key)));
  const std::string swapped =
      "cuvil_patches_total{model=\"lenet\",version=\"1\",kind=\"tier_swap\",result=\"ok\"} 1";
  const std::string metrics = MetricsWith(swapped);
  EXPECT_THAT(metrics, HasSubstr(swapped));
  EXPECT_THAT(metrics, Not(HasSubstr("cuvil_jit_cache_store_failures_total{model=\"lenet\"}")));

  // Another process with the same folder (this binary again: the key includes the build's
  // identity) loads the full tier without compiling anything.
  const std::string self = fs::read_symlink("/proc/self/exe").string();
  auto [out, rc] =
      RunCommand("CUVIL_TIERED_CACHE_DIR=" + cache_dir_.string() + " CUVIL_TIERED_MODEL=" + lenet +
                 " " + self +
                 " --gtest_also_run_disabled_tests "
                 "--gtest_filter=TieredCompileChildTest.DISABLED_SecondProcessLoadsTheFullTier"
                 " 2>&1");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("[  PASSED  ] 1 test"));
}

// Run by the test above in a process of its own.
TEST(TieredCompileChildTest, DISABLED_SecondProcessLoadsTheFullTier) {
  const char* dir = std::getenv("CUVIL_TIERED_CACHE_DIR");
  const char* model = std::getenv("CUVIL_TIERED_MODEL");
  ASSERT_TRUE(dir != nullptr && model != nullptr);
  auto cache = ObjectCache::Create({.dir = dir});
  ASSERT_TRUE(cache.ok()) << cache.status();
  CacheLookup lookup;
  auto full = (*cache)->Lookup(model, "", CompileOptions(), &lookup);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(TotalCompilations(), 0u);
  EXPECT_TRUE(full->weights.read_only());
}

TEST_F(TieredCompileTest, AFullTierWhoseEntryCannotBeWrittenIsCountedAndStillSwappedIn) {
  // A directory where lenet's full-tier entry goes: the write's final rename fails.
  {
    auto cache = ObjectCache::Create({.dir = cache_dir_.string()});
    ASSERT_TRUE(cache.ok()) << cache.status();
    auto key = (*cache)->Key((repo_ / "lenet/1/model.onnx").string(), "", CompileOptions());
    ASSERT_TRUE(key.ok()) << key.status();
    fs::create_directories(fs::path((*cache)->EntryPath(*key)) / "occupied");
  }
  Start();
  ASSERT_TRUE(WaitForTierSwap("lenet"));
  ExpectLenetServes();
  const std::string swapped =
      "cuvil_patches_total{model=\"lenet\",version=\"1\",kind=\"tier_swap\",result=\"ok\"} 1";
  const std::string metrics = MetricsWith(swapped);
  EXPECT_THAT(metrics, HasSubstr(swapped));
  EXPECT_THAT(metrics, HasSubstr("cuvil_jit_cache_store_failures_total{model=\"lenet\"} 1"));
  // mlp is unaffected: its full tier was written.
  ASSERT_TRUE(WaitForTierSwap("mlp"));
  EXPECT_EQ(Entries(cache_dir_).size(), 1u);
}

}  // namespace
}  // namespace cuvil
