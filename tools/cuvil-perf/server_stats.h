// The server's cumulative statistics of one model (Triton's ModelStatistics) and the per-window
// split perf_analyzer derives from two snapshots of them.
#ifndef CUVIL_TOOLS_CUVIL_PERF_SERVER_STATS_H_
#define CUVIL_TOOLS_CUVIL_PERF_SERVER_STATS_H_

#include <cstdint>
#include <map>

namespace cuvil::perf {

struct Duration {
  uint64_t count = 0;
  uint64_t ns = 0;
};

// Cumulative counters, as reported by the server at one instant.
struct ServerStats {
  uint64_t inference_count = 0;  // Samples (batch rows) inferred.
  uint64_t execution_count = 0;  // Model executions (batches).
  Duration success;
  Duration fail;
  Duration queue;
  Duration compute_input;
  Duration compute_infer;
  Duration compute_output;
  std::map<uint64_t, Duration> batch_compute_infer;  // Executed batch size -> compute_infer.
};

// What happened on the server between two snapshots.
struct ServerSplit {
  double infer_per_sec = 0;  // Delta inference_count / wall time.
  uint64_t requests = 0;     // Delta successful requests.
  uint64_t failures = 0;
  double queue_us = 0;  // Averages per request.
  double compute_input_us = 0;
  double compute_infer_us = 0;
  double compute_output_us = 0;
  double avg_batch = 0;               // Delta inference_count / delta execution_count.
  uint64_t largest_batch = 0;         // Largest batch size executed in the window.
  double largest_batch_infer_us = 0;  // Average compute_infer of one execution of that size.
};

ServerSplit Diff(const ServerStats& before, const ServerStats& after, double wall_seconds);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_SERVER_STATS_H_
