#include "cuvil/observability/metrics.h"

#include <sched.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"

namespace cuvil::observability {
namespace {

class SteadyClockImpl final : public Clock {
 public:
  int64_t NowNanos() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

size_t ComputeShardCount() {
  unsigned hw = std::thread::hardware_concurrency();
  if (hw == 0) hw = 1;
  return std::min<size_t>(16, std::bit_ceil(static_cast<size_t>(hw)));
}

// Atomically adds `d` to a double stored as its bit pattern.
inline void AtomicAddDouble(std::atomic<uint64_t>& cell, double d) {
  uint64_t old_bits = cell.load(std::memory_order_relaxed);
  while (!cell.compare_exchange_weak(old_bits,
                                     std::bit_cast<uint64_t>(std::bit_cast<double>(old_bits) + d),
                                     std::memory_order_relaxed, std::memory_order_relaxed)) {
  }
}

}  // namespace

const Clock* SteadyClock() {
  static const SteadyClockImpl* clock = new SteadyClockImpl();
  return clock;
}

namespace internal {
size_t ShardCount() {
  static const size_t count = ComputeShardCount();  // function-local: safe in static init
  return count;
}
size_t CurrentShard() {
  // glibc >= 2.35 reads the CPU number from the thread's rseq area: a few instructions.
  int cpu = sched_getcpu();
  return cpu < 0 ? 0 : static_cast<size_t>(cpu) & (ShardCount() - 1);
}
ShardedSlots::ShardedSlots(size_t slots_per_shard)
    : stride_((slots_per_shard + kPerLine - 1) / kPerLine * kPerLine),
      lines_(std::make_unique<Line[]>(stride_ / kPerLine * ShardCount())) {}
}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Counter

Counter::Counter() : cells_(std::make_unique<Cell[]>(internal::ShardCount())) {}

void Counter::Increment(uint64_t n) {
  cells_[internal::CurrentShard()].value.fetch_add(n, std::memory_order_relaxed);
}

uint64_t Counter::Value() const {
  uint64_t total = 0;
  for (size_t i = 0; i < internal::ShardCount(); ++i)
    total += cells_[i].value.load(std::memory_order_relaxed);
  return total;
}

// ---------------------------------------------------------------------------------------------
// Histogram

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), cells_(bounds_.size() + 2) {}

void Histogram::Observe(double v) {
  // Buckets are few (tens): a linear scan beats binary search and has no data-dependent calls.
  size_t bucket = 0;
  const size_t n = bounds_.size();
  while (bucket < n && v > bounds_[bucket]) ++bucket;
  const size_t shard = internal::CurrentShard();
  cells_.at(shard, 1 + bucket).fetch_add(1, std::memory_order_relaxed);
  AtomicAddDouble(cells_.at(shard, 0), v);
}

void Histogram::Snapshot(MetricPoint* out) const {
  const size_t n = bounds_.size();
  std::vector<uint64_t> counts(n + 1, 0);
  double sum = 0;
  for (size_t s = 0; s < internal::ShardCount(); ++s) {
    sum += std::bit_cast<double>(cells_.at(s, 0).load(std::memory_order_relaxed));
    for (size_t b = 0; b <= n; ++b)
      counts[b] += cells_.at(s, 1 + b).load(std::memory_order_relaxed);
  }
  for (size_t b = 1; b <= n; ++b) counts[b] += counts[b - 1];
  out->bucket_bounds = bounds_;
  out->count = counts[n];
  out->cumulative_counts = std::move(counts);
  out->sum = sum;
}

// ---------------------------------------------------------------------------------------------
// Summary

namespace {
constexpr int64_t kEpochClearing = -1;
constexpr int64_t kEpochEmpty = std::numeric_limits<int64_t>::min();
}  // namespace

struct Summary::SubWindow {
  // Index of the sub-window period (now / sub_window_ns) the counts belong to, kEpochEmpty before
  // first use, kEpochClearing while a writer recycles it.
  std::atomic<int64_t> epoch{kEpochEmpty};
  std::atomic<uint32_t> counts[kBuckets];
  SubWindow() {
    for (auto& c : counts) c.store(0, std::memory_order_relaxed);
  }
};

size_t Summary::BucketIndex(double v) {
  constexpr double kMin = 0x1p-30;
  constexpr double kMax = 0x1p10;
  if (!(v > kMin)) return 0;  // also NaN, zero and negatives
  if (v >= kMax) return kBuckets - 1;
  const uint64_t bits = std::bit_cast<uint64_t>(v);
  const int exponent = static_cast<int>((bits >> 52) & 0x7ff) - 1023;
  const size_t sub = (bits >> (52 - kSubBucketBits)) & ((1u << kSubBucketBits) - 1);
  return (static_cast<size_t>(exponent - kMinExponent) << kSubBucketBits) | sub;
}

double Summary::BucketValue(size_t index) {
  const int exponent = static_cast<int>(index >> kSubBucketBits) + kMinExponent;
  const double sub = static_cast<double>(index & ((1u << kSubBucketBits) - 1));
  const double scale = std::ldexp(1.0, exponent);
  return scale * (1.0 + (sub + 0.5) / (1u << kSubBucketBits));
}

Summary::Summary(SummaryOptions options)
    : options_(std::move(options)),
      sub_window_ns_(std::max<int64_t>(1, options_.window_ns / std::max(1, options_.sub_windows))),
      sum_cells_(1) {
  if (options_.sub_windows < 1) options_.sub_windows = 1;
  if (options_.clock == nullptr) options_.clock = SteadyClock();
  ring_ = std::make_unique<SubWindow[]>(options_.sub_windows);
}

Summary::~Summary() = default;

void Summary::Observe(double v) {
  count_.Increment();
  AtomicAddDouble(sum_cells_.at(internal::CurrentShard(), 0), v);

  const int64_t slot = options_.clock->NowNanos() / sub_window_ns_;
  SubWindow& w = ring_[static_cast<size_t>(slot % options_.sub_windows)];
  int64_t epoch = w.epoch.load(std::memory_order_acquire);
  if (epoch != slot) {
    if (epoch > slot || epoch == kEpochClearing) return;  // stale clock or being recycled
    if (!w.epoch.compare_exchange_strong(epoch, kEpochClearing, std::memory_order_acq_rel)) {
      return;  // another writer is recycling it
    }
    for (auto& c : w.counts) c.store(0, std::memory_order_relaxed);
    w.epoch.store(slot, std::memory_order_release);
  }
  w.counts[BucketIndex(v)].fetch_add(1, std::memory_order_relaxed);
}

std::vector<double> Summary::QuantilesAt(const std::vector<double>& qs, int64_t now) const {
  const int64_t slot = now / sub_window_ns_;
  std::vector<uint64_t> merged(kBuckets, 0);
  std::vector<uint32_t> local(kBuckets);
  uint64_t total = 0;
  for (int i = 0; i < options_.sub_windows; ++i) {
    const SubWindow& w = ring_[i];
    const int64_t epoch = w.epoch.load(std::memory_order_acquire);
    if (epoch < 0 || epoch > slot || epoch <= slot - options_.sub_windows) continue;
    uint64_t sub_total = 0;
    for (size_t b = 0; b < kBuckets; ++b) {
      local[b] = w.counts[b].load(std::memory_order_relaxed);
      sub_total += local[b];
    }
    // Skip a sub-window recycled while we read it.
    if (w.epoch.load(std::memory_order_acquire) != epoch) continue;
    for (size_t b = 0; b < kBuckets; ++b) merged[b] += local[b];
    total += sub_total;
  }
  std::vector<double> out;
  out.reserve(qs.size());
  for (double q : qs) {
    if (total == 0) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    const double clamped = std::clamp(q, 0.0, 1.0);
    const uint64_t rank = std::max<uint64_t>(
        1, static_cast<uint64_t>(std::ceil(clamped * static_cast<double>(total))));
    uint64_t cumulative = 0;
    size_t b = 0;
    for (; b < kBuckets; ++b) {
      cumulative += merged[b];
      if (cumulative >= rank) break;
    }
    out.push_back(BucketValue(std::min(b, kBuckets - 1)));
  }
  return out;
}

double Summary::Quantile(double q) const { return QuantilesAt({q}, options_.clock->NowNanos())[0]; }

void Summary::Snapshot(MetricPoint* out) const {
  const std::vector<double> values = QuantilesAt(options_.quantiles, options_.clock->NowNanos());
  out->quantiles.clear();
  for (size_t i = 0; i < values.size(); ++i) {
    out->quantiles.emplace_back(options_.quantiles[i], values[i]);
  }
  double sum = 0;
  for (size_t s = 0; s < internal::ShardCount(); ++s) {
    sum += std::bit_cast<double>(sum_cells_.at(s, 0).load(std::memory_order_relaxed));
  }
  out->sum = sum;
  out->count = count_.Value();
}

// ---------------------------------------------------------------------------------------------
// Families and registry

namespace internal {
MetricFamilySnapshot FamilyBase::Header() const {
  MetricFamilySnapshot family;
  family.name = name_;
  family.help = help_;
  family.unit = unit_;
  family.type = type_;
  family.counter_total_suffix = counter_total_suffix_;
  return family;
}

std::vector<Label> FamilyBase::MakeLabels(const std::vector<std::string>& values) const {
  std::vector<Label> labels;
  labels.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) labels.push_back({label_names_[i], values[i]});
  return labels;
}
}  // namespace internal

bool IsValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool IsValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

absl::Status Registry::Reserve(const std::string& name, const std::vector<std::string>& label_names,
                               const std::string& unit) {
  if (!IsValidMetricName(name)) {
    return absl::InvalidArgumentError(absl::StrCat("invalid metric name '", name, "'"));
  }
  for (const auto& label : label_names) {
    if (!IsValidLabelName(label)) {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid label name '", label, "' in metric ", name));
    }
    if (std::count(label_names.begin(), label_names.end(), label) > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("duplicate label name '", label, "' in metric ", name));
    }
  }
  if (!unit.empty() && !std::string_view(name).ends_with("_" + unit)) {
    return absl::InvalidArgumentError(
        absl::StrCat("metric ", name, " has unit ", unit, " but does not end in _", unit));
  }
  if (std::find(names_.begin(), names_.end(), name) != names_.end()) {
    return absl::AlreadyExistsError(absl::StrCat("metric ", name, " already registered"));
  }
  names_.push_back(name);
  return absl::OkStatus();
}

absl::StatusOr<Family<Counter>*> Registry::AddCounter(std::string name, std::string help,
                                                      std::vector<std::string> label_names,
                                                      std::string unit, bool total_suffix) {
  absl::MutexLock lock(&mu_);
  if (total_suffix && name.ends_with("_total")) {
    return absl::InvalidArgumentError(
        absl::StrCat("counter ", name, ": give the name without _total; it is appended"));
  }
  if (absl::Status s = Reserve(name, label_names, unit); !s.ok()) return s;
  auto family = std::make_unique<Family<Counter>>(std::move(name), std::move(help), std::move(unit),
                                                  MetricType::kCounter, std::move(label_names),
                                                  [] { return std::make_shared<Counter>(); });
  family->set_counter_total_suffix(total_suffix);
  Family<Counter>* raw = family.get();
  collectors_.push_back(std::move(family));
  return raw;
}

absl::StatusOr<Family<Gauge>*> Registry::AddGauge(std::string name, std::string help,
                                                  std::vector<std::string> label_names,
                                                  std::string unit) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Reserve(name, label_names, unit); !s.ok()) return s;
  auto family = std::make_unique<Family<Gauge>>(std::move(name), std::move(help), std::move(unit),
                                                MetricType::kGauge, std::move(label_names),
                                                [] { return std::make_shared<Gauge>(); });
  Family<Gauge>* raw = family.get();
  collectors_.push_back(std::move(family));
  return raw;
}

absl::StatusOr<Family<Histogram>*> Registry::AddHistogram(std::string name, std::string help,
                                                          std::vector<std::string> label_names,
                                                          std::vector<double> bounds,
                                                          std::string unit) {
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]) || (i > 0 && bounds[i] <= bounds[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "histogram ", name, ": bucket bounds must be finite and strictly increasing"));
    }
  }
  if (std::find(label_names.begin(), label_names.end(), "le") != label_names.end()) {
    return absl::InvalidArgumentError(absl::StrCat("histogram ", name, ": label 'le' is reserved"));
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Reserve(name, label_names, unit); !s.ok()) return s;
  auto family = std::make_unique<Family<Histogram>>(
      std::move(name), std::move(help), std::move(unit), MetricType::kHistogram,
      std::move(label_names),
      [bounds = std::move(bounds)] { return std::make_shared<Histogram>(bounds); });
  Family<Histogram>* raw = family.get();
  collectors_.push_back(std::move(family));
  return raw;
}

absl::StatusOr<Family<Summary>*> Registry::AddSummary(std::string name, std::string help,
                                                      std::vector<std::string> label_names,
                                                      SummaryOptions options, std::string unit) {
  if (std::find(label_names.begin(), label_names.end(), "quantile") != label_names.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("summary ", name, ": label 'quantile' is reserved"));
  }
  if (options.window_ns <= 0 || options.sub_windows < 1) {
    return absl::InvalidArgumentError(absl::StrCat("summary ", name, ": bad window"));
  }
  for (double q : options.quantiles) {
    if (!(q >= 0 && q <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat("summary ", name, ": bad quantile ", q));
    }
  }
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Reserve(name, label_names, unit); !s.ok()) return s;
  auto family = std::make_unique<Family<Summary>>(
      std::move(name), std::move(help), std::move(unit), MetricType::kSummary,
      std::move(label_names),
      [options = std::move(options)] { return std::make_shared<Summary>(options); });
  Family<Summary>* raw = family.get();
  collectors_.push_back(std::move(family));
  return raw;
}

absl::Status Registry::AddCollector(std::unique_ptr<Collector> collector,
                                    std::vector<std::string> names) {
  absl::MutexLock lock(&mu_);
  for (const auto& name : names) {
    if (absl::Status s = Reserve(name, {}, ""); !s.ok()) return s;
  }
  collectors_.push_back(std::move(collector));
  return absl::OkStatus();
}

std::vector<MetricFamilySnapshot> Registry::Collect() const {
  std::vector<MetricFamilySnapshot> out;
  absl::MutexLock lock(&mu_);
  for (const auto& c : collectors_) c->Collect(&out);
  return out;
}

}  // namespace cuvil::observability
