// InferClient over KServe v2 gRPC (GRPCInferenceService), one channel per client.
#ifndef CUVIL_TOOLS_CUVIL_PERF_GRPC_CLIENT_H_
#define CUVIL_TOOLS_CUVIL_PERF_GRPC_CLIENT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "infer_client.h"

namespace cuvil::perf {

absl::StatusOr<std::unique_ptr<InferClient>> CreateGrpcClient(const ClientOptions& options);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_GRPC_CLIENT_H_
