// Command-line options of cuvil-perf and their parsing (pure: no I/O).
#ifndef CUVIL_TOOLS_CUVIL_PERF_ARGS_H_
#define CUVIL_TOOLS_CUVIL_PERF_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cuvil::perf {

enum class Protocol { kGrpc, kHttp };
enum class LoadMode { kConcurrency, kRequestRate };
enum class InputDataKind { kZero, kRandom, kDirectory };
enum class Distribution { kConstant, kPoisson };
enum class SharedMemoryKind { kNone, kSystem };

// START:END:STEP as given by --concurrency-range / --request-rate-range.
struct Range {
  double start = 1;
  double end = 1;
  double step = 1;
};

// Parses "START", "START:END" or "START:END:STEP" (STEP defaults to 1). Values must be positive,
// END >= START; when `integral`, every value must be a whole number.
absl::StatusOr<Range> ParseRange(absl::string_view text, bool integral);

// The load levels a range denotes: START, START+STEP, ... up to END inclusive (at most 1000).
std::vector<double> ExpandRange(const Range& range);

struct PerfOptions {
  std::string model;
  std::string version;  // Empty: the server's choice (latest).
  std::string url;      // HOST:PORT.
  Protocol protocol = Protocol::kGrpc;
  int64_t batch = 1;
  LoadMode mode = LoadMode::kConcurrency;
  Range range;
  Distribution distribution = Distribution::kConstant;
  int64_t max_threads = 16;  // Sender threads in request-rate mode.
  int64_t measurement_interval_ms = 3000;
  int64_t max_requests = 1'000'000;  // Per measurement window.
  double percentile = 99;
  std::string csv_file;
  InputDataKind input_data = InputDataKind::kZero;
  std::string input_dir;
  int64_t warmup_requests = 20;
  int64_t request_timeout_ms = 30'000;
  uint64_t seed = 1;
  SharedMemoryKind shared_memory = SharedMemoryKind::kNone;
  int64_t output_shared_memory_bytes = 102400;  // Each output's region.
  // Models with sequence_batching (Triton's perf_analyzer options): each concurrency slot (in
  // rate mode each of num_sequences) runs sequences of sequence_length steps, varied uniformly
  // by +-sequence_length_variation percent, their ids taken in turn from
  // [sequence_id_start, sequence_id_end].
  int64_t sequence_length = 20;
  double sequence_length_variation = 20;  // Percent.
  uint64_t sequence_id_start = 1;
  uint64_t sequence_id_end = UINT64_MAX;
  int64_t num_sequences = 4;
  bool sequence_flags = false;  // A sequence flag was given (refused for other models).
  bool help = false;
};

// The longest a single load level may run, warmup included, whatever the flags say.
inline constexpr int64_t kHardCapMs = 10 * 60 * 1000;

// Parses the arguments (without argv[0]). Errors name the offending flag.
absl::StatusOr<PerfOptions> ParseArgs(const std::vector<std::string>& args);

const char* UsageText();

}  // namespace cuvil::perf

#endif  // CUVIL_TOOLS_CUVIL_PERF_ARGS_H_
