// Private: the one rule for model names, wherever a name enters the server (repository lookups,
// Triton load/unload, the admin API's inline load).
#ifndef CUVIL_SERVER_SRC_MODEL_NAME_H_
#define CUVIL_SERVER_SRC_MODEL_NAME_H_

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cuvil {

// Longest accepted name in bytes: the usual file-system limit for one path component.
inline constexpr size_t kMaxModelNameBytes = 255;

// OK when `name` can be a model directory name: non-empty, at most kMaxModelNameBytes, not "."
// or "..", and free of '/', '\\', NUL and other control characters. Otherwise InvalidArgument
// "invalid model name "<escaped>": <why>". Pure function; thread-safe.
absl::Status ValidateModelName(absl::string_view name);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_MODEL_NAME_H_
