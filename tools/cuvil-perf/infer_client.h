// One connection to an inference server, whatever the protocol: model metadata, statistics and
// repeated inference of one prepared request. A client is used by one thread at a time.
#ifndef CUVIL_TOOLS_CUVIL_PERF_INFER_CLIENT_H_
#define CUVIL_TOOLS_CUVIL_PERF_INFER_CLIENT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "args.h"
#include "server_stats.h"

namespace cuvil::perf {

struct TensorInfo {
  std::string name;
  std::string datatype;        // KServe datatype string (FP32, INT64, ...).
  std::vector<int64_t> shape;  // -1: variable; includes the batch dim when max_batch_size > 0.
};

struct ModelInfo {
  std::string name;
  std::vector<std::string> versions;
  std::vector<TensorInfo> inputs;
  std::vector<TensorInfo> outputs;
  int64_t max_batch_size = 0;  // From the model config; 0: no batch dimension.
  // The config has sequence_batching. The inputs the server fills (its control and state
  // inputs) and the state outputs are left out of `inputs` and `outputs`.
  bool sequence_batching = false;
};

// An input of the request sent over and over: concrete shape and raw little-endian bytes.
struct InputTensor {
  std::string name;
  std::string datatype;
  std::vector<int64_t> shape;
  std::string data;
};

class InferClient {
 public:
  virtual ~InferClient() = default;

  // Metadata plus the config's max_batch_size. NOT_FOUND for an unknown model, UNAVAILABLE when
  // the server cannot be reached.
  virtual absl::StatusOr<ModelInfo> GetModelInfo() = 0;
  virtual absl::StatusOr<ServerStats> GetStatistics() = 0;
  // Builds the request Infer() sends; outputs are all requested (binary where the protocol can).
  virtual absl::Status Prepare(const std::vector<InputTensor>& inputs,
                               const std::vector<std::string>& outputs) = 0;
  // Makes the prepared request a step of sequence `id` (the sequence_id, sequence_start and
  // sequence_end parameters) until the next call; id 0 sends no sequence parameters.
  virtual void SetSequence(uint64_t id, bool start, bool end) = 0;
  // Sends the prepared request and waits for its response.
  virtual absl::Status Infer() = 0;
};

struct ClientOptions {
  Protocol protocol = Protocol::kGrpc;
  std::string url;  // HOST:PORT.
  std::string model;
  std::string version;
  int64_t timeout_ms = 30'000;
  // kSystem: Prepare puts the inputs in a shared memory object it registers (and a region of
  // `output_shared_memory_bytes` per output), and requests name those regions.
  SharedMemoryKind shared_memory = SharedMemoryKind::kNone;
  int64_t output_shared_memory_bytes = 102400;
};

// Leaves the inputs named in `filled` and the outputs named in `state_outputs` out of `info`
// (a sequence model's tensors the server fills or keeps).
void RemoveSequenceTensors(const std::vector<std::string>& filled,
                           const std::vector<std::string>& state_outputs, ModelInfo* info);

// Each call opens its own connection (no sharing between clients).
absl::StatusOr<std::unique_ptr<InferClient>> CreateClient(const ClientOptions& options);

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_INFER_CLIENT_H_
