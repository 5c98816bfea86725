// cuvil-perf: a load generator for KServe v2 inference servers in the spirit of Triton's
// perf_analyzer. See `cuvil-perf --help`.
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "args.h"
#include "infer_client.h"
#include "input_data.h"
#include "load_generator.h"
#include "report.h"

namespace cuvil::perf {
namespace {

int Fail(const absl::Status& s) {
  std::string msg(s.message());
  std::replace(msg.begin(), msg.end(), '\n', ' ');
  std::fprintf(stderr, "cuvil-perf: error: %s\n", msg.c_str());
  return 1;
}

int Run(const std::vector<std::string>& args) {
  absl::StatusOr<PerfOptions> parsed = ParseArgs(args);
  if (!parsed.ok()) {
    std::fprintf(stderr, "cuvil-perf: error: %s\n%s",
                 std::string(parsed.status().message()).c_str(), UsageText());
    return 2;
  }
  const PerfOptions& options = *parsed;
  if (options.help) {
    std::printf("%s", UsageText());
    return 0;
  }

  ClientOptions client_options;
  client_options.protocol = options.protocol;
  client_options.url = options.url;
  client_options.model = options.model;
  client_options.version = options.version;
  client_options.timeout_ms = options.request_timeout_ms;
  client_options.shared_memory = options.shared_memory;
  client_options.output_shared_memory_bytes = options.output_shared_memory_bytes;
  auto factory = [client_options] { return CreateClient(client_options); };

  absl::StatusOr<std::unique_ptr<InferClient>> control = factory();
  if (!control.ok()) return Fail(control.status());
  absl::StatusOr<ModelInfo> model = (*control)->GetModelInfo();
  if (!model.ok()) {
    if (absl::IsNotFound(model.status())) {
      return Fail(absl::NotFoundError(absl::StrCat(
          "model '", options.model, "'", options.version.empty() ? "" : " version ",
          options.version, " is not known to ", options.url, ": ", model.status().message())));
    }
    return Fail(model.status());
  }
  absl::StatusOr<std::vector<InputTensor>> inputs = BuildInputs(*model, options);
  if (!inputs.ok()) return Fail(inputs.status());
  std::vector<std::string> outputs;
  for (const TensorInfo& t : model->outputs) outputs.push_back(t.name);

  if (options.sequence_flags && !model->sequence_batching) {
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("the --sequence-* options need a model with sequence_batching; '",
                     options.model, "' has none")));
  }
  // One request up front: a wrong shape or a failing model is reported once, clearly. For a
  // sequence model it is a whole sequence of one step.
  if (absl::Status s = (*control)->Prepare(*inputs, outputs); !s.ok()) return Fail(s);
  if (model->sequence_batching) (*control)->SetSequence(options.sequence_id_start, true, true);
  if (absl::Status s = (*control)->Infer(); !s.ok()) {
    return Fail(absl::Status(s.code(), absl::StrCat("the first request failed: ", s.message())));
  }
  if (absl::StatusOr<ServerStats> s = (*control)->GetStatistics(); !s.ok()) {
    std::fprintf(stderr, "cuvil-perf: warning: no server statistics (%s)\n",
                 std::string(s.status().message()).c_str());
  }

  std::printf(
      "cuvil-perf: model %s%s%s over %s%s at %s, batch %lld, %s window %lld ms / %lld requests\n",
      options.model.c_str(), options.version.empty() ? "" : " version ", options.version.c_str(),
      options.protocol == Protocol::kGrpc ? "grpc" : "http",
      options.shared_memory == SharedMemoryKind::kSystem ? " + system shared memory" : "",
      options.url.c_str(), static_cast<long long>(options.batch),
      options.mode == LoadMode::kConcurrency ? "closed loop," : "open loop,",
      static_cast<long long>(options.measurement_interval_ms),
      static_cast<long long>(options.max_requests));
  if (model->sequence_batching) {
    std::printf("cuvil-perf: sequences of %lld steps (+-%g%%), ids %llu:%llu%s\n",
                static_cast<long long>(options.sequence_length), options.sequence_length_variation,
                static_cast<unsigned long long>(options.sequence_id_start),
                static_cast<unsigned long long>(options.sequence_id_end),
                options.mode == LoadMode::kRequestRate
                    ? absl::StrCat(", ", options.num_sequences, " open at once").c_str()
                    : ", one per concurrency slot");
  }
  std::fflush(stdout);

  LoadGenerator generator(options, factory, control->get(), std::move(*inputs), outputs,
                          model->sequence_batching);
  std::vector<LevelResult> results;
  bool any_errors = false;
  for (double level : ExpandRange(options.range)) {
    absl::StatusOr<LevelResult> r = generator.RunLevel(level);
    if (!r.ok()) return Fail(r.status());
    std::printf("%s\n", FormatLevel(*r).c_str());
    if (!r->first_error.empty()) {
      std::fprintf(stderr, "cuvil-perf: first error: %s\n", r->first_error.c_str());
    }
    std::fflush(stdout);
    any_errors = any_errors || r->errors > 0 || !r->have_server;
    results.push_back(std::move(*r));
    if (!options.csv_file.empty()) {
      // Rewritten after every level so an interrupted run keeps what it measured.
      if (absl::Status s = WriteCsv(options.csv_file, results, options.percentile); !s.ok()) {
        return Fail(s);
      }
    }
  }
  return any_errors ? 3 : 0;
}

}  // namespace
}  // namespace cuvil::perf

int main(int argc, char** argv) {
  signal(SIGPIPE, SIG_IGN);
  return cuvil::perf::Run(std::vector<std::string>(argv + 1, argv + argc));
}
