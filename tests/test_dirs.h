// Scratch folders for tests.
#ifndef CUVIL_TESTS_TEST_DIRS_H_
#define CUVIL_TESTS_TEST_DIRS_H_

#include <unistd.h>

#include <filesystem>
#include <string>

#include "gtest/gtest.h"

namespace cuvil::testing {

// <temp>/<prefix>_<pid>_<running test's name>, emptied and created: one folder per test and
// process, so tests and concurrent ctest runs never share one. Thread-compatible.
inline std::filesystem::path FreshTestDir(const std::string& prefix) {
  std::filesystem::path dir = std::filesystem::temp_directory_path() /
                              (prefix + "_" + std::to_string(getpid()) + "_" +
                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace cuvil::testing

#endif  // CUVIL_TESTS_TEST_DIRS_H_
