// Safe-point hot patching of a loaded model: IR patches, validation runs, rollback, refusal of bad
// patches, and executions in flight during patch/rollback cycles (never a mixed table).
#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "patch_test_models.h"

namespace cuvil {
namespace {

constexpr int64_t kWidth = 8;

// y = (x + c1) + c2 with x float32[batch, 8]: two kernels, k0 and k1.
std::string TwoAdds(float c1, float c2) {
  return testing::TwoBinaryOps("two_adds", kWidth, "Add", c1, "Add", c2);
}

// The Add kernel over [batch, 8] with its result multiplied by `scale`.
std::string ScaledAddIr(const std::string& name, float scale) {
  return testing::ScaledAddIr(name, kWidth, scale);
}

CompileOptions OptLevel(int level) {
  CompileOptions options;
  options.opt_level = level;
  return options;
}

class PatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    auto compiled = CompileOnnxBytes(TwoAdds(1.0f, 10.0f));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto loaded = engine_->Load("two_adds/1", std::move(*compiled));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_ = std::move(*loaded);
    ASSERT_EQ(model_->model().kernels.size(), 2u);
    k0_ = model_->model().kernels[0].symbol;
    k1_ = model_->model().kernels[1].symbol;
  }

  // The first output element for x = 0 (every element is the same).
  float RunOnce(const PreparedPatch* patch = nullptr) {
    HostTensor x(DType::kFloat32, {2, kWidth});
    std::memset(x.data(), 0, x.byte_size());
    auto out = model_->RunWith(patch, {x});
    EXPECT_TRUE(out.ok()) << out.status();
    if (!out.ok()) return -1;
    const float* y = (*out)[0].data_as<float>();
    for (int i = 1; i < 2 * kWidth; ++i) EXPECT_EQ(y[i], y[0]);
    return y[0];
  }

  std::unique_ptr<JitEngine> engine_;
  std::unique_ptr<LoadedModel> model_;
  std::string k0_, k1_;
};

TEST_F(PatchTest, IrPatchTakesEffectOnCommitAndRollbackRestores) {
  EXPECT_EQ(RunOnce(), 11.0f);
  auto patch = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 2.0f), {k1_});
  ASSERT_TRUE(patch.ok()) << patch.status();
  EXPECT_EQ(RunOnce(patch->get()), 22.0f);  // The validation run sees the patch...
  EXPECT_EQ(RunOnce(), 11.0f);              // ...executions do not, before the commit.
  auto id = model_->patches().CommitPatch(*patch, "tester");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(RunOnce(), 22.0f);
  // The raw entry point follows the published table too.
  HostTensor x(DType::kFloat32, {1, kWidth});
  std::memset(x.data(), 0, x.byte_size());
  HostTensor y(DType::kFloat32, {1, kWidth});
  const void* in[] = {x.data()};
  void* out[] = {y.data()};
  std::vector<uint8_t> arena(model_->model().arena.BytesFor(1) + 64);
  ASSERT_EQ(model_->entry()(in, out, 1, arena.data(), nullptr), 0);
  EXPECT_EQ(y.data_as<float>()[0], 22.0f);

  std::vector<PatchRecord> patches = model_->patches().Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].id, *id);
  EXPECT_EQ(patches[0].kind, "ir");
  EXPECT_EQ(patches[0].author, "tester");
  EXPECT_EQ(patches[0].functions, std::vector<std::string>{k1_});
  EXPECT_TRUE(patches[0].active);
  EXPECT_GT(patches[0].unix_ms, 0);

  ASSERT_TRUE(model_->patches().Rollback(*id).ok());
  EXPECT_EQ(RunOnce(), 11.0f);
  ASSERT_EQ(model_->entry()(in, out, 1, arena.data(), nullptr), 0);
  EXPECT_EQ(y.data_as<float>()[0], 11.0f);
  patches = model_->patches().Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_FALSE(patches[0].active);
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->patches().Rollback(*id)));
  EXPECT_TRUE(absl::IsNotFound(model_->patches().Rollback(*id + 1000)));
}

TEST_F(PatchTest, StackedPatchesRollBackInOrder) {
  auto p1 = model_->patches().PrepareIrPatch(ScaledAddIr(k0_, 2.0f), {});
  ASSERT_TRUE(p1.ok()) << p1.status();
  auto id1 = model_->patches().CommitPatch(*p1, "a");
  ASSERT_TRUE(id1.ok());
  EXPECT_EQ(RunOnce(), 12.0f);  // 2*(0+1) + 10
  auto p2 = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 3.0f), {});
  ASSERT_TRUE(p2.ok());
  // A patch prepared against an older table cannot be committed over a newer one.
  auto stale = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 5.0f), {});
  ASSERT_TRUE(stale.ok());
  auto id2 = model_->patches().CommitPatch(*p2, "b");
  ASSERT_TRUE(id2.ok());
  EXPECT_EQ(RunOnce(), 36.0f);  // 3*(2 + 10)
  EXPECT_TRUE(absl::IsAborted(model_->patches().CommitPatch(*stale, "c").status()));
  ASSERT_TRUE(model_->patches().Rollback(*id2).ok());
  EXPECT_EQ(RunOnce(), 12.0f);
  ASSERT_TRUE(model_->patches().Rollback(*id1).ok());
  EXPECT_EQ(RunOnce(), 11.0f);
}

TEST_F(PatchTest, BadPatchesAreRefusedAndChangeNothing) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"syntax error", "define i32 @" + k0_ + "(ptr %args, i64 %batch) { ret i32 }"},
      {"wrong signature", "define i32 @" + k0_ + "(ptr %args) { ret i32 0 }"},
      {"wrong return type", "define void @" + k0_ + "(ptr %args, i64 %b) { ret void }"},
      {"unknown kernel", "define i32 @no_such_kernel(ptr %a, i64 %b) { ret i32 0 }"},
      {"invalid module", "define i32 @" + k0_ + "(ptr %a, i64 %b) {\n  br label %x\n}"},
      {"undefined symbol",
       "declare void @cuvil_not_a_symbol()\ndefine i32 @" + k0_ +
           "(ptr %a, i64 %b) {\n  call void @cuvil_not_a_symbol()\n  ret i32 0\n}"},
  };
  for (const auto& [what, ir] : bad) {
    SCOPED_TRACE(what);
    auto patch = model_->patches().PrepareIrPatch(ir, {});
    EXPECT_FALSE(patch.ok());
    EXPECT_TRUE(absl::IsInvalidArgument(patch.status())) << patch.status();
    EXPECT_EQ(RunOnce(), 11.0f);
  }
  // The request must name exactly the kernels the IR defines.
  auto mismatch = model_->patches().PrepareIrPatch(ScaledAddIr(k0_, 2.0f), {k1_});
  EXPECT_TRUE(absl::IsInvalidArgument(mismatch.status())) << mismatch.status();
  EXPECT_TRUE(model_->patches().Patches().empty());
  EXPECT_EQ(RunOnce(), 11.0f);
}

// Executions run continuously on 3 threads while 50 patch + rollback cycles switch both kernels
// at once: no execution fails and none mixes old and new kernels (11 before, 24 after; a mixed
// table would give 12 or 22).
TEST_F(PatchTest, ExecutionsInFlightNeverSeeAMixedTable) {
  const std::string patch_ir = ScaledAddIr(k0_, 2.0f) + ScaledAddIr(k1_, 2.0f);
  std::atomic<bool> stop{false};
  std::atomic<int64_t> runs{0}, failures{0}, mixed{0}, patched_seen{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 3; ++t) {
    workers.emplace_back([&] {
      HostTensor x(DType::kFloat32, {4, kWidth});
      std::memset(x.data(), 0, x.byte_size());
      HostTensor y(DType::kFloat32, {4, kWidth});
      std::vector<uint8_t> arena(model_->model().arena.BytesFor(4) + 64);
      const void* in[] = {x.data()};
      void* out[] = {y.data()};
      while (!stop.load(std::memory_order_relaxed)) {
        if (model_->Execute(in, out, 4, arena.data()) != 0) {
          failures.fetch_add(1);
          continue;
        }
        const float* v = y.data_as<float>();
        for (int i = 0; i < 4 * kWidth; ++i) {
          if (v[i] != 11.0f && v[i] != 24.0f) {
            mixed.fetch_add(1);
            break;
          }
          if (v[i] != v[0]) {
            mixed.fetch_add(1);
            break;
          }
        }
        if (v[0] == 24.0f) patched_seen.fetch_add(1);
        runs.fetch_add(1);
      }
    });
  }
  std::vector<double> switch_us;
  for (int cycle = 0; cycle < 50; ++cycle) {
    auto patch = model_->patches().PrepareIrPatch(patch_ir, {k0_, k1_});
    ASSERT_TRUE(patch.ok()) << patch.status();
    auto t0 = std::chrono::steady_clock::now();
    auto id = model_->patches().CommitPatch(*patch, "cycle");
    switch_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    ASSERT_TRUE(id.ok()) << id.status();
    EXPECT_EQ(RunOnce(), 24.0f);  // Every execution after the switch sees the patch.
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ASSERT_TRUE(model_->patches().Rollback(*id).ok());
    EXPECT_EQ(RunOnce(), 11.0f);  // And none after the rollback does.
  }
  stop = true;
  for (auto& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mixed.load(), 0);
  EXPECT_GT(runs.load(), 0);
  EXPECT_EQ(model_->patches().Patches().size(), 50u);
  std::sort(switch_us.begin(), switch_us.end());
  std::printf("patch switch (commit) p50=%.1fus p99=%.1fus; %lld executions, %lld patched\n",
              switch_us[switch_us.size() / 2], switch_us[switch_us.size() * 99 / 100],
              static_cast<long long>(runs.load()), static_cast<long long>(patched_seen.load()));
}

// Any active patch can be rolled back: the table is rebuilt from the base and the other layers.
TEST_F(PatchTest, RollbackOfAMiddlePatchKeepsTheOthers) {
  auto p1 = model_->patches().PrepareIrPatch(ScaledAddIr(k0_, 2.0f), {});
  ASSERT_TRUE(p1.ok()) << p1.status();
  auto id1 = model_->patches().CommitPatch(*p1, "a");
  ASSERT_TRUE(id1.ok());
  auto p2 = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 3.0f), {});
  ASSERT_TRUE(p2.ok()) << p2.status();
  auto id2 = model_->patches().CommitPatch(*p2, "b");
  ASSERT_TRUE(id2.ok());
  auto p3 = model_->patches().PrepareIrPatch(ScaledAddIr(k0_, 5.0f), {});
  ASSERT_TRUE(p3.ok()) << p3.status();
  auto id3 = model_->patches().CommitPatch(*p3, "c");
  ASSERT_TRUE(id3.ok());
  EXPECT_EQ(RunOnce(), 45.0f);  // 3 * (5*(0+1) + 10)
  ASSERT_TRUE(model_->patches().Rollback(*id2).ok());
  EXPECT_EQ(RunOnce(), 15.0f);  // 5*1 + 10: k0 from patch 3, k1 back to the base.
  ASSERT_TRUE(model_->patches().Rollback(*id3).ok());
  EXPECT_EQ(RunOnce(), 12.0f);  // Patch 1 is what remains.
  ASSERT_TRUE(model_->patches().Rollback(*id1).ok());
  EXPECT_EQ(RunOnce(), 11.0f);
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->patches().Rollback(*id2)));
  std::vector<PatchRecord> patches = model_->patches().Patches();
  ASSERT_EQ(patches.size(), 3u);
  for (const PatchRecord& r : patches) EXPECT_FALSE(r.active);
}

TEST_F(PatchTest, TryRollbackRunsTheTablesAMiddleRollbackWouldPublishAndReplace) {
  PatchCheck checked;
  checked.validated = true;
  checked.rtol = 1e-3;
  auto p1 = model_->patches().PrepareIrPatch(ScaledAddIr(k0_, 2.0f), {});
  ASSERT_TRUE(p1.ok()) << p1.status();
  auto id1 = model_->patches().CommitPatch(*p1, "a");
  ASSERT_TRUE(id1.ok());
  auto p2 = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 3.0f), {});
  ASSERT_TRUE(p2.ok()) << p2.status();
  auto id2 = model_->patches().CommitPatch(*p2, "b", checked);
  ASSERT_TRUE(id2.ok());
  EXPECT_EQ(RunOnce(), 36.0f);  // 3 * (2*(0+1) + 10)
  // Nothing above the top patch: the trial names no patch above it.
  auto top = model_->patches().TryRollback(*id2);
  ASSERT_TRUE(top.ok()) << top.status();
  EXPECT_TRUE(top->above.empty());
  EXPECT_EQ(RunOnce(top->without.get()), 12.0f);
  auto trial = model_->patches().TryRollback(*id1);
  ASSERT_TRUE(trial.ok()) << trial.status();
  ASSERT_EQ(trial->above.size(), 1u);
  EXPECT_EQ(trial->above[0].id, *id2);
  EXPECT_TRUE(trial->above[0].check.validated);     // CommitPatch's check is kept.
  EXPECT_EQ(RunOnce(trial->without.get()), 33.0f);  // 3 * (1 + 10): patch 2 alone.
  EXPECT_EQ(RunOnce(trial->before.get()), 11.0f);   // The table before patch 1.
  EXPECT_EQ(RunOnce(), 36.0f);                      // Trials publish nothing.
  // A commit after the trial: its tables are stale and the rollback with it refuses.
  auto p3 = model_->patches().PrepareIrPatch(ScaledAddIr(k0_, 5.0f), {});
  ASSERT_TRUE(p3.ok()) << p3.status();
  ASSERT_TRUE(model_->patches().CommitPatch(*p3, "c").ok());
  HostTensor x(DType::kFloat32, {2, kWidth});
  std::memset(x.data(), 0, x.byte_size());
  EXPECT_TRUE(absl::IsAborted(model_->RunWith(trial->without.get(), {x}).status()));
  EXPECT_TRUE(absl::IsAborted(model_->patches().Rollback(*id1, 10, &*trial)));
  EXPECT_EQ(RunOnce(), 45.0f);  // Unchanged: 3 * (5 + 10).
  auto again = model_->patches().TryRollback(*id1);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->above.size(), 2u);
  ASSERT_TRUE(model_->patches().Rollback(*id1, 10, &*again).ok());
  EXPECT_EQ(RunOnce(), 45.0f);  // Patch 1 was masked by patch 3 on k0.
  EXPECT_TRUE(absl::IsNotFound(model_->patches().TryRollback(999).status()));
}

TEST_F(PatchTest, RecompilePatchSwapsInOtherCodeWithTheSameResults) {
  auto recompiled = CompileOnnxBytes(TwoAdds(1.0f, 10.0f), OptLevel(0));
  ASSERT_TRUE(recompiled.ok()) << recompiled.status();
  auto patch = model_->patches().PrepareRecompilePatch(*recompiled, {k1_}, "opt_level=0");
  ASSERT_TRUE(patch.ok()) << patch.status();
  EXPECT_EQ(RunOnce(patch->get()), 11.0f);
  auto id = model_->patches().CommitPatch(*patch, "tier");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(RunOnce(), 11.0f);
  std::vector<PatchRecord> patches = model_->patches().Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].kind, kPatchKindRecompile);
  EXPECT_EQ(patches[0].source, "opt_level=0");
  EXPECT_EQ(patches[0].functions, std::vector<std::string>{k1_});
  ASSERT_TRUE(model_->patches().Rollback(*id).ok());
  EXPECT_EQ(RunOnce(), 11.0f);

  // Another model (other weights) and unknown kernels are refused.
  auto other = CompileOnnxBytes(TwoAdds(2.0f, 10.0f));
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(
      absl::IsInvalidArgument(model_->patches().PrepareRecompilePatch(*other, {}, "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      model_->patches().PrepareRecompilePatch(*recompiled, {"nope"}, "").status()));
  auto opts = ParseRecompileOptions("opt_level=1");
  ASSERT_TRUE(opts.ok());
  EXPECT_EQ(opts->opt_level, 1);
  EXPECT_EQ(RecompileOptionsText(*opts), "opt_level=1");
  EXPECT_FALSE(ParseRecompileOptions("opt_level=7").ok());
  EXPECT_FALSE(ParseRecompileOptions("unroll=4").ok());
}

TEST_F(PatchTest, ProfilePatchCountsKernelsAndRollsBackByItself) {
  auto patch = model_->patches().PrepareProfilePatch(0.3, {});
  ASSERT_TRUE(patch.ok()) << patch.status();
  auto id = model_->patches().CommitPatch(*patch, "prof");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->patches().PrepareProfilePatch(1, {}).status()));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(RunOnce(), 11.0f);
  auto live = model_->patches().ProfileReport(*id);
  ASSERT_TRUE(live.ok()) << live.status();
  ASSERT_EQ(live->size(), 2u);
  EXPECT_TRUE(model_->patches().WaitForProfileEnd(*id, 10));
  EXPECT_EQ(RunOnce(), 11.0f);  // Unwrapped again: no more counts.
  auto report = model_->patches().ProfileReport(*id);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->size(), 2u);
  double share = 0;
  for (const KernelProfile& k : *report) {
    EXPECT_EQ(k.calls, 10u) << k.function;
    EXPECT_GT(k.total_ns, 0u);
    EXPECT_GT(k.mean_ns, 0);
    share += k.share;
  }
  EXPECT_NEAR(share, 1.0, 1e-9);
  std::vector<PatchRecord> patches = model_->patches().Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].kind, kPatchKindProfile);
  EXPECT_FALSE(patches[0].active);
  EXPECT_EQ(patches[0].profile.size(), 2u);
}

// The automatic rollback is reported to the listener (once, before WaitForProfileEnd returns);
// a profile rolled back by hand first is not.
TEST_F(PatchTest, AutomaticRollbackIsReportedToItsListener) {
  absl::Mutex mu;
  std::vector<std::pair<uint64_t, absl::Status>> reported;
  model_->patches().set_auto_rollback_listener(
      [&](uint64_t id, const absl::Status& status, std::chrono::steady_clock::time_point started) {
        EXPECT_LE(started, std::chrono::steady_clock::now());
        absl::MutexLock lock(&mu);
        reported.emplace_back(id, status);
      });
  auto patch = model_->patches().PrepareProfilePatch(0.1, {});
  ASSERT_TRUE(patch.ok()) << patch.status();
  auto id = model_->patches().CommitPatch(*patch, "prof");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(RunOnce(), 11.0f);
  ASSERT_TRUE(model_->patches().WaitForProfileEnd(*id, 10));
  {
    absl::MutexLock lock(&mu);
    ASSERT_EQ(reported.size(), 1u);
    EXPECT_EQ(reported[0].first, *id);
    EXPECT_TRUE(reported[0].second.ok()) << reported[0].second;
  }
  auto by_hand = model_->patches().PrepareProfilePatch(0.2, {});
  ASSERT_TRUE(by_hand.ok()) << by_hand.status();
  auto hand_id = model_->patches().CommitPatch(*by_hand, "prof");
  ASSERT_TRUE(hand_id.ok()) << hand_id.status();
  ASSERT_TRUE(model_->patches().Rollback(*hand_id).ok());
  absl::SleepFor(absl::Milliseconds(400));  // Past its window.
  absl::MutexLock lock(&mu);
  EXPECT_EQ(reported.size(), 1u);
}

// A profile above a patch wraps its code: that patch cannot be rolled back under it.
TEST_F(PatchTest, ProfileAboveAPatchBlocksItsRollbackUntilItEnds) {
  auto p1 = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 2.0f), {});
  ASSERT_TRUE(p1.ok());
  auto id1 = model_->patches().CommitPatch(*p1, "a");
  ASSERT_TRUE(id1.ok());
  auto prof = model_->patches().PrepareProfilePatch(0, {k1_});
  ASSERT_TRUE(prof.ok()) << prof.status();
  auto pid = model_->patches().CommitPatch(*prof, "p");
  ASSERT_TRUE(pid.ok());
  EXPECT_EQ(RunOnce(), 22.0f);
  EXPECT_TRUE(absl::IsFailedPrecondition(model_->patches().Rollback(*id1)));
  auto report = model_->patches().ProfileReport(*pid);
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->size(), 1u);
  EXPECT_EQ((*report)[0].function, k1_);
  EXPECT_EQ((*report)[0].calls, 1u);
  ASSERT_TRUE(model_->patches().Rollback(*pid).ok());
  ASSERT_TRUE(model_->patches().Rollback(*id1).ok());
  EXPECT_EQ(RunOnce(), 11.0f);
}

// Executions run while IR, recompile and profile patches are committed and rolled back in any
// order (the TSan target for the swap and reclamation code).
TEST_F(PatchTest, AllPatchKindsUnderConcurrentExecutions) {
  auto recompiled = CompileOnnxBytes(TwoAdds(1.0f, 10.0f), OptLevel(1));
  ASSERT_TRUE(recompiled.ok());
  std::atomic<bool> stop{false};
  std::atomic<int64_t> bad{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; ++t) {
    workers.emplace_back([&] {
      HostTensor x(DType::kFloat32, {2, kWidth});
      std::memset(x.data(), 0, x.byte_size());
      HostTensor y(DType::kFloat32, {2, kWidth});
      std::vector<uint8_t> arena(model_->model().arena.BytesFor(2) + 64);
      const void* in[] = {x.data()};
      void* out[] = {y.data()};
      while (!stop.load(std::memory_order_relaxed)) {
        if (model_->Execute(in, out, 2, arena.data()) != 0) bad.fetch_add(1);
        const float v = y.data_as<float>()[0];
        if (v != 11.0f && v != 22.0f) bad.fetch_add(1);
      }
    });
  }
  // A failed assertion below returns early: the workers must still stop and be joined.
  absl::Cleanup join = [&] {
    stop = true;
    for (auto& w : workers) w.join();
  };
  for (int cycle = 0; cycle < 10; ++cycle) {
    auto ir = model_->patches().PrepareIrPatch(ScaledAddIr(k1_, 2.0f), {});
    ASSERT_TRUE(ir.ok()) << ir.status();
    auto ir_id = model_->patches().CommitPatch(*ir, "ir");
    ASSERT_TRUE(ir_id.ok());
    auto re = model_->patches().PrepareRecompilePatch(*recompiled, {k0_}, "opt_level=1");
    ASSERT_TRUE(re.ok()) << re.status();
    auto re_id = model_->patches().CommitPatch(*re, "re");
    ASSERT_TRUE(re_id.ok());
    auto prof = model_->patches().PrepareProfilePatch(0.005, {});
    ASSERT_TRUE(prof.ok()) << prof.status();
    auto prof_id = model_->patches().CommitPatch(*prof, "prof");
    ASSERT_TRUE(prof_id.ok());
    EXPECT_TRUE(model_->patches().WaitForProfileEnd(*prof_id, 10));
    ASSERT_TRUE(model_->patches().Rollback(*ir_id).ok());  // The middle one first.
    ASSERT_TRUE(model_->patches().Rollback(*re_id).ok());
    auto report = model_->patches().ProfileReport(*prof_id);
    ASSERT_TRUE(report.ok());
  }
  std::move(join).Invoke();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(RunOnce(), 11.0f);
}

// The kernels of an If's branches have slots of their own: listed after the If with it as parent,
// patched and rolled back like the graph's own kernels, and run from the execution's table.
TEST(SubgraphPatchTest, BranchKernelsArePatchableAndProfiledInsideTheirParent) {
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok()) << engine.status();
  auto compiled = CompileOnnxBytes(testing::IfOfTwoAdds(kWidth, 1.0f, 10.0f));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  auto loaded = (*engine)->Load("if/1", std::move(*compiled));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  LoadedModel& model = **loaded;
  const std::vector<KernelFunction>& kernels = model.model().kernels;
  ASSERT_EQ(kernels.size(), 3u);
  EXPECT_EQ(kernels[0].op_type, "If");
  EXPECT_EQ(kernels[0].parent, -1);
  std::string then_add, else_add;
  for (size_t i = 1; i < kernels.size(); ++i) {
    EXPECT_EQ(kernels[i].index, static_cast<int>(i));
    EXPECT_EQ(kernels[i].op_type, "Add");
    EXPECT_EQ(kernels[i].parent, 0) << kernels[i].symbol;
    (kernels[i].symbol.find("then") != std::string::npos ? then_add : else_add) = kernels[i].symbol;
  }
  ASSERT_FALSE(then_add.empty());
  ASSERT_FALSE(else_add.empty());

  auto run = [&](bool cond, const PreparedPatch* patch = nullptr) -> float {
    HostTensor x(DType::kFloat32, {2, kWidth});
    std::memset(x.data(), 0, x.byte_size());
    HostTensor c(DType::kBool, {});
    c.data()[0] = cond ? 1 : 0;
    auto out = model.RunWith(patch, {x, c});
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? (*out)[0].data_as<float>()[2 * kWidth - 1] : -1;
  };
  EXPECT_EQ(run(true), 1.0f);
  EXPECT_EQ(run(false), 10.0f);

  auto patch =
      model.patches().PrepareIrPatch(testing::ScaledAddIr(then_add, kWidth, 3.0f), {then_add});
  ASSERT_TRUE(patch.ok()) << patch.status();
  EXPECT_EQ(run(true, patch->get()), 3.0f);  // The validation run takes the patched branch...
  EXPECT_EQ(run(true), 1.0f);                // ...executions only after the commit.
  auto id = model.patches().CommitPatch(*patch, "tester");
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(run(true), 3.0f);
  EXPECT_EQ(run(false), 10.0f);  // The other branch keeps its code.

  // A profile by default times the kernels cuvil_entry calls: the If, not its branches again.
  auto profile = model.patches().PrepareProfilePatch(0, {});
  ASSERT_TRUE(profile.ok()) << profile.status();
  auto profile_id = model.patches().CommitPatch(*profile, "prof");
  ASSERT_TRUE(profile_id.ok()) << profile_id.status();
  EXPECT_EQ(run(true), 3.0f);  // The wrapper calls the patched branch code.
  auto report = model.patches().ProfileReport(*profile_id);
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(report->size(), 1u);
  EXPECT_EQ((*report)[0].function, kernels[0].symbol);
  EXPECT_EQ((*report)[0].calls, 1u);
  ASSERT_TRUE(model.patches().Rollback(*profile_id).ok());
  // Named, a branch kernel is profiled too.
  auto named = model.patches().PrepareProfilePatch(0, {else_add});
  ASSERT_TRUE(named.ok()) << named.status();
  auto named_id = model.patches().CommitPatch(*named, "prof");
  ASSERT_TRUE(named_id.ok()) << named_id.status();
  EXPECT_EQ(run(false), 10.0f);
  EXPECT_EQ(run(true), 3.0f);
  auto named_report = model.patches().ProfileReport(*named_id);
  ASSERT_TRUE(named_report.ok()) << named_report.status();
  ASSERT_EQ(named_report->size(), 1u);
  EXPECT_EQ((*named_report)[0].calls, 1u);
  ASSERT_TRUE(model.patches().Rollback(*named_id).ok());

  ASSERT_TRUE(model.patches().Rollback(*id).ok());
  EXPECT_EQ(run(true), 1.0f);
  EXPECT_EQ(run(false), 10.0f);
}

}  // namespace
}  // namespace cuvil
