// Private: decoding of HTTP request bodies — JSON fields, and the infer body with Triton's binary
// tensor extension (a JSON header of Inference-Header-Content-Length bytes, then raw tensors).
// Kept out of http_service.cc so it can be unit-tested and fuzzed without a server.
#ifndef CUVIL_SERVER_SRC_HTTP_INFER_DECODE_H_
#define CUVIL_SERVER_SRC_HTTP_INFER_DECODE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/server/infer_request_builder.h"
#include "nlohmann/json.hpp"

namespace cuvil::http_request {

inline constexpr char kHeaderLength[] = "Inference-Header-Content-Length";

// Parses a JSON body; an empty body is an empty object (bodies are optional on most routes).
// Nesting is bounded before parsing so no body can make the parser or the tree deep.
absl::StatusOr<nlohmann::json> ParseBody(std::string_view body);

// Reads an optional integer that clients send either as a number or as a decimal string.
absl::StatusOr<int64_t> IntField(const nlohmann::json& object, const char* key, int64_t fallback);
absl::StatusOr<bool> BoolField(const nlohmann::json& object, const char* key, bool fallback);
// Empty when absent or null.
absl::StatusOr<std::string> StringField(const nlohmann::json& object, const char* key);

// A tensor's shared_memory_region / _byte_size / _offset parameters from its `params` object, or
// nullopt without a region. InvalidArgument naming `tensor` for a bad value or a missing size.
absl::StatusOr<std::optional<SharedMemoryRef>> SharedMemoryParams(const nlohmann::json& params,
                                                                  const std::string& tensor);

// Bytes of the JSON header: the whole body without an Inference-Header-Content-Length header
// (`header_value` null), else its value, which must be a decimal within the body.
absl::StatusOr<size_t> JsonHeaderSize(const std::string* header_value, size_t body_size);

// What the client asked of one output.
struct OutputRequest {
  std::string name;
  bool binary = false;
  int64_t classification = 0;  // Top-k as BYTES "score:index"; 0: plain tensor.
};

// Everything the InferenceRequest points into: lives until the scheduler drops the request.
struct InferPayload {
  std::shared_ptr<std::string> body;
  std::vector<std::vector<uint8_t>> decoded;
};

struct DecodedInfer {
  WireRequest wire;  // Its holder owns `body` and the decoded JSON tensors.
  std::vector<OutputRequest> outputs;
  bool binary_output = false;  // The request-level binary_data_output parameter.
};

// Decodes an infer request whose JSON header `doc` was parsed from the first `json_size` bytes of
// `body`; the bytes after it are binary tensors, each claimed in input order by its
// binary_data_size parameter and all of them used; inputs and outputs with shared_memory_*
// parameters are passed on as shared memory references. InvalidArgument naming the field or
// input. May throw nlohmann::json::exception like the JSON accessors.
absl::StatusOr<DecodedInfer> DecodeInferBody(const nlohmann::json& doc,
                                             std::shared_ptr<std::string> body, size_t json_size);

}  // namespace cuvil::http_request

#endif  // CUVIL_SERVER_SRC_HTTP_INFER_DECODE_H_
