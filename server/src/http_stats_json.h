// Private: Triton's statistics extension as JSON (GET /v2/models[/{m}[/versions/{v}]]/stats).
#ifndef CUVIL_SERVER_SRC_HTTP_STATS_JSON_H_
#define CUVIL_SERVER_SRC_HTTP_STATS_JSON_H_

#include <cstdint>
#include <map>
#include <string>

#include "cuvil/server/model_manager.h"
#include "nlohmann/json.hpp"

namespace cuvil {

// One model version's entry of "model_stats", with Triton's fields (cache fields present and zero:
// there is no response cache) and Cuvil's "rejected" list of non-zero refusal counts.
nlohmann::json StatsJson(const ModelVersion& model);

// The version-less entry for a model's requests refused before reaching a version, by reason;
// inference_stats.fail counts them (as the gRPC ModelStatistics extension does).
nlohmann::json RejectedStatsJson(const std::string& name,
                                 const std::map<std::string, uint64_t>& reasons);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_HTTP_STATS_JSON_H_
