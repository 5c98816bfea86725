// Private: the warm-up run a model version makes before it is READY (Triton's model_warmup).
#ifndef CUVIL_SERVER_SRC_MODEL_WARMUP_H_
#define CUVIL_SERVER_SRC_MODEL_WARMUP_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "cuvil/server/model_manager.h"

namespace cuvil {

// Runs one warm-up request through `model`'s scheduler and checks it succeeds. Inputs follow
// `warmup` (zero data when null or unnamed; random_data; input_data_file, confined to
// `<model_dir>/warmup/`), with batch size warmup->batch_size() (1 when unset). An input larger
// than max(max_request_bytes, 256 MiB) fails before it is allocated. Thread-safe.
absl::Status RunWarmup(ModelVersion& model, const inference::ModelWarmup* warmup,
                       const std::string& model_dir, uint64_t max_request_bytes);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_MODEL_WARMUP_H_
