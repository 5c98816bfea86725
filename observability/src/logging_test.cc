#include "cuvil/observability/logging.h"

#include <sstream>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace cuvil::observability {
namespace {

using ::testing::MatchesRegex;

class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    logger_ = std::make_shared<spdlog::logger>("cuvil-test", sink);
    spdlog::register_logger(logger_);
  }
  void TearDown() override {
    spdlog::drop("cuvil-test");
    ASSERT_TRUE(ConfigureLogging("info", "text").ok());
  }
  std::vector<std::string> Lines() {
    std::vector<std::string> lines = absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
    return lines;
  }
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> logger_;
};

TEST_F(LoggingTest, JsonLinesParseAndEscape) {
  ASSERT_TRUE(ConfigureLogging("debug", "json").ok());
  const std::string tricky = "say \"hi\"\\ \n next\tline \x01 caf\xc3\xa9 bad\xff end";
  logger_->info("{}", tricky);
  logger_->debug("second {}", 2);
  logger_->trace("filtered out");
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 2u) << out_.str();
  const nlohmann::json first = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(first["level"], "info");
  EXPECT_EQ(first["logger"], "cuvil-test");
  EXPECT_EQ(first["msg"],
            "say \"hi\"\\ \n next\tline \x01 caf\xc3\xa9 bad\xef\xbf\xbd end");  // U+FFFD
  EXPECT_THAT(first["time"].get<std::string>(),
              MatchesRegex("[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{6}Z"));
  const nlohmann::json second = nlohmann::json::parse(lines[1]);
  EXPECT_EQ(second["level"], "debug");
  EXPECT_EQ(second["msg"], "second 2");
}

TEST_F(LoggingTest, TextIsOneLinePerEvent) {
  ASSERT_TRUE(ConfigureLogging("warn", "text").ok());
  logger_->info("hidden");
  logger_->warn("shown {}", 1);
  const std::vector<std::string> lines = Lines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], MatchesRegex(".*\\[warning\\] shown 1"));
}

TEST(LoggingConfigTest, RejectsUnknownValues) {
  EXPECT_EQ(ConfigureLogging("loud", "text").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ConfigureLogging("info", "xml").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ConfigureLogging("info").ok());
}

TEST(JsonEscapeTest, ControlCharacters) {
  std::string out;
  AppendJsonEscaped(std::string_view("a\0b\x1f\x7f", 5), &out);
  EXPECT_EQ(out, "a\\u0000b\\u001f\\u007f");
}

}  // namespace
}  // namespace cuvil::observability
