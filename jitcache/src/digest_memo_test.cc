// The model digest memo: exact-stamp lookups, the settle rule, corrupt records, concurrent writers.
#include "digest_memo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "test_dirs.h"

namespace cuvil::jitcache_internal {
namespace {
namespace fs = std::filesystem;

class DigestMemoTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cuvil::testing::FreshTestDir("cuvil_digest_memo_test"); }
  void TearDown() override { fs::remove_all(dir_); }

  // A stamp of a file last changed an hour ago (settled).
  static FileStamp OldStamp() {
    FileStamp s;
    s.dev = 0xfe01;
    s.ino = 123456;
    s.size = 46748540;
    s.mtime_ns = (static_cast<int64_t>(time(nullptr)) - 3600) * 1'000'000'000 + 17;
    s.ctime_ns = s.mtime_ns + 5;
    return s;
  }
  static MemoRecord Record(char fill, bool no_external = true) {
    return MemoRecord{std::string(16, fill), no_external};
  }

  fs::path dir_;
};

TEST_F(DigestMemoTest, FindsWhatWasStoredForExactlyThatStamp) {
  DigestMemo memo(dir_.string(), std::chrono::milliseconds(2000));
  const FileStamp stamp = OldStamp();
  EXPECT_FALSE(memo.Find(stamp).has_value());
  ASSERT_TRUE(memo.Store(stamp, Record('a', /*no_external=*/false)));
  auto found = memo.Find(stamp);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->digest, std::string(16, 'a'));
  EXPECT_FALSE(found->no_external_data);
  // Any other identity or change time is another file (or the same file changed): no record.
  for (int field = 0; field < 5; ++field) {
    FileStamp other = stamp;
    switch (field) {
      case 0:
        other.dev += 1;
        break;
      case 1:
        other.ino += 1;
        break;
      case 2:
        other.size += 1;
        break;
      case 3:
        other.mtime_ns += 1;
        break;
      case 4:
        other.ctime_ns += 1;
        break;
    }
    EXPECT_FALSE(memo.Find(other).has_value()) << field;
  }
  // A new record for the same inode replaces the old one.
  FileStamp changed = stamp;
  changed.ctime_ns += 1'000'000;
  ASSERT_TRUE(memo.Store(changed, Record('b')));
  EXPECT_FALSE(memo.Find(stamp).has_value());
  ASSERT_TRUE(memo.Find(changed).has_value());
  EXPECT_EQ(memo.Find(changed)->digest, std::string(16, 'b'));
  EXPECT_TRUE(memo.Find(changed)->no_external_data);
}

// A file changed within the settle time could change again in the same timestamp tick without
// its stamp showing it: it is not recorded.
TEST_F(DigestMemoTest, RecentlyChangedFilesAreNotRecorded) {
  DigestMemo memo(dir_.string(), std::chrono::milliseconds(2000));
  FileStamp fresh = OldStamp();
  fresh.ctime_ns = static_cast<int64_t>(time(nullptr)) * 1'000'000'000;
  EXPECT_FALSE(memo.Store(fresh, Record('c')));
  EXPECT_FALSE(memo.Find(fresh).has_value());
  EXPECT_FALSE(fs::exists(memo.PathOf(fresh)));
}

TEST_F(DigestMemoTest, CorruptOrTruncatedRecordsAreIgnoredAndRewritten) {
  DigestMemo memo(dir_.string(), std::chrono::milliseconds(0));
  const FileStamp stamp = OldStamp();
  ASSERT_TRUE(memo.Store(stamp, Record('d')));
  const std::string path = memo.PathOf(stamp);
  std::string bytes;
  {
    std::ifstream f(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  ASSERT_GT(bytes.size(), 64u);
  // Every single flipped byte (magic, version, stamp, digest, checksum) is caught.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x40);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bad;
    EXPECT_FALSE(memo.Find(stamp).has_value()) << "flipped byte " << i;
  }
  for (size_t keep : {size_t{0}, size_t{16}, bytes.size() - 1}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, keep);
    EXPECT_FALSE(memo.Find(stamp).has_value()) << keep;
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes << "x";  // Trailing bytes.
  EXPECT_FALSE(memo.Find(stamp).has_value());
  ASSERT_TRUE(memo.Store(stamp, Record('e')));
  ASSERT_TRUE(memo.Find(stamp).has_value());
  EXPECT_EQ(memo.Find(stamp)->digest, std::string(16, 'e'));
}

// Writers in several threads (as in several processes: every write is a temporary file renamed
// over the record) never leave a torn record: a reader sees one of the written records or none.
TEST_F(DigestMemoTest, ConcurrentWritersNeverTearARecord) {
  DigestMemo memo(dir_.string(), std::chrono::milliseconds(0));
  const FileStamp stamp = OldStamp();
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (char c : {'p', 'q', 'r'}) {
    writers.emplace_back([&, c] {
      while (!stop.load()) EXPECT_TRUE(memo.Store(stamp, Record(c)));
    });
  }
  std::set<std::string> seen;
  int found = 0;
  // Under load the writers may not have run yet after 3000 reads: keep reading until one shows.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < 3000 || (found == 0 && std::chrono::steady_clock::now() < deadline); ++i) {
    auto r = memo.Find(stamp);
    if (!r.has_value()) continue;
    ++found;
    seen.insert(r->digest);
  }
  stop.store(true);
  for (auto& t : writers) t.join();
  for (const std::string& d : seen) {
    EXPECT_TRUE(d == std::string(16, 'p') || d == std::string(16, 'q') || d == std::string(16, 'r'))
        << d;
  }
  EXPECT_GT(found, 0);
  // No temporary files are left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    ++files;
    EXPECT_EQ(e.path().filename().string().rfind(".tmp-", 0), std::string::npos) << e.path();
  }
  EXPECT_EQ(files, 1);
}

// Issue 38 part 7: a record names a model file and its digest: only its owner reads it; a find
// refreshes its mtime (the cache's eviction keeps records in use); a symlink is not a record.
TEST_F(DigestMemoTest, RecordsArePrivateRefreshedOnUseAndNeverFollowedThroughSymlinks) {
  DigestMemo memo(dir_.string(), std::chrono::milliseconds(2000));
  const FileStamp stamp = OldStamp();
  ASSERT_TRUE(memo.Store(stamp, Record('a')));
  const std::string path = memo.PathOf(stamp);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  const struct timespec old_times[2] = {{1000, 0}, {1000, 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), old_times, 0), 0);
  ASSERT_TRUE(memo.Find(stamp).has_value());
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 1000) << "a find leaves the record looking unused";
  // A record planted as a symlink to a valid record elsewhere is ignored.
  const fs::path elsewhere = dir_ / "elsewhere.cjm";
  fs::rename(path, elsewhere);
  fs::create_symlink(elsewhere, path);
  EXPECT_FALSE(memo.Find(stamp).has_value());
}

}  // namespace
}  // namespace cuvil::jitcache_internal
