#include "file_copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed) & 0xff);
  return s;
}

std::string WriteFile(const std::string& name, const std::string& bytes) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

TEST(FileCopyTest, HoldsTheWholeFile) {
  const std::string bytes = Pattern((3 << 20) + 17, 1);  // Not a multiple of any page size.
  auto copy = FileCopy::Open(WriteFile("whole.bin", bytes), int64_t{1} << 30);
  ASSERT_TRUE(copy.ok()) << copy.status();
  ASSERT_EQ(copy->size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(copy->data()), copy->size()), bytes);
}

// A shared (or MAP_PRIVATE file) mapping would raise SIGBUS on touching a page past the new end
// of a file truncated in place; the copy is the file's bytes as they were when it was read.
TEST(FileCopyTest, TruncatingOrRewritingTheFileAfterwardsDoesNotAffectTheCopy) {
  const std::string bytes = Pattern(8 << 20, 2);
  const std::string path = WriteFile("truncated.bin", bytes);
  auto copy = FileCopy::Open(path, int64_t{1} << 30);
  ASSERT_TRUE(copy.ok()) << copy.status();
  // In place: the same inode shrinks to nothing, then gets other bytes.
  ASSERT_EQ(truncate(path.c_str(), 0), 0);
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  const std::string other = Pattern(1 << 20, 3);
  {
    std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
    f << other;
  }
  ASSERT_EQ(copy->size(), bytes.size());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(copy->data()), copy->size()), bytes);
}

TEST(FileCopyTest, MovedCopyKeepsTheBytes) {
  const std::string bytes = Pattern(5000, 4);
  auto copy = FileCopy::Open(WriteFile("moved.bin", bytes), 1 << 20);
  ASSERT_TRUE(copy.ok()) << copy.status();
  FileCopy moved = *std::move(copy);
  FileCopy assigned = std::move(moved);
  EXPECT_EQ(moved.data(), nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty.
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(assigned.data()), assigned.size()), bytes);
}

TEST(FileCopyTest, EmptyMissingAndOversizedFiles) {
  auto empty = FileCopy::Open(WriteFile("empty.bin", ""), 1 << 20);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->size(), 0u);
  auto missing = FileCopy::Open(::testing::TempDir() + "/no-such-file.bin", 1 << 20);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto dir = FileCopy::Open(::testing::TempDir(), 1 << 20);
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kNotFound);
  auto large = FileCopy::Open(WriteFile("large.bin", Pattern(4097, 5)), 4096);
  EXPECT_EQ(large.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace cuvil
