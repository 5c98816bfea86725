// Snapshot of cuvil-probe's BPF maps and its two renderings: Prometheus text exposition format
// 0.0.4 and a bpftrace-style terminal histogram. Pure functions of the snapshot, no BPF here.
#ifndef CUVIL_TOOLS_CUVIL_PROBE_PROBE_METRICS_H_
#define CUVIL_TOOLS_CUVIL_PROBE_PROBE_METRICS_H_

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "cuvil/observability/exposition.h"

namespace cuvil::probe {

// Log2 buckets as in cuvil_probe.h: bucket b counts v with 2^(b-1) < v <= 2^b.
inline constexpr int kBuckets = 65;
using Log2Hist = std::array<uint64_t, kBuckets>;

struct EventTotals {
  uint64_t count = 0;
  uint64_t sum_ns = 0;
  uint64_t sum_value = 0;
};

struct Snapshot {
  std::map<std::string, Log2Hist> latency_ns;  // model -> request latency histogram
  std::map<std::string, Log2Hist> batch_size;  // model -> batch size histogram
  std::map<std::pair<std::string, int64_t>, uint64_t> requests;  // (model, status) -> count
  // (event kind, model, extra) -> totals; kinds are cuvil_probe_event_kind.
  std::map<std::tuple<uint32_t, std::string, std::string>, EventTotals> events;
  uint64_t update_failures = 0;
  int probes_attached = 0;
};

// Prometheus exposition format 0.0.4 for the snapshot.
std::string RenderPrometheus(const Snapshot& snapshot);

// One bpftrace-style `hist` block per model for the request latencies (ns), then the request
// counts by status and the batch-size histograms.
std::string RenderTerminal(const Snapshot& snapshot);

// Prometheus label escaping (invalid UTF-8 becomes U+FFFD), shared with cuvil-server.
using observability::EscapeLabelValue;

}  // namespace cuvil::probe

#endif  // CUVIL_TOOLS_CUVIL_PROBE_PROBE_METRICS_H_
