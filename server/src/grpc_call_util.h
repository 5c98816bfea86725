// Private: conversions every gRPC handler of the server uses.
#ifndef CUVIL_SERVER_SRC_GRPC_CALL_UTIL_H_
#define CUVIL_SERVER_SRC_GRPC_CALL_UTIL_H_

#include <grpcpp/grpcpp.h>

#include <string>

#include "absl/status/status.h"

namespace cuvil {

// The gRPC status carrying `s`'s code and message (absl and gRPC share the canonical codes).
inline grpc::Status ToGrpc(const absl::Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

// The value of the client's metadata entry `key`, or "" when it sent none.
inline std::string ClientMetadata(const grpc::ServerContext* ctx, const std::string& key) {
  auto it = ctx->client_metadata().find(key);
  if (it == ctx->client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_CALL_UTIL_H_
