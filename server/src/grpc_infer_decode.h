// Private: turns a gRPC ModelInferRequest into the WireRequest every front end validates with
// BuildInferenceRequest. Kept out of grpc_service.cc so it can be fuzzed without a server.
#ifndef CUVIL_SERVER_SRC_GRPC_INFER_DECODE_H_
#define CUVIL_SERVER_SRC_GRPC_INFER_DECODE_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/server/infer_request_builder.h"
#include "grpc_service.pb.h"

namespace cuvil {

// A view of bytes owned elsewhere. Plain data; thread-compatible.
struct RawBytes {
  const uint8_t* data = nullptr;
  size_t size = 0;
};

// Decodes `q`'s inputs (raw_input_contents, or typed contents converted to raw bytes owned by
// the result's holder), shared memory inputs and outputs (their shared_memory_* parameters; raw
// contents then belong, in order, to the other inputs), requested outputs and the
// priority/timeout parameters. Raw inputs view
// `q`, which must outlive the result. InvalidArgument naming the input for a raw/contents mix, a
// raw_input_contents count that differs from the inputs, or a datatype with no typed contents.
// With `raw_contents`, those stand for q's raw_input_contents (which must be empty): the caller
// read them from the wire itself (grpc_infer_wire.h) and keeps them alive as it does `q`.
// Thread-safe.
absl::StatusOr<WireRequest> DecodeModelInferRequest(
    const inference::ModelInferRequest& q, const std::vector<RawBytes>* raw_contents = nullptr);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_INFER_DECODE_H_
