#include "report.h"

#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cuvil::perf {
namespace {

std::string LevelName(const LevelResult& r) {
  return r.mode == LoadMode::kConcurrency ? absl::StrFormat("concurrency=%.0f", r.level)
                                          : absl::StrFormat("rate=%g/s", r.level);
}

std::string PercentileName(double p) { return absl::StrFormat("p%g", p); }

}  // namespace

std::string FormatLevel(const LevelResult& r) {
  const LatencySummary& l = r.latency;
  std::string line =
      absl::StrFormat("%s: %.1f infer/s  latency us: p50 %.0f p90 %.0f p95 %.0f p99 %.0f",
                      LevelName(r), r.client_infer_per_sec, l.p50_us, l.p90_us, l.p95_us, l.p99_us);
  if (l.extra_percentile != 50 && l.extra_percentile != 90 && l.extra_percentile != 95 &&
      l.extra_percentile != 99) {
    absl::StrAppendFormat(&line, " %s %.0f", PercentileName(l.extra_percentile), l.extra_us);
  }
  absl::StrAppendFormat(&line, " mean %.0f  requests %u errors %u", l.mean_us, l.count, r.errors);
  if (r.mode == LoadMode::kRequestRate) absl::StrAppendFormat(&line, " delayed %u", r.delayed);
  if (r.sequences) {
    absl::StrAppendFormat(&line, "  sequences started %u completed %u", r.sequences_started,
                          r.sequences_completed);
  }
  if (r.have_server) {
    const ServerSplit& s = r.server;
    absl::StrAppendFormat(&line,
                          "  | server: %.1f infer/s queue %.0f us compute input %.0f infer %.0f "
                          "output %.0f us avg batch %.2f",
                          s.infer_per_sec, s.queue_us, s.compute_input_us, s.compute_infer_us,
                          s.compute_output_us, s.avg_batch);
  } else {
    line += "  | server: statistics unavailable";
  }
  return line;
}

std::string CsvHeader(double extra_percentile) {
  return absl::StrCat(
      "mode,level,window_s,client_infer_per_sec,p50_us,p90_us,p95_us,p99_us,selected_",
      PercentileName(extra_percentile),
      "_us,mean_us,requests,errors,delayed,server_infer_per_sec,queue_us,compute_input_us,"
      "compute_infer_us,compute_output_us,avg_batch,largest_batch,largest_batch_infer_us,"
      "sequences_started,sequences_completed");
}

std::string CsvRow(const LevelResult& r) {
  const LatencySummary& l = r.latency;
  std::string row =
      absl::StrFormat("%s,%g,%.3f,%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,%.1f,%u,%u,%u",
                      r.mode == LoadMode::kConcurrency ? "concurrency" : "request_rate", r.level,
                      r.window_seconds, r.client_infer_per_sec, l.p50_us, l.p90_us, l.p95_us,
                      l.p99_us, l.extra_us, l.mean_us, l.count, r.errors, r.delayed);
  if (r.have_server) {
    const ServerSplit& s = r.server;
    absl::StrAppendFormat(&row, ",%.2f,%.1f,%.1f,%.1f,%.1f,%.3f,%u,%.1f", s.infer_per_sec,
                          s.queue_us, s.compute_input_us, s.compute_infer_us, s.compute_output_us,
                          s.avg_batch, s.largest_batch, s.largest_batch_infer_us);
  } else {
    row += ",,,,,,,,";
  }
  if (r.sequences) {
    absl::StrAppendFormat(&row, ",%u,%u", r.sequences_started, r.sequences_completed);
  } else {
    row += ",,";
  }
  return row;
}

absl::Status WriteCsv(const std::string& path, const std::vector<LevelResult>& results,
                      double extra_percentile) {
  std::ofstream f(path, std::ios::trunc);
  if (!f) return absl::InvalidArgumentError(absl::StrCat("cannot write ", path));
  f << CsvHeader(extra_percentile) << '\n';
  for (const LevelResult& r : results) f << CsvRow(r) << '\n';
  f.close();
  if (!f) return absl::InternalError(absl::StrCat("error writing ", path));
  return absl::OkStatus();
}

}  // namespace cuvil::perf
