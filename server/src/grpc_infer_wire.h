// Private: ModelInfer's messages read from and written to gRPC's byte buffers directly, so tensor
// bytes are copied once on the way in and not at all on the way out.
//
// Parsed by protobuf, a request's raw_input_contents become std::strings: a fresh multi-megabyte
// block per input per request, mapped and faulted in page by page (the allocator policy maps every
// block over 128 KiB) — 5 of the 6 ms resnet18's 4.8 MB batch spent outside compute. Here each
// entry is copied from gRPC's receive slices straight into a recycled aligned buffer, and the
// response's raw_output_contents are slices that point at the output tensors.
#ifndef CUVIL_SERVER_SRC_GRPC_INFER_WIRE_H_
#define CUVIL_SERVER_SRC_GRPC_INFER_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "grpc_infer_decode.h"
#include "grpc_service.pb.h"
#include "recycled_buffers.h"

namespace cuvil {

// A ModelInferRequest with its raw_input_contents held apart. Thread-compatible.
struct SplitInferRequest {
  inference::ModelInferRequest header;  // Every field but raw_input_contents.
  std::vector<RawBytes> raw;            // raw_input_contents, in order, 64-byte aligned.
  std::shared_ptr<const void> holder;   // Owns the bytes `raw` points at.
};

// Parses the serialised ModelInferRequest in `wire` into `*out`, copying raw_input_contents into
// one buffer from `buffers`. InvalidArgument for bytes that are not a ModelInferRequest (a
// truncated field, a length past the end, a group). Thread-compatible (`wire` is read only).
absl::Status ReadModelInferRequest(grpc::ByteBuffer& wire,
                                   const std::shared_ptr<RecycledBuffers>& buffers,
                                   SplitInferRequest* out);

// Serialises `header` followed by one raw_output_contents entry per element of `raw` into
// `*wire`. Entries of 4 KiB and more are not copied: their slices point at the bytes and keep
// `holder` (which must own them) alive until gRPC has sent them. Thread-compatible.
void WriteModelInferResponse(const inference::ModelInferResponse& header,
                             const std::vector<RawBytes>& raw, std::shared_ptr<const void> holder,
                             grpc::ByteBuffer* wire);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_INFER_WIRE_H_
