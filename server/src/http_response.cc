#include "http_response.h"

#include <utility>

#include "absl/strings/match.h"
#include "cuvil/server/infer_request_builder.h"
#include "http_infer_decode.h"
#include "http_json.h"

namespace cuvil::http_response {

using json = nlohmann::json;
using http_request::kHeaderLength;
using httplib::Response;

void SetJson(Response& res, int status, std::string body) {
  res.status = status;
  res.body = std::move(body);
  res.headers.erase("Content-Type");  // An error may replace a half-built response.
  res.headers.erase(kHeaderLength);
  res.set_header("Content-Type", kJson);
}

void SetJson(Response& res, int status, const json& body) {
  SetJson(res, status, body.dump(-1, ' ', false, json::error_handler_t::replace));
}

void SetError(Response& res, int status, const std::string& message) {
  std::string body = "{\"error\":";
  http_json::AppendJsonString(message, &body);
  body.push_back('}');
  SetJson(res, status, std::move(body));
}

void SetError(Response& res, const absl::Status& status) {
  int code = status.code() == absl::StatusCode::kUnauthenticated ? 401 : HttpStatusFor(status);
  if (status.code() == absl::StatusCode::kResourceExhausted) {
    // The in-flight budget (InflightBudget): busy now (503, retry) or too large on its own (413).
    const bool busy = absl::StartsWith(status.message(), "server is busy");
    code = busy ? 503 : 413;
    if (busy) res.set_header("Retry-After", "1");
  }
  SetError(res, code, std::string(status.message()));
}

}  // namespace cuvil::http_response
