// Metrics registry: counters, gauges, fixed-bucket histograms and sliding-window summaries, grouped
// in labelled families, plus the snapshot types the exposition layer (exposition.h) renders.
//
// Recording (Counter::Increment, Gauge::Set, Histogram::Observe, Summary::Observe) is lock-free:
// relaxed atomics, sharded per CPU so that threads on different CPUs do not share cache lines.
// Creating a child (Family<T>::WithLabels) and scraping (Registry::Collect) take the family's own
// mutex, never a global one. Hot paths should look a child up once and keep the shared_ptr.
#ifndef CUVIL_OBSERVABILITY_METRICS_H_
#define CUVIL_OBSERVABILITY_METRICS_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace cuvil::observability {

// ---------------------------------------------------------------------------------------------
// Snapshot types: what a scrape sees. Plain values, no atomics.

enum class MetricType { kCounter, kGauge, kHistogram, kSummary, kUnknown };

struct Label {
  std::string name;
  std::string value;
  bool operator==(const Label&) const = default;
};

struct MetricPoint {
  std::vector<Label> labels;
  double value = 0;  // counter / gauge / unknown
  // Histogram: upper bounds (without +Inf) and cumulative counts (size bounds + 1; last is +Inf).
  std::vector<double> bucket_bounds;
  std::vector<uint64_t> cumulative_counts;
  // Histogram and summary.
  double sum = 0;
  uint64_t count = 0;
  // Summary: (quantile, value); value is NaN when the window is empty.
  std::vector<std::pair<double, double>> quantiles;
};

struct MetricFamilySnapshot {
  std::string name;  // for counters with counter_total_suffix, the name without "_total"
  std::string help;
  std::string unit;  // optional, OpenMetrics "# UNIT"; the name must end in "_<unit>"
  MetricType type = MetricType::kUnknown;
  // Counters: samples are named name + "_total". When false (Triton compatibility names), the
  // samples are named exactly `name`; OpenMetrics output then types the family "unknown".
  bool counter_total_suffix = true;
  std::vector<MetricPoint> points;
};

// Anything that can contribute families to a scrape. Thread-safe: Collect may run concurrently.
class Collector {
 public:
  virtual ~Collector() = default;
  virtual void Collect(std::vector<MetricFamilySnapshot>* out) const = 0;
};

// Source of time for summaries; tests inject a fake. Thread-safe.
class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t NowNanos() const = 0;
};
const Clock* SteadyClock();

// ---------------------------------------------------------------------------------------------
// Per-CPU sharding support.

namespace internal {
inline constexpr size_t kCacheLine = 64;
// Number of shards (a power of two, 1..16), fixed at first use from the CPU count.
size_t ShardCount();
// Index of the shard for the calling thread's current CPU, in [0, ShardCount()).
size_t CurrentShard();

// `stride` atomics per shard, each shard starting on its own cache line.
class ShardedSlots {
 public:
  explicit ShardedSlots(size_t slots_per_shard);
  std::atomic<uint64_t>& at(size_t shard, size_t slot) {
    const size_t i = shard * stride_ + slot;
    return lines_[i / kPerLine].v[i % kPerLine];
  }
  const std::atomic<uint64_t>& at(size_t shard, size_t slot) const {
    const size_t i = shard * stride_ + slot;
    return lines_[i / kPerLine].v[i % kPerLine];
  }

 private:
  static constexpr size_t kPerLine = kCacheLine / sizeof(std::atomic<uint64_t>);
  struct alignas(kCacheLine) Line {
    std::atomic<uint64_t> v[kPerLine] = {};
  };
  size_t stride_;
  std::unique_ptr<Line[]> lines_;
};
}  // namespace internal

// ---------------------------------------------------------------------------------------------
// Metric children. Thread-safe: every method may be called from any thread without locks.

// Monotonic integer counter.
class Counter {
 public:
  Counter();
  void Increment(uint64_t n = 1);
  uint64_t Value() const;

 private:
  struct alignas(internal::kCacheLine) Cell {
    std::atomic<uint64_t> value{0};
  };
  std::unique_ptr<Cell[]> cells_;
};

// A value that goes up and down (a single atomic: gauges are set, not accumulated, on hot paths).
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double Value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Histogram over fixed upper bounds (le semantics: a value v lands in the first bucket with
// v <= bound; values above the last bound land in +Inf).
class Histogram {
 public:
  // `bounds` must be finite and strictly increasing (checked by Registry::AddHistogram).
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);
  // Cumulative counts (size bounds()+1), sum and count; consistent with each other per shard.
  void Snapshot(MetricPoint* out) const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  internal::ShardedSlots cells_;  // per shard: [0] = sum (double bits), [1..n+1] = bucket counts
};

struct SummaryOptions {
  // Quantiles cover samples from the last `window` (at least window - window/sub_windows of them:
  // the window advances in steps of one sub-window).
  int64_t window_ns = 60'000'000'000;
  int sub_windows = 6;
  std::vector<double> quantiles = {0.5, 0.9, 0.99};
  const Clock* clock = nullptr;  // nullptr = SteadyClock()
};

// Streaming quantiles over a sliding time window. Each sub-window is a log-linear histogram
// (32 sub-buckets per power of two over [2^-30, 2^10), values outside are clamped), so a
// quantile is reported with at most ~1.6% relative error. _sum and _count are cumulative over
// the summary's lifetime, as in other Prometheus clients. A sample recorded in the instant a
// sub-window is being recycled (once per sub-window period) may be left out of the quantiles.
class Summary {
 public:
  explicit Summary(SummaryOptions options);
  ~Summary();
  void Observe(double v);
  void Snapshot(MetricPoint* out) const;
  // Quantile q over the current window; NaN if no sample is in the window.
  double Quantile(double q) const;

  static constexpr int kSubBucketBits = 5;
  static constexpr int kMinExponent = -30;
  static constexpr int kMaxExponent = 10;
  static constexpr size_t kBuckets = static_cast<size_t>(kMaxExponent - kMinExponent)
                                     << kSubBucketBits;
  static size_t BucketIndex(double v);
  static double BucketValue(size_t index);  // midpoint of the bucket

 private:
  struct SubWindow;
  std::vector<double> QuantilesAt(const std::vector<double>& qs, int64_t now) const;

  SummaryOptions options_;
  int64_t sub_window_ns_;
  std::unique_ptr<SubWindow[]> ring_;
  Counter count_;
  internal::ShardedSlots sum_cells_;  // per shard: [0] = sum (double bits)
};

// ---------------------------------------------------------------------------------------------
// Families: one metric name, fixed label names, one child per distinct label values.

namespace internal {
class FamilyBase : public Collector {
 public:
  FamilyBase(std::string name, std::string help, std::string unit, MetricType type,
             std::vector<std::string> label_names)
      : name_(std::move(name)),
        help_(std::move(help)),
        unit_(std::move(unit)),
        type_(type),
        label_names_(std::move(label_names)) {}
  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  // Registration-time settings (call before the family is shared between threads).
  void set_counter_total_suffix(bool v) { counter_total_suffix_ = v; }
  // Counters: the exported value is the recorded count divided (integer division) by this, e.g.
  // 1000 to record nanoseconds and export microseconds without per-event rounding.
  void set_counter_divisor(uint64_t d) { counter_divisor_ = d == 0 ? 1 : d; }

 protected:
  MetricFamilySnapshot Header() const;
  std::vector<Label> MakeLabels(const std::vector<std::string>& values) const;

  std::string name_, help_, unit_;
  MetricType type_;
  std::vector<std::string> label_names_;
  bool counter_total_suffix_ = true;
  uint64_t counter_divisor_ = 1;
};
}  // namespace internal

// Thread-safe. WithLabels/Remove/Collect lock this family's mutex only.
template <typename T>
class Family : public internal::FamilyBase {
 public:
  using Factory = std::function<std::shared_ptr<T>()>;

  Family(std::string name, std::string help, std::string unit, MetricType type,
         std::vector<std::string> label_names, Factory factory)
      : FamilyBase(std::move(name), std::move(help), std::move(unit), type, std::move(label_names)),
        factory_(std::move(factory)) {}

  // The child for these label values (in label_names() order), created on first use. The
  // pointer stays valid for as long as the caller holds it, even after Remove. Returns nullptr
  // if the number of values does not match the number of label names.
  std::shared_ptr<T> WithLabels(absl::Span<const std::string_view> values) {
    if (values.size() != label_names_.size()) return nullptr;
    std::vector<std::string> key(values.begin(), values.end());
    absl::MutexLock lock(&mu_);
    auto& slot = children_[key];
    if (slot == nullptr) {
      slot = factory_();
      order_.push_back(key);
    }
    return slot;
  }
  std::shared_ptr<T> WithLabels(std::initializer_list<std::string_view> values) {
    return WithLabels(absl::Span<const std::string_view>(values.begin(), values.size()));
  }

  // Stops exporting the child; holders of its pointer may keep recording into it.
  void Remove(absl::Span<const std::string_view> values) {
    std::vector<std::string> key(values.begin(), values.end());
    absl::MutexLock lock(&mu_);
    if (children_.erase(key) == 0) return;
    std::erase(order_, key);
  }
  void Remove(std::initializer_list<std::string_view> values) {
    Remove(absl::Span<const std::string_view>(values.begin(), values.size()));
  }

  void Collect(std::vector<MetricFamilySnapshot>* out) const override;

 private:
  Factory factory_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::vector<std::string>, std::shared_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::string>> order_ ABSL_GUARDED_BY(mu_);  // creation order
};

// Owns families and collectors. Thread-safe; registration and Collect lock the registry mutex
// (never taken on recording paths).
class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // `name` is the family name; counters' samples get "_total" appended unless
  // `total_suffix` is false (for names dictated by another system, e.g. Triton's).
  absl::StatusOr<Family<Counter>*> AddCounter(std::string name, std::string help,
                                              std::vector<std::string> label_names,
                                              std::string unit = "", bool total_suffix = true);
  absl::StatusOr<Family<Gauge>*> AddGauge(std::string name, std::string help,
                                          std::vector<std::string> label_names,
                                          std::string unit = "");
  absl::StatusOr<Family<Histogram>*> AddHistogram(std::string name, std::string help,
                                                  std::vector<std::string> label_names,
                                                  std::vector<double> bounds,
                                                  std::string unit = "");
  absl::StatusOr<Family<Summary>*> AddSummary(std::string name, std::string help,
                                              std::vector<std::string> label_names,
                                              SummaryOptions options, std::string unit = "");
  // Families produced at scrape time (e.g. process metrics). `names` are the family names it
  // emits, reserved against duplicates.
  absl::Status AddCollector(std::unique_ptr<Collector> collector, std::vector<std::string> names);

  // Snapshot of every family, in registration order.
  std::vector<MetricFamilySnapshot> Collect() const;

 private:
  absl::Status Reserve(const std::string& name, const std::vector<std::string>& label_names,
                       const std::string& unit) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Collector>> collectors_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> names_ ABSL_GUARDED_BY(mu_);
};

// Validation helpers (exposed for tests).
bool IsValidMetricName(std::string_view name);
bool IsValidLabelName(std::string_view name);

// ---------------------------------------------------------------------------------------------
// Template definitions.

template <typename T>
void Family<T>::Collect(std::vector<MetricFamilySnapshot>* out) const {
  MetricFamilySnapshot family = Header();
  absl::MutexLock lock(&mu_);
  family.points.reserve(order_.size());
  for (const auto& key : order_) {
    const T& child = *children_.at(key);
    MetricPoint point;
    point.labels = MakeLabels(key);
    if constexpr (std::is_same_v<T, Counter>) {
      point.value = static_cast<double>(child.Value() / counter_divisor_);
    } else if constexpr (std::is_same_v<T, Gauge>) {
      point.value = child.Value();
    } else {
      child.Snapshot(&point);
    }
    family.points.push_back(std::move(point));
  }
  out->push_back(std::move(family));
}

}  // namespace cuvil::observability

#endif  // CUVIL_OBSERVABILITY_METRICS_H_
