#include "cuvil/compiler/external_data.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ExternalDataFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("cuvil_external_data_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "model" / "sub");
    std::ofstream(root_ / "model" / "w.bin", std::ios::binary) << "0123456789";
    std::ofstream(root_ / "outside.bin", std::ios::binary) << "secret";
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string Dir() const { return (root_ / "model").string(); }
  fs::path root_;
};

TEST_F(ExternalDataFileTest, OpensARegularFileInsideTheFolder) {
  auto f = OpenExternalDataFile(Dir(), "w.bin");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->size(), 10u);
  char buf[4];
  ASSERT_TRUE(f->ReadAt(3, 4, buf));
  EXPECT_EQ(std::string(buf, 4), "3456");
  EXPECT_FALSE(f->ReadAt(8, 4, buf));  // Past the end.
}

TEST_F(ExternalDataFileTest, RefusesDotDotAndAbsolutePaths) {
  for (const char* loc :
       {"../outside.bin", "sub/../../outside.bin", "/etc/passwd", "../../../../dev/zero", "a..b"}) {
    auto f = OpenExternalDataFile(Dir(), loc);
    ASSERT_FALSE(f.ok()) << loc;
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << loc;
    EXPECT_THAT(f.status().message(), HasSubstr("escapes the model directory")) << loc;
  }
}

TEST_F(ExternalDataFileTest, RefusesSymlinksLeadingOutOfTheFolder) {
  fs::create_symlink(root_ / "outside.bin", root_ / "model" / "link.bin");
  fs::create_directory_symlink(root_, root_ / "model" / "up");
  for (const char* loc : {"link.bin", "up/outside.bin"}) {
    auto f = OpenExternalDataFile(Dir(), loc);
    ASSERT_FALSE(f.ok()) << loc;
    EXPECT_THAT(f.status().message(), HasSubstr("escapes the model directory")) << loc;
  }
  // A symlink that stays inside is fine.
  fs::create_symlink("w.bin", root_ / "model" / "alias.bin");
  EXPECT_TRUE(OpenExternalDataFile(Dir(), "alias.bin").ok());
}

TEST_F(ExternalDataFileTest, RefusesDevicesAndFifosWithoutBlocking) {
  fs::create_symlink("/dev/zero", root_ / "model" / "zero");  // Escapes: refused before open.
  ASSERT_EQ(mkfifo((root_ / "model" / "fifo").c_str(), 0600), 0);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(OpenExternalDataFile(Dir(), "zero").ok());
  auto fifo = OpenExternalDataFile(Dir(), "fifo");
  ASSERT_FALSE(fifo.ok());
  EXPECT_THAT(fifo.status().message(), HasSubstr("not a regular file"));
  auto dir = OpenExternalDataFile(Dir(), "sub");
  ASSERT_FALSE(dir.ok());
  EXPECT_THAT(dir.status().message(), HasSubstr("not a regular file"));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(ExternalDataFileTest, RefusesFilesAboveTheBound) {
  auto f = OpenExternalDataFile(Dir(), "w.bin", /*max_bytes=*/9);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("more than the limit"));
  EXPECT_TRUE(OpenExternalDataFile(Dir(), "w.bin", 10).ok());
}

TEST_F(ExternalDataFileTest, MissingFileIsNotFoundAndInMemoryModelsHaveNone) {
  EXPECT_EQ(OpenExternalDataFile(Dir(), "nope.bin").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(OpenExternalDataFile("", "w.bin").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cuvil
