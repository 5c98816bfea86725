// Logging setup for every Cuvil binary: spdlog's level and line format.
#ifndef CUVIL_OBSERVABILITY_LOGGING_H_
#define CUVIL_OBSERVABILITY_LOGGING_H_

#include <memory>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spdlog/formatter.h"

namespace cuvil::observability {

// Sets the level ("trace", "debug", "info", "warn", "error", "critical", "off") and the format
// of every registered spdlog logger (and of loggers created later through spdlog's registry):
//   "text": one line per event, "2024-05-01 12:00:00.123 [info] message"  (default)
//   "json": one JSON object per line:
//           {"time":"2024-05-01T12:00:00.123456Z","level":"info","logger":"cuvil","msg":"..."}
//           (msg is escaped per RFC 8259; invalid UTF-8 becomes U+FFFD).
// InvalidArgument for an unknown level or format. Thread-safe as spdlog's registry is; meant to
// be called once at startup.
absl::Status ConfigureLogging(std::string_view level, std::string_view format = "text");

// The formatter ConfigureLogging installs for `format` (for loggers built by hand).
absl::StatusOr<std::unique_ptr<spdlog::formatter>> MakeLogFormatter(std::string_view format);

// Appends `s` as the body of a JSON string (no quotes), escaping as RFC 8259 requires.
void AppendJsonEscaped(std::string_view s, std::string* out);

}  // namespace cuvil::observability

#endif  // CUVIL_OBSERVABILITY_LOGGING_H_
