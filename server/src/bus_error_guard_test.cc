#include "bus_error_guard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace cuvil {
namespace {

// Two pages of a shared memory object mapped, then the object cut to one page: the second page
// of the mapping is past the end of the file, so touching it raises SIGBUS.
class TruncatedMapping {
 public:
  TruncatedMapping() {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const std::string key = "/cuvil_bus_guard_test_" + std::to_string(getpid());
    fd_ = shm_open(key.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd_, 0);
    shm_unlink(key.c_str());
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(2 * page_)), 0);
    map_ =
        static_cast<uint8_t*>(mmap(nullptr, 2 * page_, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(map_, MAP_FAILED);
    std::memset(map_, 7, 2 * page_);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(page_)), 0);
  }
  ~TruncatedMapping() {
    munmap(map_, 2 * page_);
    close(fd_);
  }
  uint8_t* map() const { return map_; }
  size_t page() const { return page_; }

 private:
  size_t page_ = 0;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
};

TEST(BusErrorGuardTest, CopiesWithinTheFileAndReportsCopiesPastItsEnd) {
  TruncatedMapping m;
  std::vector<uint8_t> buf(2 * m.page(), 0);
  ASSERT_TRUE(CopyCatchingBusErrors(buf.data(), m.map(), m.page()));
  EXPECT_EQ(buf[0], 7);
  EXPECT_EQ(buf[m.page() - 1], 7);
  // Reading and writing the page past the end fail without killing the process, every time.
  for (int i = 0; i < 3; ++i) {
    EXPECT_FALSE(CopyCatchingBusErrors(buf.data(), m.map(), 2 * m.page()));
    EXPECT_FALSE(CopyCatchingBusErrors(m.map() + m.page(), buf.data(), 16));
  }
  // The guard is per thread and leaves nothing behind: ordinary copies still work everywhere.
  std::thread other([&] {
    std::vector<uint8_t> local(64, 1);
    EXPECT_FALSE(CopyCatchingBusErrors(local.data(), m.map() + m.page(), 64));
    EXPECT_TRUE(CopyCatchingBusErrors(local.data(), m.map(), 64));
    EXPECT_EQ(local[63], 7);
  });
  other.join();
  const uint8_t out[4] = {1, 2, 3, 4};
  ASSERT_TRUE(CopyCatchingBusErrors(m.map() + 8, out, 4));
  EXPECT_EQ(m.map()[11], 4);
}

TEST(BusErrorGuardDeathTest, ABusErrorOutsideAGuardedCopyStillKillsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        TruncatedMapping m;
        std::vector<uint8_t> buf(16);
        (void)CopyCatchingBusErrors(buf.data(), m.map(), 16);  // Installs the handler.
        volatile uint8_t* past_end = m.map() + m.page();
        buf[0] = *past_end;
      },
      "");
}

}  // namespace
}  // namespace cuvil
