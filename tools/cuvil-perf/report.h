// Human-readable lines and CSV rows for the results of load levels.
#ifndef CUVIL_TOOLS_CUVIL_PERF_REPORT_H_
#define CUVIL_TOOLS_CUVIL_PERF_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "load_generator.h"

namespace cuvil::perf {

// One line per level: client throughput and latencies, then the server-side split.
std::string FormatLevel(const LevelResult& r);

std::string CsvHeader(double extra_percentile);
std::string CsvRow(const LevelResult& r);

absl::Status WriteCsv(const std::string& path, const std::vector<LevelResult>& results,
                      double extra_percentile);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_REPORT_H_
