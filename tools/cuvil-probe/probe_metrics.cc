#include "probe_metrics.h"

#include <linux/types.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <vector>

#include "cuvil_probe.h"

namespace cuvil::probe {
namespace {

// Exported `le` range of the latency histogram: 2^10 ns (about 1 us) .. 2^35 ns (about 34 s).
// Every scrape emits the same bucket set, which histogram_quantile needs.
constexpr int kLatencyFirstBucket = 10;
constexpr int kLatencyLastBucket = 35;
// Batch sizes: le 1 .. 65536.
constexpr int kBatchLastBucket = 16;

using Labels = std::vector<std::pair<std::string_view, std::string>>;

std::string FormatDouble(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  if (ec != std::errc()) return "NaN";
  return std::string(buf, end);
}

std::string NsToSeconds(uint64_t ns) { return FormatDouble(static_cast<double>(ns) / 1e9); }

class Exposition {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += "# HELP ";
    out_ += name;
    out_ += ' ';
    out_ += help;
    out_ += "\n# TYPE ";
    out_ += name;
    out_ += ' ';
    out_ += type;
    out_ += '\n';
  }

  void Sample(std::string_view name, const Labels& labels, std::string_view value) {
    out_ += name;
    if (!labels.empty()) {
      out_ += '{';
      bool first = true;
      for (const auto& [key, label_value] : labels) {
        if (!first) out_ += ',';
        first = false;
        out_ += key;
        out_ += "=\"";
        out_ += EscapeLabelValue(label_value);
        out_ += '"';
      }
      out_ += '}';
    }
    out_ += ' ';
    out_ += value;
    out_ += '\n';
  }

  void Sample(std::string_view name, const Labels& labels, uint64_t value) {
    Sample(name, labels, std::to_string(value));
  }

  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

const EventTotals* FindEvent(const Snapshot& s, uint32_t kind, const std::string& model) {
  auto it = s.events.find({kind, model, std::string()});
  return it == s.events.end() ? nullptr : &it->second;
}

uint64_t Total(const Log2Hist& hist) {
  uint64_t total = 0;
  for (uint64_t c : hist) total += c;
  return total;
}

// Cumulative histogram in `le` form for buckets first..last, then +Inf, _sum and _count.
void EmitHistogram(Exposition& e, std::string_view name, const std::string& model,
                   const Log2Hist& hist, int first, int last, bool ns_to_seconds, uint64_t sum) {
  std::string bucket_name = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (int b = 0; b < first; ++b) cumulative += hist[b];
  for (int b = first; b <= last; ++b) {
    cumulative += hist[b];
    double le = std::ldexp(1.0, b);
    if (ns_to_seconds) le /= 1e9;
    e.Sample(bucket_name, {{"model", model}, {"le", FormatDouble(le)}}, cumulative);
  }
  uint64_t total = Total(hist);
  e.Sample(bucket_name, {{"model", model}, {"le", "+Inf"}}, total);
  e.Sample(std::string(name) + "_sum", {{"model", model}},
           ns_to_seconds ? NsToSeconds(sum) : std::to_string(sum));
  e.Sample(std::string(name) + "_count", {{"model", model}}, total);
}

enum class Field { kCount, kSumSeconds };

struct EventMetric {
  uint32_t kind;
  const char* name;
  const char* help;
  const char* extra_label;  // label for the event's extra string, or nullptr
  Field field;
};

constexpr EventMetric kEventMetrics[] = {
    {CUVIL_EV_REQUEST_START, "cuvil_probe_requests_started_total",
     "Requests started (cuvil:request__start).", nullptr, Field::kCount},
    {CUVIL_EV_BATCH_START, "cuvil_probe_batches_started_total",
     "Batches started (cuvil:batch__start).", nullptr, Field::kCount},
    {CUVIL_EV_BATCH_DONE, "cuvil_probe_batch_duration_seconds_total",
     "Total time spent executing batches (cuvil:batch__done).", nullptr, Field::kSumSeconds},
    {CUVIL_EV_JIT_COMPILE_START, "cuvil_probe_jit_compiles_started_total",
     "JIT compilations started (cuvil:jit__compile__start).", nullptr, Field::kCount},
    {CUVIL_EV_JIT_COMPILE_DONE, "cuvil_probe_jit_compiles_total",
     "JIT compilations finished (cuvil:jit__compile__done).", nullptr, Field::kCount},
    {CUVIL_EV_JIT_COMPILE_DONE, "cuvil_probe_jit_compile_seconds_total",
     "Total JIT compile time (cuvil:jit__compile__done).", nullptr, Field::kSumSeconds},
    {CUVIL_EV_CACHE_HIT, "cuvil_probe_cache_hits_total", "Compile cache hits (cuvil:cache__hit).",
     nullptr, Field::kCount},
    {CUVIL_EV_CACHE_MISS, "cuvil_probe_cache_misses_total",
     "Compile cache misses (cuvil:cache__miss).", nullptr, Field::kCount},
    {CUVIL_EV_PATCH_APPLIED, "cuvil_probe_patches_applied_total",
     "Hot patches applied (cuvil:patch__applied).", "function", Field::kCount},
    {CUVIL_EV_PATCH_ROLLED_BACK, "cuvil_probe_patches_rolled_back_total",
     "Hot patches rolled back (cuvil:patch__rolled__back).", "function", Field::kCount},
    {CUVIL_EV_MODEL_LOAD, "cuvil_probe_model_loads_total", "Model loads (cuvil:model__load).",
     "version", Field::kCount},
    {CUVIL_EV_MODEL_UNLOAD, "cuvil_probe_model_unloads_total",
     "Model unloads (cuvil:model__unload).", "version", Field::kCount},
};

// bpftrace's power-of-two suffixes: 1K = 2^10.
std::string Pow2Label(int exponent) {
  static constexpr const char* kSuffix[] = {"", "K", "M", "G", "T", "P", "E"};
  int unit = exponent / 10;
  return std::to_string(uint64_t{1} << (exponent - unit * 10)) + kSuffix[unit];
}

void AppendHist(std::string& out, const std::string& title, const Log2Hist& hist) {
  int lo = -1, hi = -1;
  uint64_t max = 0;
  for (int b = 0; b < kBuckets; ++b) {
    if (hist[b] == 0) continue;
    if (lo < 0) lo = b;
    hi = b;
    if (hist[b] > max) max = hist[b];
  }
  out += title;
  out += ":\n";
  if (lo < 0) return;
  constexpr int kWidth = 52;
  char line[160];
  for (int b = lo; b <= hi; ++b) {
    std::string range;
    if (b == 0) {
      range = "[0, 1]";
    } else if (b == kBuckets - 1) {
      range = "(" + Pow2Label(b - 1) + ", ...)";
    } else {
      range = "(" + Pow2Label(b - 1) + ", " + Pow2Label(b) + "]";
    }
    int bar = static_cast<int>((hist[b] * kWidth + max - 1) / max);
    std::snprintf(line, sizeof(line), "%-16s %8llu |%-*s|\n", range.c_str(),
                  static_cast<unsigned long long>(hist[b]), kWidth,
                  std::string(static_cast<size_t>(bar), '@').c_str());
    out += line;
  }
}

}  // namespace

std::string RenderPrometheus(const Snapshot& s) {
  Exposition e;

  e.Family("cuvil_probe_request_latency_seconds", "histogram",
           "Request latency from cuvil:request__done, aggregated in log2 buckets by BPF.");
  for (const auto& [model, hist] : s.latency_ns) {
    const EventTotals* done = FindEvent(s, CUVIL_EV_REQUEST_DONE, model);
    EmitHistogram(e, "cuvil_probe_request_latency_seconds", model, hist, kLatencyFirstBucket,
                  kLatencyLastBucket, /*ns_to_seconds=*/true, done ? done->sum_ns : 0);
  }

  e.Family("cuvil_probe_requests_total", "counter",
           "Requests finished (cuvil:request__done) by model and status code.");
  for (const auto& [key, count] : s.requests) {
    e.Sample("cuvil_probe_requests_total",
             {{"model", key.first}, {"status", std::to_string(key.second)}}, count);
  }

  e.Family("cuvil_probe_requests_in_flight", "gauge",
           "Requests started but not finished since the probe attached.");
  for (const auto& [key, totals] : s.events) {
    if (std::get<0>(key) != CUVIL_EV_REQUEST_START || !std::get<2>(key).empty()) continue;
    const std::string& model = std::get<1>(key);
    const EventTotals* done = FindEvent(s, CUVIL_EV_REQUEST_DONE, model);
    uint64_t finished = done ? done->count : 0;
    e.Sample("cuvil_probe_requests_in_flight", {{"model", model}},
             totals.count > finished ? totals.count - finished : 0);
  }

  e.Family("cuvil_probe_batch_size", "histogram",
           "Batch sizes from cuvil:batch__done, aggregated in log2 buckets by BPF.");
  for (const auto& [model, hist] : s.batch_size) {
    const EventTotals* done = FindEvent(s, CUVIL_EV_BATCH_DONE, model);
    EmitHistogram(e, "cuvil_probe_batch_size", model, hist, 0, kBatchLastBucket,
                  /*ns_to_seconds=*/false, done ? done->sum_value : 0);
  }

  for (const EventMetric& m : kEventMetrics) {
    e.Family(m.name, "counter", m.help);
    for (const auto& [key, totals] : s.events) {
      if (std::get<0>(key) != m.kind) continue;
      Labels labels = {{"model", std::get<1>(key)}};
      if (m.extra_label) labels.emplace_back(m.extra_label, std::get<2>(key));
      if (m.field == Field::kCount) {
        e.Sample(m.name, labels, totals.count);
      } else {
        e.Sample(m.name, labels, NsToSeconds(totals.sum_ns));
      }
    }
  }

  e.Family("cuvil_probe_probes_attached", "gauge", "USDT probes of provider cuvil attached.");
  e.Sample("cuvil_probe_probes_attached", {}, std::to_string(s.probes_attached));
  e.Family("cuvil_probe_map_update_failures_total", "counter",
           "Events not recorded because a BPF map was full.");
  e.Sample("cuvil_probe_map_update_failures_total", {}, s.update_failures);
  return e.Take();
}

std::string RenderTerminal(const Snapshot& s) {
  std::string out;
  for (const auto& [model, hist] : s.latency_ns) {
    AppendHist(out, "@latency_ns[" + model + "]", hist);
    out += '\n';
  }
  if (!s.requests.empty()) {
    out += "@requests[model, status]:\n";
    for (const auto& [key, count] : s.requests) {
      out += "  " + key.first + ", " + std::to_string(key.second) + ": " + std::to_string(count) +
             "\n";
    }
    out += '\n';
  }
  for (const auto& [model, hist] : s.batch_size) {
    AppendHist(out, "@batch_size[" + model + "]", hist);
    out += '\n';
  }
  if (s.update_failures > 0) {
    out += "(" + std::to_string(s.update_failures) + " events lost: BPF map full)\n";
  }
  return out;
}

}  // namespace cuvil::probe
