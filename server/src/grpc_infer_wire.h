// Private: ModelInfer's messages read from and written to gRPC's byte buffers directly, so tensor
// bytes are copied once on the way in and not at all on the way out.
//
// Parsed by protobuf, a request's raw_input_contents become std::strings: a fresh multi-megabyte
// block per input per request, mapped and faulted in page by page (the allocator policy maps every
// block over 128 KiB) — 5 of the 6 ms resnet18's 4.8 MB batch spent outside compute. Here each
// entry is copied from gRPC's receive slices straight into a recycled aligned buffer, and the
// response's raw_output_contents are slices that point at the output tensors.
//
// The reader is also where an unauthenticated request's memory is bounded: its first pass only
// counts (entries, parameters, dims, typed contents) and allocates nothing in proportion to the
// message, and the counts are checked against the model the request names before the header is
// parsed or any buffer is taken. Without that, 60 MiB of 1-byte raw entries took a 64-byte slot
// each (1.7 GB), and 60 MiB of empty `inputs` parsed into 6.8 GB of messages.
#ifndef CUVIL_SERVER_SRC_GRPC_INFER_WIRE_H_
#define CUVIL_SERVER_SRC_GRPC_INFER_WIRE_H_

#include <grpcpp/support/byte_buffer.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpc_infer_decode.h"
#include "grpc_service.pb.h"
#include "recycled_buffers.h"

namespace cuvil {

// A ModelInferRequest with its raw_input_contents held apart. Thread-compatible.
struct SplitInferRequest {
  inference::ModelInferRequest header;  // Every field but raw_input_contents.
  std::vector<RawBytes> raw;            // raw_input_contents, in order, 64-byte aligned.
  std::shared_ptr<const void> holder;   // Owns the bytes `raw` points at.
  size_t reserved_bytes = 0;            // Size of the buffer taken for `raw` (0: none).
};

// What the reader's first pass counts in a request, before it allocates anything in proportion
// to the message. Counting stops (and the request is refused) at InferWireLimits' hard caps, so
// a count may stand for "more than the cap". Plain data.
struct InferWireCounts {
  std::string model_name;     // The last model_name field, as protobuf keeps it.
  std::string model_version;  // Likewise.
  size_t inputs = 0;
  size_t outputs = 0;
  size_t raw_entries = 0;           // raw_input_contents entries.
  uint64_t raw_bytes = 0;           // Their lengths, summed.
  uint64_t raw_reserved_bytes = 0;  // The buffer they take: each entry 64-byte aligned.
  size_t parameters = 0;            // The request's own parameters.
  size_t tensor_parameters = 0;     // The most parameters of any input or output.
  size_t shape_dims = 0;            // The most shape dims of any input.
  uint64_t contents_bytes = 0;      // What the inputs' typed contents take once parsed.
  size_t unknown_fields = 0;        // Fields protobuf would keep as unknown, at every level.
};

// The most a request may hold. The defaults are the hard caps every request obeys (the first
// pass stops at them); a caller lowers them to what the model the request names takes.
// Plain data.
struct InferWireLimits {
  static constexpr size_t kMaxEntries = 4096;
  static constexpr size_t kMaxParameters = 64;
  static constexpr size_t kMaxShapeDims = 64;
  static constexpr size_t kMaxUnknownFields = 64;
  size_t max_inputs = kMaxEntries;   // Also bounds raw_input_contents entries.
  size_t max_outputs = kMaxEntries;  // Requested outputs.
  size_t max_parameters = kMaxParameters;
  size_t max_tensor_parameters = kMaxParameters;
  size_t max_shape_dims = kMaxShapeDims;
  size_t max_unknown_fields = kMaxUnknownFields;
  // Bounds the bytes the inputs' shapes and datatypes declare (inputs in shared memory aside),
  // and the typed contents once parsed. The raw entries may not hold more than the inputs
  // declare, so the buffer taken for them is bounded by the declared tensors.
  uint64_t max_declared_bytes = UINT64_MAX;
  // "model 'mlp'", for messages; empty: the hard caps.
  std::string what;
};

// Called with the first pass's counts (model name and version included) once the whole message
// has been counted: returns the limits for the model it names, or the request's error (e.g.
// NotFound for an unknown model, which then costs nothing more). Runs on the reading thread.
using InferWireLimitsFn = std::function<absl::StatusOr<InferWireLimits>(const InferWireCounts&)>;

// Parses the serialised ModelInferRequest in `wire` into `*out`, copying raw_input_contents into
// one buffer from `buffers`. InvalidArgument for bytes that are not a ModelInferRequest (a
// truncated field, a length past the end, a group), and for a request above the hard caps or the
// limits `limits` returns (absent: the hard caps alone): too many entries, parameters or dims,
// a declared shape above max_declared_bytes, raw entries holding more than the inputs declare.
// Nothing proportional to the message is allocated before those checks pass; the error of
// `limits` is returned as is. Accepts nothing protobuf would refuse. Thread-compatible (`wire` is
// read only).
absl::Status ReadModelInferRequest(grpc::ByteBuffer& wire,
                                   const std::shared_ptr<RecycledBuffers>& buffers,
                                   SplitInferRequest* out, const InferWireLimitsFn& limits = {});

// Serialises `header` followed by one raw_output_contents entry per element of `raw` into
// `*wire`. Entries of 4 KiB and more are not copied: their slices point at the bytes and keep
// `holder` (which must own them) alive until gRPC has sent them. Thread-compatible.
void WriteModelInferResponse(const inference::ModelInferResponse& header,
                             const std::vector<RawBytes>& raw, std::shared_ptr<const void> holder,
                             grpc::ByteBuffer* wire);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_GRPC_INFER_WIRE_H_
