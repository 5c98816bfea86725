// InferClient over KServe v2 HTTP/REST with the binary tensor extension, one keep-alive
// connection per client.
#ifndef CUVIL_TOOLS_CUVIL_PERF_HTTP_CLIENT_H_
#define CUVIL_TOOLS_CUVIL_PERF_HTTP_CLIENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "infer_client.h"

namespace cuvil::perf {

absl::StatusOr<std::unique_ptr<InferClient>> CreateHttpClient(const ClientOptions& options);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_HTTP_CLIENT_H_
