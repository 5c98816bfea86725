// The file-system seam: the POSIX Env and the atomic write, and the fault-injecting Env's count,
// errors and torn writes.
#include "cuvil/jitcache/env.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cuvil/jitcache/fault_injection_env.h"
#include "gtest/gtest.h"
#include "test_dirs.h"

namespace cuvil {
namespace {
namespace fs = std::filesystem;

class EnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::FreshTestDir("cuvil_env_test");
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string P(const std::string& name) const { return (dir_ / name).string(); }
  static std::string Slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }
  fs::path dir_;
};

TEST_F(EnvTest, AtomicWritePlacesPiecesZeroFillsAndMaps) {
  Env& env = *Env::Default();
  AtomicWriteOptions options;
  options.map = true;
  auto mapped = WriteFileAtomically(env, P("f"), {{0, "ab"}, {6, "cd"}}, 10, options);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  ASSERT_NE(*mapped, nullptr);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*mapped)->data()), (*mapped)->size()),
            std::string("ab\0\0\0\0cd\0\0", 10));
  EXPECT_EQ(Slurp(P("f")), std::string("ab\0\0\0\0cd\0\0", 10));
  EXPECT_FALSE(fs::exists(P("f.tmp")));
  struct stat st;
  ASSERT_EQ(stat(P("f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  auto file = env.NewRandomAccessFile(P("f"));
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE((*file)->is_regular());
  EXPECT_EQ((*file)->size(), 10u);
  char buf[2];
  ASSERT_TRUE((*file)->Read(6, 2, buf).ok());
  EXPECT_EQ(std::string(buf, 2), "cd");
  EXPECT_TRUE(absl::IsOutOfRange((*file)->Read(9, 2, buf)));
}

TEST_F(EnvTest, AtomicWriteRefusesOrReplacesAStaleTemporary) {
  Env& env = *Env::Default();
  std::ofstream(P("f.tmp")) << "stale";
  AtomicWriteOptions options;
  EXPECT_TRUE(absl::IsAlreadyExists(WriteFileAtomically(env, P("f"), {{0, "x"}}, 1).status()));
  EXPECT_FALSE(fs::exists(P("f")));
  options.replace_stale_temp = true;
  ASSERT_TRUE(WriteFileAtomically(env, P("f"), {{0, "x"}}, 1, options).ok());
  EXPECT_EQ(Slurp(P("f")), "x");
}

TEST_F(EnvTest, NoCallFollowsASymlink) {
  Env& env = *Env::Default();
  std::ofstream(P("target")) << "t";
  fs::create_symlink(P("target"), P("link"));
  EXPECT_TRUE(absl::IsFailedPrecondition(env.NewRandomAccessFile(P("link")).status()));
  EXPECT_TRUE(absl::IsNotFound(env.NewRandomAccessFile(P("missing")).status()));
  EXPECT_TRUE(absl::IsAlreadyExists(env.NewWritableFile(P("link")).status()));
  EXPECT_FALSE(env.TouchFile(P("link")).ok());
  auto listed = env.ListDir(dir_.string());
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  for (const DirEntry& e : *listed) EXPECT_EQ(e.regular, e.name == "target") << e.name;
  EXPECT_TRUE(env.TouchFile(P("marker")).ok());
  EXPECT_TRUE(env.FileExists(P("marker")));
  EXPECT_TRUE(env.SetModifiedNow(P("marker")).ok());
  EXPECT_TRUE(env.RemoveFile(P("marker")).ok());
  EXPECT_TRUE(absl::IsNotFound(env.RemoveFile(P("marker"))));
  auto lock = env.LockFile(P("lock"));
  ASSERT_TRUE(lock.ok()) << lock.status();
}

TEST_F(EnvTest, FaultInjectionFailsTheNthWriteAndChangesNothing) {
  FaultInjectionEnv env;
  env.FailWrite(0, WriteFault::kNone);
  ASSERT_TRUE(WriteFileAtomically(env, P("f"), {{0, "abcd"}}, 4).ok());
  EXPECT_EQ(env.writes(), 6u);  // create, write, truncate, sync, close, rename.
  EXPECT_FALSE(env.fired());
  for (uint64_t n = 1; n <= 6; ++n) {
    env.FailWrite(n, WriteFault::kNoSpace);
    absl::Status s = WriteFileAtomically(env, P("g"), {{0, "abcd"}}, 4).status();
    EXPECT_TRUE(absl::IsResourceExhausted(s)) << n << ": " << s;
    EXPECT_TRUE(env.fired());
    EXPECT_FALSE(env.crashed());
    EXPECT_FALSE(fs::exists(P("g"))) << n;
    EXPECT_FALSE(fs::exists(P("g.tmp"))) << n;
  }
  env.FailWrite(2, WriteFault::kIoError);
  absl::Status s = WriteFileAtomically(env, P("f"), {{0, "wxyz"}}, 4).status();
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_NE(s.message().find("Input/output error"), std::string::npos) << s;
  EXPECT_EQ(Slurp(P("f")), "abcd");
}

TEST_F(EnvTest, ATornWriteLeavesAPrefixAndCrashes) {
  FaultInjectionEnv env;
  env.FailWrite(2, WriteFault::kTornWrite);
  EXPECT_FALSE(WriteFileAtomically(env, P("f"), {{0, "abcdefgh"}}, 8).ok());
  EXPECT_TRUE(env.crashed());
  EXPECT_FALSE(fs::exists(P("f")));
  EXPECT_EQ(Slurp(P("f.tmp")), "abcd");  // Not cleaned up: the process "died".
  EXPECT_FALSE(env.TouchFile(P("x")).ok());
  EXPECT_FALSE(env.NewRandomAccessFile(P("f.tmp")).ok());
  EXPECT_FALSE(env.ListDir(dir_.string()).ok());
  EXPECT_FALSE(env.FileExists(P("f.tmp")));
  EXPECT_EQ(env.write_log().size(), 2u);
}

}  // namespace
}  // namespace cuvil
