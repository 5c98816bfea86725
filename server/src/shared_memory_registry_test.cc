#include "shared_memory_registry.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil {
namespace {

using ::testing::HasSubstr;

// A POSIX shared memory object of `size` bytes holding 0, 1, 2, ... (mod 256); unlinked at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t size) {
    static std::atomic<int> counter{0};
    key_ = "/cuvil_registry_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
    fd_ = shm_open(key_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    Resize(size);
    std::vector<uint8_t> bytes(size);
    for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<uint8_t>(i);
    EXPECT_EQ(pwrite(fd_, bytes.data(), size, 0), static_cast<ssize_t>(size));
  }
  ~ShmObject() {
    close(fd_);
    shm_unlink(key_.c_str());
  }
  void Resize(size_t size) { EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0); }
  uint8_t At(size_t i) {
    uint8_t b = 0;
    EXPECT_EQ(pread(fd_, &b, 1, static_cast<off_t>(i)), 1);
    return b;
  }
  const std::string& key() const { return key_; }

 private:
  std::string key_;
  int fd_ = -1;
};

TEST(SharedMemoryRegistryTest, RegisterStatusUnregister) {
  ShmObject shm(4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("a", shm.key(), 16, 256).ok());
  ASSERT_TRUE(registry.Register("b", shm.key(), 0, 4096).ok());
  auto all = registry.Status("");
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_EQ((*all)[0].name, "a");
  EXPECT_EQ((*all)[0].key, shm.key());
  EXPECT_EQ((*all)[0].offset, 16u);
  EXPECT_EQ((*all)[0].byte_size, 256u);
  auto one = registry.Status("b");
  ASSERT_TRUE(one.ok());
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].byte_size, 4096u);

  EXPECT_EQ(registry.Register("a", shm.key(), 0, 1).code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Status("nope").status().code(), absl::StatusCode::kNotFound);

  registry.Unregister("a");
  registry.Unregister("never-registered");  // Not an error, as in Triton.
  EXPECT_EQ(registry.Status("a").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(registry.Status("")->size(), 1u);
  registry.Unregister("");
  EXPECT_TRUE(registry.Status("")->empty());
}

TEST(SharedMemoryRegistryTest, RegisterRefusesBadKeysAndWindows) {
  ShmObject shm(1024);
  SharedMemoryRegistry registry;
  absl::Status missing = registry.Register("r", "/cuvil_no_such_object_for_test", 0, 8);
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("/cuvil_no_such_object_for_test"));
  absl::Status beyond = registry.Register("r", shm.key(), 1000, 25);
  EXPECT_EQ(beyond.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(beyond.message(), HasSubstr("exceeds the 1024 bytes"));
  EXPECT_EQ(registry.Register("r", shm.key(), UINT64_MAX - 3, 8).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("", shm.key(), 0, 8).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Register("r", "", 0, 8).code(), absl::StatusCode::kInvalidArgument);
  // Keys naming paths outside /dev/shm are refused by shm_open itself.
  EXPECT_EQ(registry.Register("r", "/../etc/passwd", 0, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(registry.Status("")->empty());
  EXPECT_TRUE(registry.Register("r", shm.key(), 1000, 24).ok());  // Exactly to the end.
}

TEST(SharedMemoryRegistryTest, RegionCountIsBounded) {
  ShmObject shm(64);
  SharedMemoryLimits limits;
  limits.max_regions = 3;
  SharedMemoryRegistry registry(limits);
  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(registry.Register(std::to_string(i), shm.key(), 0, 8).ok());
  absl::Status full = registry.Register("3", shm.key(), 0, 8);
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(full.message(), HasSubstr("'3'"));
  registry.Unregister("1");
  EXPECT_TRUE(registry.Register("3", shm.key(), 0, 8).ok());
}

TEST(SharedMemoryRegistryTest, ReadAndWriteWithinTheWindow) {
  ShmObject shm(1024);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", shm.key(), 100, 200).ok());
  auto region = registry.Find("r", "t");
  ASSERT_TRUE(region.ok());
  uint8_t buf[8];
  ASSERT_TRUE((*region)->Read(10, 8, buf, "t").ok());
  for (int i = 0; i < 8; ++i) EXPECT_EQ(buf[i], static_cast<uint8_t>(110 + i));
  const uint8_t out[4] = {9, 8, 7, 6};
  ASSERT_TRUE((*region)->Write(196, out, 4, "t").ok());
  EXPECT_EQ(shm.At(296), 9);
  EXPECT_EQ(shm.At(299), 6);
  EXPECT_EQ(shm.At(300), static_cast<uint8_t>(300));  // Just past the window: untouched.

  absl::Status past = (*region)->Read(197, 4, buf, "tensor_x");
  EXPECT_EQ(past.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(past.message(), HasSubstr("tensor_x"));
  EXPECT_THAT(past.message(), HasSubstr("region 'r'"));
  EXPECT_EQ((*region)->Write(UINT64_MAX, out, 4, "t").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*region)->CheckRange(UINT64_MAX - 1, 4, "t").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*region)->CheckRange(0, 200, "t").ok());

  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> unknown = registry.Find("zz", "in0");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unknown.status().message(), HasSubstr("in0"));
  EXPECT_THAT(unknown.status().message(), HasSubstr("'zz'"));
}

TEST(SharedMemoryRegistryTest, ShrunkObjectIsAnErrorNotACrash) {
  ShmObject shm(4096);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", shm.key(), 0, 4096).ok());
  auto region = registry.Find("r", "t");
  ASSERT_TRUE(region.ok());
  shm.Resize(100);
  std::vector<uint8_t> buf(4096);
  absl::Status read = (*region)->Read(0, 4096, buf.data(), "t");
  EXPECT_EQ(read.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.message(), HasSubstr("truncated"));
  // A read inside what is left still needs the whole window: the registration no longer holds.
  EXPECT_EQ((*region)->Read(0, 10, buf.data(), "t").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*region)->Write(0, buf.data(), 10, "t").code(), absl::StatusCode::kInvalidArgument);
  shm.Resize(4096);  // Grown back: usable again.
  EXPECT_TRUE((*region)->Read(0, 4096, buf.data(), "t").ok());
}

TEST(SharedMemoryRegistryTest, UnregisterKeepsRegionsInUseAlive) {
  ShmObject shm(64);
  SharedMemoryRegistry registry;
  ASSERT_TRUE(registry.Register("r", shm.key(), 0, 64).ok());
  auto held = registry.Find("r", "t");
  ASSERT_TRUE(held.ok());
  registry.Unregister("r");
  EXPECT_FALSE(registry.Find("r", "t").ok());
  uint8_t b[4];
  ASSERT_TRUE((*held)->Read(60, 4, b, "t").ok());
  EXPECT_EQ(b[3], 63);
  // The name is free again while the old region is still held.
  EXPECT_TRUE(registry.Register("r", shm.key(), 0, 32).ok());
}

TEST(SharedMemoryRegistryTest, ConcurrentRegisterFindUnregister) {
  ShmObject shm(256);
  SharedMemoryRegistry registry;
  std::atomic<int> reads{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const std::string name = "r" + std::to_string(t % 2);
      for (int i = 0; i < 300; ++i) {
        (void)registry.Register(name, shm.key(), 0, 256);
        if (auto region = registry.Find(name, "t"); region.ok()) {
          uint8_t b[16];
          if ((*region)->Read(16, 16, b, "t").ok() && b[0] == 16) reads.fetch_add(1);
        }
        if (i % 3 == 0) registry.Unregister(name);
        (void)registry.Status("");
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(reads.load(), 0);
}

}  // namespace
}  // namespace cuvil
