#include "report.h"

#include <string>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cuvil::perf {
namespace {

using ::testing::HasSubstr;

LevelResult Sample() {
  LevelResult r;
  r.level = 4;
  r.window_seconds = 2;
  r.client_infer_per_sec = 1234.5;
  r.latency.count = 2469;
  r.latency.p50_us = 100;
  r.latency.p99_us = 300;
  r.latency.extra_percentile = 99.9;
  r.latency.extra_us = 400;
  r.have_server = true;
  r.server.infer_per_sec = 1230;
  r.server.avg_batch = 3.5;
  return r;
}

TEST(ReportTest, LineHasClientAndServerParts) {
  std::string line = FormatLevel(Sample());
  EXPECT_THAT(line, HasSubstr("concurrency=4: 1234.5 infer/s"));
  EXPECT_THAT(line, HasSubstr("p99 300"));
  EXPECT_THAT(line, HasSubstr("p99.9 400"));
  EXPECT_THAT(line, HasSubstr("server: 1230.0 infer/s"));
  EXPECT_THAT(line, HasSubstr("avg batch 3.50"));
  LevelResult no_server = Sample();
  no_server.have_server = false;
  EXPECT_THAT(FormatLevel(no_server), HasSubstr("statistics unavailable"));
}

TEST(ReportTest, CsvRowsMatchTheHeader) {
  const size_t columns = std::vector<std::string>(absl::StrSplit(CsvHeader(99.9), ',')).size();
  EXPECT_THAT(CsvHeader(99.9), HasSubstr(",selected_p99.9_us,"));
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(CsvRow(Sample()), ',')).size(), columns);
  LevelResult no_server = Sample();
  no_server.have_server = false;
  EXPECT_EQ(std::vector<std::string>(absl::StrSplit(CsvRow(no_server), ',')).size(), columns);
  EXPECT_THAT(CsvRow(Sample()), ::testing::StartsWith("concurrency,4,2.000,1234.50,100.0,"));
}

}  // namespace
}  // namespace cuvil::perf
