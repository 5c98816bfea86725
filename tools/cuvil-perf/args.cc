#include "args.h"

#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cuvil::perf {
namespace {

constexpr char kUsage[] =
    "usage: cuvil-perf -m MODEL [-x VERSION] [-u HOST:PORT] [-i grpc|http] [-b BATCH]\n"
    "                  (--concurrency-range START[:END[:STEP]] |\n"
    "                   --request-rate-range START[:END[:STEP]]) [flags]\n"
    "  -m, --model NAME              model to load (required)\n"
    "  -x, --model-version V         model version (default: the server's latest)\n"
    "  -u, --url HOST:PORT           server (default 127.0.0.1:8001 grpc, 127.0.0.1:8000 http)\n"
    "  -i, --protocol grpc|http      protocol (default grpc)\n"
    "  -b, --batch-size N            samples per request (default 1)\n"
    "  --concurrency-range R         closed loop: R outstanding requests, one connection each\n"
    "  --request-rate-range R        open loop: R requests/s (default if neither: concurrency 1)\n"
    "  --request-distribution D      constant | poisson schedule in rate mode (default constant)\n"
    "  --max-threads N               sender threads in rate mode (default 16)\n"
    "  --measurement-interval MS     measurement window per level (default 3000)\n"
    "  --max-requests N              also end a window after N requests (default 1000000)\n"
    "  --percentile P                extra latency percentile to report (default 99)\n"
    "  -f FILE                       also write the results as CSV\n"
    "  --input-data zero|random|DIR  input values; DIR holds <input>.bin raw little-endian\n"
    "                                (one sample, replicated, or the whole batch) (default zero)\n"
    "  --warmup-requests N           requests sent before each window (default 20)\n"
    "  --request-timeout-ms MS       per-request deadline (default 30000)\n"
    "  --seed N                      random input / poisson schedule seed (default 1)\n"
    "  --shared-memory none|system   send inputs and receive outputs through system shared\n"
    "                                memory regions each client registers (default none)\n"
    "  --output-shared-memory-size B bytes of each output's region (default 102400)\n"
    "sequence models (sequence_batching; each step carries sequence_id/start/end):\n"
    "  --sequence-length N           steps per sequence (default 20)\n"
    "  --sequence-length-variation P vary each sequence's length uniformly by +-P percent\n"
    "                                (default 20; 0: every sequence has N steps)\n"
    "  --sequence-id-range START[:END] ids used in turn, wrapping after END (default 1:2^64-1)\n"
    "  --num-of-sequences N          rate mode: sequences kept open at once (default 4);\n"
    "                                concurrency mode runs one per slot. Alias --sequence-count\n"
    "Each level is capped at 10 minutes, warmup included.\n"
    "Exit status: 0 ok; 1 setup failed (server unreachable, unknown model, bad input, first\n"
    "request failed); 2 bad usage; 3 some requests failed or statistics were unreadable.\n";

absl::StatusOr<int64_t> PositiveInt(absl::string_view flag, absl::string_view value,
                                    bool allow_zero) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < 0 || (v == 0 && !allow_zero)) {
    return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for ", flag, ": want ",
                                                   allow_zero ? "a non-negative" : "a positive",
                                                   " integer"));
  }
  return v;
}

}  // namespace

absl::StatusOr<Range> ParseRange(absl::string_view text, bool integral) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  if (parts.empty() || parts.size() > 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("range '", text, "' is not START, START:END or START:END:STEP"));
  }
  double values[3] = {0, 0, 1};
  for (size_t i = 0; i < parts.size(); ++i) {
    double v = 0;
    if (!absl::SimpleAtod(parts[i], &v) || !std::isfinite(v) || v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("range '", text, "': '", parts[i], "' is not a positive number"));
    }
    if (integral && v != std::floor(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("range '", text, "': '", parts[i], "' is not a whole number"));
    }
    values[i] = v;
  }
  Range r{values[0], parts.size() >= 2 ? values[1] : values[0], values[2]};
  if (r.end < r.start) {
    return absl::InvalidArgumentError(absl::StrCat("range '", text, "': END is below START"));
  }
  if ((r.end - r.start) / r.step >= 1000) {
    return absl::InvalidArgumentError(absl::StrCat("range '", text, "' has over 1000 levels"));
  }
  return r;
}

std::vector<double> ExpandRange(const Range& range) {
  std::vector<double> levels;
  // Tolerate rounding in fractional steps so that 0.1:0.3:0.1 includes 0.3.
  const double eps = range.step * 1e-9;
  for (int i = 0; i < 1000; ++i) {
    double v = range.start + i * range.step;
    if (v > range.end + eps) break;
    levels.push_back(v);
  }
  return levels;
}

absl::StatusOr<PerfOptions> ParseArgs(const std::vector<std::string>& args) {
  PerfOptions o;
  bool have_concurrency = false;
  bool have_rate = false;
  std::string concurrency_text;
  std::string rate_text;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i];
    if (flag == "-h" || flag == "--help") {
      o.help = true;
      return o;
    }
    std::string value;
    if (size_t eq = flag.find('='); flag.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < args.size()) {
      value = args[++i];
    } else {
      return absl::InvalidArgumentError(absl::StrCat(flag, " needs a value"));
    }
    absl::StatusOr<int64_t> n(0);
    if (flag == "-m" || flag == "--model") {
      o.model = value;
    } else if (flag == "-x" || flag == "--model-version") {
      o.version = value;
    } else if (flag == "-u" || flag == "--url") {
      o.url = value;
    } else if (flag == "-i" || flag == "--protocol") {
      if (value == "grpc" || value == "gRPC") {
        o.protocol = Protocol::kGrpc;
      } else if (value == "http" || value == "HTTP") {
        o.protocol = Protocol::kHttp;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("bad value '", value, "' for ", flag, ": want grpc or http"));
      }
    } else if (flag == "-b" || flag == "--batch-size") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.batch = *n;
    } else if (flag == "--concurrency-range") {
      have_concurrency = true;
      concurrency_text = value;
    } else if (flag == "--request-rate-range") {
      have_rate = true;
      rate_text = value;
    } else if (flag == "--request-distribution") {
      if (value == "constant") {
        o.distribution = Distribution::kConstant;
      } else if (value == "poisson") {
        o.distribution = Distribution::kPoisson;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("bad value '", value, "' for ", flag, ": want constant or poisson"));
      }
    } else if (flag == "--max-threads") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.max_threads = *n;
    } else if (flag == "--measurement-interval" || flag == "-p") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.measurement_interval_ms = *n;
    } else if (flag == "--max-requests") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.max_requests = *n;
    } else if (flag == "--percentile") {
      double p = 0;
      if (!absl::SimpleAtod(value, &p) || !(p > 0 && p <= 100)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad value '", value, "' for ", flag, ": want a number in (0, 100]"));
      }
      o.percentile = p;
    } else if (flag == "-f" || flag == "--csv-file") {
      o.csv_file = value;
    } else if (flag == "--input-data") {
      if (value == "zero") {
        o.input_data = InputDataKind::kZero;
      } else if (value == "random") {
        o.input_data = InputDataKind::kRandom;
      } else if (!value.empty()) {
        o.input_data = InputDataKind::kDirectory;
        o.input_dir = value;
      } else {
        return absl::InvalidArgumentError("--input-data needs zero, random or a directory");
      }
    } else if (flag == "--warmup-requests") {
      if (!(n = PositiveInt(flag, value, true)).ok()) return n.status();
      o.warmup_requests = *n;
    } else if (flag == "--request-timeout-ms") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.request_timeout_ms = *n;
    } else if (flag == "--shared-memory") {
      if (value == "none") {
        o.shared_memory = SharedMemoryKind::kNone;
      } else if (value == "system") {
        o.shared_memory = SharedMemoryKind::kSystem;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("bad value '", value, "' for ", flag,
                         ": want none or system (no CUDA on a CPU server)"));
      }
    } else if (flag == "--output-shared-memory-size") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.output_shared_memory_bytes = *n;
    } else if (flag == "--sequence-length") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.sequence_length = *n;
      o.sequence_flags = true;
    } else if (flag == "--sequence-length-variation") {
      double p = 0;
      if (!absl::SimpleAtod(value, &p) || !std::isfinite(p) || p < 0 || p > 100) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad value '", value, "' for ", flag, ": want a percentage in [0, 100]"));
      }
      o.sequence_length_variation = p;
      o.sequence_flags = true;
    } else if (flag == "--sequence-id-range") {
      std::vector<absl::string_view> parts = absl::StrSplit(value, ':');
      uint64_t start = 0, end = UINT64_MAX;
      if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &start) || start == 0 ||
          (parts.size() == 2 && (!absl::SimpleAtoi(parts[1], &end) || end < start))) {
        return absl::InvalidArgumentError(absl::StrCat("bad value '", value, "' for ", flag,
                                                       ": want START[:END], 0 < START <= END"));
      }
      o.sequence_id_start = start;
      o.sequence_id_end = end;
      o.sequence_flags = true;
    } else if (flag == "--num-of-sequences" || flag == "--sequence-count") {
      if (!(n = PositiveInt(flag, value, false)).ok()) return n.status();
      o.num_sequences = *n;
      o.sequence_flags = true;
    } else if (flag == "--seed") {
      if (!(n = PositiveInt(flag, value, true)).ok()) return n.status();
      o.seed = static_cast<uint64_t>(*n);
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag ", flag));
    }
  }
  if (o.model.empty()) return absl::InvalidArgumentError("-m MODEL is required");
  if (have_concurrency && have_rate) {
    return absl::InvalidArgumentError(
        "--concurrency-range and --request-rate-range are mutually exclusive");
  }
  if (have_rate) {
    absl::StatusOr<Range> r = ParseRange(rate_text, /*integral=*/false);
    if (!r.ok()) return r.status();
    o.mode = LoadMode::kRequestRate;
    o.range = *r;
  } else if (have_concurrency) {
    absl::StatusOr<Range> r = ParseRange(concurrency_text, /*integral=*/true);
    if (!r.ok()) return r.status();
    o.mode = LoadMode::kConcurrency;
    o.range = *r;
  }
  if (o.url.empty()) {
    o.url = o.protocol == Protocol::kGrpc ? "127.0.0.1:8001" : "127.0.0.1:8000";
  }
  if (o.url.find("://") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("-u takes HOST:PORT without a scheme, not '", o.url, "'"));
  }
  if (o.measurement_interval_ms > kHardCapMs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--measurement-interval ", o.measurement_interval_ms, " exceeds the cap of ", kHardCapMs));
  }
  return o;
}

const char* UsageText() { return kUsage; }

}  // namespace cuvil::perf
