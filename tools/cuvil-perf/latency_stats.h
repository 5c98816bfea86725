// Client-side latency summaries: percentiles and mean of a set of request latencies.
#ifndef CUVIL_TOOLS_CUVIL_PERF_LATENCY_STATS_H_
#define CUVIL_TOOLS_CUVIL_PERF_LATENCY_STATS_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cuvil::perf {

// Nearest-rank percentile (0 < p <= 100) of ascending `sorted` values: the smallest value with at
// least p% of the values at or below it. 0 for an empty set.
int64_t Percentile(const std::vector<int64_t>& sorted, double p);

struct LatencySummary {
  size_t count = 0;
  double mean_us = 0;
  double p50_us = 0;
  double p90_us = 0;
  double p95_us = 0;
  double p99_us = 0;
  double extra_percentile = 99;  // The --percentile one.
  double extra_us = 0;
};

// Summarises latencies given in nanoseconds (sorts them in place).
LatencySummary Summarize(std::vector<int64_t>* latencies_ns, double extra_percentile);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_LATENCY_STATS_H_
