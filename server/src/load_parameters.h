// Private: Triton's model-load parameters, parsed once for gRPC RepositoryModelLoad, HTTP
// POST /v2/repository/models/<m>/load and the admin API's inline load, so the same input gets
// the same answer whichever way it arrives.
#ifndef CUVIL_SERVER_SRC_LOAD_PARAMETERS_H_
#define CUVIL_SERVER_SRC_LOAD_PARAMETERS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

// One load parameter as the protocol carried it. `value` views the caller's buffer and must
// outlive the parse.
struct LoadParameter {
  // kOther: a type no load parameter takes (bool, int64, JSON number/array/null, unset oneof).
  enum class Type { kString, kBytes, kOther };
  std::string key;
  Type type = Type::kOther;
  absl::string_view value;  // kString and kBytes only.
};

// A model-load request before validation.
struct LoadParametersInput {
  absl::string_view model_name;
  std::vector<LoadParameter> parameters;
};

// Validates the model name (ValidateModelName) and each parameter:
//   "config"                   string: the model configuration as JSON (not empty, nesting
//                              bounded as for request bodies);
//   "file:<version>/<x>.onnx"  bytes, or base64 text when sent as a string (Triton's HTTP form):
//                              the ONNX model of that version (positive decimal version without
//                              leading zeros; one file per version; not empty).
// Anything else is InvalidArgument naming the parameter. Parameters are checked in key order so
// the first error reported does not depend on the protocol's map order. On success returns a
// LoadRequest with name, config_json and model_bytes set and wait = true. Thread-safe.
absl::StatusOr<LoadRequest> ParseLoadParameters(const LoadParametersInput& input);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_LOAD_PARAMETERS_H_
