#include "cuvil/observability/logging.h"

#include <chrono>
#include <ctime>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cuvil/observability/utf8.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"

namespace cuvil::observability {
namespace {

class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    std::string line;
    line.reserve(msg.payload.size() + 96);
    const auto since_epoch = msg.time.time_since_epoch();
    const auto secs = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(since_epoch - secs).count();
    const std::time_t t = static_cast<std::time_t>(secs.count());
    std::tm tm;
    gmtime_r(&t, &tm);
    absl::StrAppendFormat(&line, "{\"time\":\"%04d-%02d-%02dT%02d:%02d:%02d.%06dZ\",\"level\":\"",
                          tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                          tm.tm_sec, static_cast<int>(micros));
    const auto level = spdlog::level::to_string_view(msg.level);
    line.append(level.data(), level.size());
    line += "\"";
    if (msg.logger_name.size() > 0) {
      line += ",\"logger\":\"";
      AppendJsonEscaped(std::string_view(msg.logger_name.data(), msg.logger_name.size()), &line);
      line += "\"";
    }
    line += ",\"msg\":\"";
    AppendJsonEscaped(std::string_view(msg.payload.data(), msg.payload.size()), &line);
    line += "\"}\n";
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

void AppendJsonEscaped(std::string_view s, std::string* out) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    switch (c) {
      case '"':
        *out += "\\\"";
        ++i;
        continue;
      case '\\':
        *out += "\\\\";
        ++i;
        continue;
      case '\n':
        *out += "\\n";
        ++i;
        continue;
      case '\r':
        *out += "\\r";
        ++i;
        continue;
      case '\t':
        *out += "\\t";
        ++i;
        continue;
      default:
        break;
    }
    if (c < 0x20 || c == 0x7F) {
      absl::StrAppendFormat(out, "\\u%04x", c);
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      *out += "\\ufffd";
      ++i;
      continue;
    }
    out->append(s.substr(i, len));
    i += len;
  }
}

absl::StatusOr<std::unique_ptr<spdlog::formatter>> MakeLogFormatter(std::string_view format) {
  if (format == "text" || format.empty()) {
    return std::unique_ptr<spdlog::formatter>(
        std::make_unique<spdlog::pattern_formatter>("%Y-%m-%d %H:%M:%S.%e [%l] %v"));
  }
  if (format == "json")
    return std::unique_ptr<spdlog::formatter>(std::make_unique<JsonFormatter>());
  return absl::InvalidArgumentError(
      absl::StrCat("unknown log format '", std::string(format), "' (expected text or json)"));
}

absl::Status ConfigureLogging(std::string_view level, std::string_view format) {
  static constexpr std::pair<std::string_view, spdlog::level::level_enum> kLevels[] = {
      {"trace", spdlog::level::trace},       {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},         {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn},      {"error", spdlog::level::err},
      {"critical", spdlog::level::critical}, {"off", spdlog::level::off},
  };
  const spdlog::level::level_enum* found = nullptr;
  for (const auto& [name, value] : kLevels) {
    if (name == level) found = &value;
  }
  if (found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown log level '", std::string(level),
                     "' (expected trace, debug, info, warn, error, critical, off)"));
  }
  absl::StatusOr<std::unique_ptr<spdlog::formatter>> formatter = MakeLogFormatter(format);
  if (!formatter.ok()) return formatter.status();
  spdlog::set_formatter(std::move(*formatter));
  spdlog::set_level(*found);
  return absl::OkStatus();
}

}  // namespace cuvil::observability
