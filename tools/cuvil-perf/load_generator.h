// Drives one load level against the server: a warmup, then a measurement window bounded by time
// and by request count, with server statistics snapshotted around the window.
//   concurrency mode: N threads, each with its own connection, sending back to back (closed loop);
//   request-rate mode: a pool of sender threads following a constant or Poisson schedule of R
//   requests/s (open loop; a request is "delayed" when no thread was free at its slot).
#ifndef CUVIL_TOOLS_CUVIL_PERF_LOAD_GENERATOR_H_
#define CUVIL_TOOLS_CUVIL_PERF_LOAD_GENERATOR_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "args.h"
#include "infer_client.h"
#include "latency_stats.h"
#include "server_stats.h"

namespace cuvil::perf {

struct LevelResult {
  LoadMode mode = LoadMode::kConcurrency;
  double level = 0;  // Concurrency or requests/s.
  double window_seconds = 0;
  LatencySummary latency;           // Successful requests of the window.
  double client_infer_per_sec = 0;  // Samples/s: successful requests x batch / window.
  uint64_t errors = 0;
  std::string first_error;
  uint64_t delayed = 0;      // Rate mode: sent over 1 ms after their slot.
  bool have_server = false;  // False when the statistics could not be read.
  ServerSplit server;
  // Sequence models: sequences whose START / END step was answered inside the window (every
  // request of the window is a step).
  bool sequences = false;
  uint64_t sequences_started = 0;
  uint64_t sequences_completed = 0;
};

using ClientFactory = std::function<absl::StatusOr<std::unique_ptr<InferClient>>()>;

class LoadGenerator {
 public:
  // `stats_client` reads the statistics; the senders' clients come from `factory`. With
  // `sequences` (a model with sequence_batching) every request is a step of a sequence (see
  // SequencePlan); the sequences open when a level ends are closed with one END step each.
  LoadGenerator(const PerfOptions& options, ClientFactory factory, InferClient* stats_client,
                std::vector<InputTensor> inputs, std::vector<std::string> outputs,
                bool sequences = false);

  absl::StatusOr<LevelResult> RunLevel(double level);

 private:
  PerfOptions options_;
  ClientFactory factory_;
  InferClient* stats_client_;
  std::vector<InputTensor> inputs_;
  std::vector<std::string> outputs_;
  bool sequences_;
};

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_LOAD_GENERATOR_H_
