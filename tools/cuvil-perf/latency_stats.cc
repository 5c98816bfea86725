#include "latency_stats.h"

#include <algorithm>
#include <cmath>

namespace cuvil::perf {

int64_t Percentile(const std::vector<int64_t>& sorted, double p) {
  if (sorted.empty()) return 0;
  const double n = static_cast<double>(sorted.size());
  // Rank in [1, n]; the epsilon keeps e.g. 0.9 * 10 from rounding up to rank 10 via 9.000001.
  double rank = std::ceil(p / 100.0 * n - 1e-9);
  rank = std::clamp(rank, 1.0, n);
  return sorted[static_cast<size_t>(rank) - 1];
}

LatencySummary Summarize(std::vector<int64_t>* latencies_ns, double extra_percentile) {
  LatencySummary s;
  s.extra_percentile = extra_percentile;
  std::vector<int64_t>& v = *latencies_ns;
  s.count = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  auto us = [](int64_t ns) { return static_cast<double>(ns) / 1000.0; };
  s.mean_us = sum / static_cast<double>(v.size()) / 1000.0;
  s.p50_us = us(Percentile(v, 50));
  s.p90_us = us(Percentile(v, 90));
  s.p95_us = us(Percentile(v, 95));
  s.p99_us = us(Percentile(v, 99));
  s.extra_us = us(Percentile(v, extra_percentile));
  return s;
}

}  // namespace cuvil::perf
