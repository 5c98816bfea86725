// The snapshot folder's files, and fault injection under them: every write of a snapshot file
// (temporary, data, sync, close, rename) fails in turn with ENOSPC, EIO and a torn write that
// crashes the process. The write says what failed, the version keeps serving, and the next
// process reads the previous artifact or none, never a partial one.
#include "cuvil/jitcache/snapshot_files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/code_source.h"
#include "cuvil/jitcache/fault_injection_env.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/snapshot.h"
#include "gtest/gtest.h"
#include "patch_test_models.h"

namespace cuvil {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kWidth = 4;

class SnapshotFileFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           absl::StrCat("cuvil_snapshot_files_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok()) << engine.status();
    engine_ = std::move(*engine);
    const std::string bytes =
        testing::TwoBinaryOps("mul_add", kWidth, "Mul", 3.0f, "Add", 1.0f);  // y = 3x + 1
    auto compiled = CompileOnnxBytes(bytes);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    auto loaded = engine_->Load("mul_add/1", std::move(*compiled));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    model_ = std::move(*loaded);
    CodeSource source;
    source.onnx_bytes = bytes;
    model_->set_source(std::make_shared<const CodeSource>(source));
    auto old_artifact = EncodeSnapshot(*model_, "mul_add", 1, "name: \"mul_add\" # old");
    ASSERT_TRUE(old_artifact.ok()) << old_artifact.status();
    old_ = *std::move(old_artifact);
    auto new_artifact = EncodeSnapshot(*model_, "mul_add", 1, "name: \"mul_add\" # new");
    ASSERT_TRUE(new_artifact.ok()) << new_artifact.status();
    new_ = *std::move(new_artifact);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // The version still computes y = 3x + 1.
  void StillServes() {
    HostTensor x(DType::kFloat32, {2, kWidth});
    for (int i = 0; i < 2 * kWidth; ++i) x.data_as<float>()[i] = static_cast<float>(i);
    auto out = model_->Run({x});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 2 * kWidth; ++i) {
      EXPECT_EQ((*out)[0].data_as<float>()[i], 3.0f * static_cast<float>(i) + 1.0f);
    }
  }

  // What the next process restores from the folder (the real Env): the config text of each
  // snapshot file, which must decode.
  std::vector<std::string> Restore(const std::string& context) {
    std::vector<std::string> configs;
    auto paths = ListSnapshotFiles(*Env::Default(), dir_.string());
    EXPECT_TRUE(paths.ok()) << paths.status();
    if (!paths.ok()) return configs;
    for (const std::string& path : *paths) {
      auto bytes = ReadSnapshotFile(*Env::Default(), path, kDefaultMaxSnapshotBytes);
      EXPECT_TRUE(bytes.ok()) << context << ": " << bytes.status();
      if (!bytes.ok()) continue;
      auto snapshot = DecodeSnapshot(*bytes);
      EXPECT_TRUE(snapshot.ok()) << context << ": a partial snapshot: " << snapshot.status();
      if (snapshot.ok()) configs.push_back(snapshot->config_text);
    }
    return configs;
  }

  std::string Path() const { return (dir_ / "mul_add.1.cuvilsnap").string(); }

  fs::path dir_;
  std::unique_ptr<JitEngine> engine_;
  std::unique_ptr<LoadedModel> model_;
  std::string old_;
  std::string new_;
};

TEST_F(SnapshotFileFaultTest, WritesReadsAndListsOnlySnapshotFiles) {
  ASSERT_TRUE(WriteSnapshotFile(*Env::Default(), Path(), old_).ok());
  EXPECT_EQ(fs::status(Path()).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  std::ofstream(dir_ / "notes.txt") << "not a snapshot";
  fs::create_symlink(Path(), dir_ / "link.cuvilsnap");
  auto paths = ListSnapshotFiles(*Env::Default(), dir_.string());
  ASSERT_TRUE(paths.ok()) << paths.status();
  EXPECT_EQ(*paths, std::vector<std::string>{Path()});
  auto bytes = ReadSnapshotFile(*Env::Default(), Path(), kDefaultMaxSnapshotBytes);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(*bytes, old_);
  EXPECT_TRUE(absl::IsResourceExhausted(
      ReadSnapshotFile(*Env::Default(), Path(), old_.size() - 1).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      ReadSnapshotFile(*Env::Default(), (dir_ / "link.cuvilsnap").string(), 1 << 30).status()));
  // A temporary left by a crashed writer of the same pid is replaced.
  std::ofstream(Path() + ".tmp." + std::to_string(getpid())) << "stale";
  ASSERT_TRUE(WriteSnapshotFile(*Env::Default(), Path(), new_).ok());
  EXPECT_EQ(Restore("rewrite"), std::vector<std::string>{"name: \"mul_add\" # new"});
}

// The writes of a clean snapshot write, enumerated, then each failed in turn with each fault,
// over an existing artifact and into an empty folder.
TEST_F(SnapshotFileFaultTest, EveryWriteOfASnapshotFailsCleanly) {
  FaultInjectionEnv counting;
  counting.FailWrite(0, WriteFault::kNone);
  ASSERT_TRUE(WriteSnapshotFile(counting, Path(), new_).ok());
  const std::vector<std::string> writes = counting.write_log();
  ASSERT_EQ(writes.size(), 6u);  // create, write, truncate, sync, close, rename.
  EXPECT_EQ(writes[3].rfind("sync ", 0), 0u);
  EXPECT_EQ(writes[5].rfind("rename ", 0), 0u);
  for (WriteFault fault : {WriteFault::kNoSpace, WriteFault::kIoError, WriteFault::kTornWrite}) {
    for (bool over_old : {true, false}) {
      for (size_t n = 1; n <= writes.size(); ++n) {
        const std::string context =
            absl::StrCat(WriteFaultName(fault), " at write ", n, " (", writes[n - 1],
                         over_old ? ") over an artifact" : ")");
        SCOPED_TRACE(context);
        fs::remove_all(dir_);
        fs::create_directories(dir_);
        if (over_old) {
          ASSERT_TRUE(WriteSnapshotFile(*Env::Default(), Path(), old_).ok());
        }
        FaultInjectionEnv env;
        env.FailWrite(n, fault);
        absl::Status s = WriteSnapshotFile(env, Path(), new_);
        EXPECT_TRUE(env.fired());
        // Every write before the rename: the call fails, saying what and why.
        ASSERT_FALSE(s.ok());
        EXPECT_NE(s.message().find("cannot write snapshot " + Path()), std::string::npos) << s;
        EXPECT_NE(s.message().find(fault == WriteFault::kNoSpace ? "No space left on device"
                                                                 : "Input/output error"),
                  std::string::npos)
            << s;
        if (fault == WriteFault::kNoSpace) {
          EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
        }
        StillServes();
        // The next process: the old artifact, or nothing; never the new one half written.
        EXPECT_EQ(Restore(context), over_old ? std::vector<std::string>{"name: \"mul_add\" # old"}
                                             : std::vector<std::string>{});
        // Only a crash leaves the temporary behind; it is never taken for a snapshot, and when
        // it holds a torn write it does not decode even under the artifact's name.
        const std::string tmp = Path() + ".tmp." + std::to_string(getpid());
        EXPECT_EQ(fs::exists(tmp), fault == WriteFault::kTornWrite && n > 1);
        if (fs::exists(tmp) && writes[n - 1].rfind("write ", 0) == 0) {
          std::ifstream in(tmp, std::ios::binary);
          const std::string torn((std::istreambuf_iterator<char>(in)),
                                 std::istreambuf_iterator<char>());
          EXPECT_LT(torn.size(), new_.size());
          EXPECT_FALSE(DecodeSnapshot(torn).ok());
        }
        // The next write (same pid, real Env) replaces the temporary and succeeds.
        ASSERT_TRUE(WriteSnapshotFile(*Env::Default(), Path(), new_).ok());
        EXPECT_EQ(Restore(context), std::vector<std::string>{"name: \"mul_add\" # new"});
        EXPECT_FALSE(fs::exists(tmp));
      }
    }
  }
}

}  // namespace
}  // namespace cuvil
