#include "server_stats.h"

namespace cuvil::perf {
namespace {

// Counters only grow, but a model reloaded between snapshots restarts them: clamp at zero.
uint64_t Delta(uint64_t before, uint64_t after) { return after >= before ? after - before : 0; }

double AverageUs(const Duration& before, const Duration& after) {
  uint64_t count = Delta(before.count, after.count);
  if (count == 0) return 0;
  return static_cast<double>(Delta(before.ns, after.ns)) / static_cast<double>(count) / 1000.0;
}

}  // namespace

ServerSplit Diff(const ServerStats& before, const ServerStats& after, double wall_seconds) {
  ServerSplit s;
  uint64_t inferences = Delta(before.inference_count, after.inference_count);
  uint64_t executions = Delta(before.execution_count, after.execution_count);
  if (wall_seconds > 0) s.infer_per_sec = static_cast<double>(inferences) / wall_seconds;
  s.requests = Delta(before.success.count, after.success.count);
  s.failures = Delta(before.fail.count, after.fail.count);
  s.queue_us = AverageUs(before.queue, after.queue);
  s.compute_input_us = AverageUs(before.compute_input, after.compute_input);
  s.compute_infer_us = AverageUs(before.compute_infer, after.compute_infer);
  s.compute_output_us = AverageUs(before.compute_output, after.compute_output);
  if (executions > 0) s.avg_batch = static_cast<double>(inferences) / executions;
  for (auto it = after.batch_compute_infer.rbegin(); it != after.batch_compute_infer.rend(); ++it) {
    Duration prior;
    if (auto b = before.batch_compute_infer.find(it->first);
        b != before.batch_compute_infer.end()) {
      prior = b->second;
    }
    if (Delta(prior.count, it->second.count) == 0) continue;
    s.largest_batch = it->first;
    s.largest_batch_infer_us = AverageUs(prior, it->second);
    break;
  }
  return s;
}

}  // namespace cuvil::perf
