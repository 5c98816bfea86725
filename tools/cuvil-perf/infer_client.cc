#include "infer_client.h"

#include "grpc_client.h"
#include "http_client.h"

namespace cuvil::perf {

absl::StatusOr<std::unique_ptr<InferClient>> CreateClient(const ClientOptions& options) {
  switch (options.protocol) {
    case Protocol::kGrpc:
      return CreateGrpcClient(options);
    case Protocol::kHttp:
      return CreateHttpClient(options);
  }
  return absl::InvalidArgumentError("unknown protocol");
}

}  // namespace cuvil::perf
