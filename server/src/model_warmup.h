// Private: the warm-up run a model version makes before it is READY (Triton's model_warmup).
#ifndef CUVIL_SERVER_SRC_MODEL_WARMUP_H_
#define CUVIL_SERVER_SRC_MODEL_WARMUP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

// The file `name` of the model folder's subfolder `folder` (Triton's places for data files:
// "warmup", "initial_state"): a relative path without "..", no symlink leading out of the
// subfolder. InvalidArgument naming `what` otherwise, or when the model has no folder (an
// inline load: `model_dir` empty). Does not check that the file exists.
absl::StatusOr<std::string> ModelDataFilePath(const std::string& model_dir,
                                              const std::string& folder, const std::string& name,
                                              const std::string& what);

// Runs one warm-up request through `model`'s scheduler and checks it succeeds. Inputs follow
// `warmup` (zero data when null or unnamed; random_data; input_data_file, confined to
// `<model_dir>/warmup/`), with batch size warmup->batch_size() (1 when unset). An input larger
// than max(max_request_bytes, 256 MiB) fails before it is allocated. Thread-safe.
absl::Status RunWarmup(ModelVersion& model, const inference::ModelWarmup* warmup,
                       const std::string& model_dir, uint64_t max_request_bytes);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_MODEL_WARMUP_H_
