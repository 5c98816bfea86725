// Private: how the HTTP front end writes JSON bodies and errors, shared by its route files.
#ifndef CUVIL_SERVER_SRC_HTTP_RESPONSE_H_
#define CUVIL_SERVER_SRC_HTTP_RESPONSE_H_

#include <httplib.h>

#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace cuvil::http_response {

inline constexpr char kJson[] = "application/json";

// Sets `status` and the JSON text `body`, replacing any half-built body and binary-data header.
void SetJson(httplib::Response& res, int status, std::string body);
// As above for a JSON value; invalid UTF-8 in strings is replaced, never thrown on.
void SetJson(httplib::Response& res, int status, const nlohmann::json& body);
// Answers {"error": message} with `status`.
void SetError(httplib::Response& res, int status, const std::string& message);
// Answers {"error": status.message()} with the HTTP status KServe maps `status` to (401 for
// Unauthenticated).
void SetError(httplib::Response& res, const absl::Status& status);

}  // namespace cuvil::http_response

#endif  // CUVIL_SERVER_SRC_HTTP_RESPONSE_H_
