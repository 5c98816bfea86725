// The request cuvil-perf sends: concrete input shapes from the model metadata and the batch size,
// filled with zeros, random values or the contents of <DIR>/<input>.bin.
#ifndef CUVIL_TOOLS_CUVIL_PERF_INPUT_DATA_H_
#define CUVIL_TOOLS_CUVIL_PERF_INPUT_DATA_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "args.h"
#include "infer_client.h"

namespace cuvil::perf {

// Bytes per element of a KServe datatype; 0 for BYTES and unknown types.
int64_t DatatypeSize(absl::string_view datatype);

// The shape of `input` for a request of `batch` samples. A model with max_batch_size > 0 has the
// batch as dim 0 (given as -1); every other dim must be fixed. max_batch_size < 0 means unknown:
// a leading -1 is then taken to be the batch dim.
absl::StatusOr<std::vector<int64_t>> RequestShape(const TensorInfo& input, int64_t max_batch_size,
                                                  int64_t batch);

// Every input of the model, shaped for `options.batch` and filled as `options.input_data` says.
absl::StatusOr<std::vector<InputTensor>> BuildInputs(const ModelInfo& model,
                                                     const PerfOptions& options);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_INPUT_DATA_H_
