#include "http_stats_json.h"

#include <string>
#include <utility>

namespace cuvil {

using json = nlohmann::json;

namespace {

json DurationJson(const DurationStat& d) { return json{{"count", d.count}, {"ns", d.ns}}; }

// Cuvil extension: [{"reason": ..., "count": ...}] for the non-zero counts.
json RejectedJson(const std::map<std::string, uint64_t>& reasons) {
  json list = json::array();
  for (const auto& [reason, count] : reasons) {
    if (count > 0) list.push_back({{"reason", reason}, {"count", count}});
  }
  return list;
}

}  // namespace

json StatsJson(const ModelVersion& model) {
  SchedulerStats s = model.Stats();
  json batches = json::array();
  for (const auto& [size, b] : s.batch_stats) {
    batches.push_back({{"batch_size", size},
                       {"compute_input", DurationJson(b.compute_input)},
                       {"compute_infer", DurationJson(b.compute_infer)},
                       {"compute_output", DurationJson(b.compute_output)}});
  }
  return {{"name", model.name()},
          {"version", std::to_string(model.version())},
          {"last_inference", s.last_inference_ms},
          {"inference_count", s.inference_count},
          {"execution_count", s.execution_count},
          {"inference_stats",
           {{"success", DurationJson(s.success)},
            {"fail", DurationJson(s.fail)},
            {"queue", DurationJson(s.queue)},
            {"compute_input", DurationJson(s.compute_input)},
            {"compute_infer", DurationJson(s.compute_infer)},
            {"compute_output", DurationJson(s.compute_output)},
            // No response cache: present so Triton clients find the fields they expect.
            {"cache_hit", DurationJson({})},
            {"cache_miss", DurationJson({})}}},
          {"batch_stats", std::move(batches)},
          {"rejected", RejectedJson({{"queue_full", s.rejected_queue_full},
                                     {"draining", s.rejected_draining}})}};
}

json RejectedStatsJson(const std::string& name, const std::map<std::string, uint64_t>& reasons) {
  uint64_t total = 0;
  for (const auto& [reason, count] : reasons) total += count;
  return {{"name", name},
          {"version", ""},
          {"last_inference", 0},
          {"inference_count", 0},
          {"execution_count", 0},
          {"inference_stats",
           {{"success", DurationJson({})},
            {"fail", DurationJson({total, 0})},
            {"queue", DurationJson({})},
            {"compute_input", DurationJson({})},
            {"compute_infer", DurationJson({})},
            {"compute_output", DurationJson({})},
            {"cache_hit", DurationJson({})},
            {"cache_miss", DurationJson({})}}},
          {"batch_stats", json::array()},
          {"rejected", RejectedJson(reasons)}};
}

}  // namespace cuvil
