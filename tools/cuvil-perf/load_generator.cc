#include "load_generator.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "sequence_plan.h"

namespace cuvil::perf {
namespace {

using Clock = std::chrono::steady_clock;

enum Phase : int { kWarmup = 0, kMeasure = 1, kStop = 2 };

// Send times of the open-loop schedule, handed out in order to whichever sender asks next.
class Schedule {
 public:
  Schedule(Clock::time_point start, double rate, Distribution distribution, uint64_t seed)
      : next_(start), rate_(rate), distribution_(distribution), rng_(seed) {}

  Clock::time_point Next() {
    std::lock_guard<std::mutex> lock(mu_);
    Clock::time_point slot = next_;
    double gap_s = distribution_ == Distribution::kPoisson
                       ? std::exponential_distribution<double>(rate_)(rng_)
                       : 1.0 / rate_;
    next_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap_s));
    return slot;
  }

 private:
  std::mutex mu_;
  Clock::time_point next_;
  double rate_;
  Distribution distribution_;
  std::mt19937_64 rng_;
};

// What one sender thread saw; written only by that thread until it is joined.
struct WorkerRecord {
  std::vector<int64_t> latencies_ns;
  uint64_t errors = 0;
  uint64_t delayed = 0;
  uint64_t sequences_started = 0;
  uint64_t sequences_completed = 0;
  std::string first_error;
};

// State shared by the senders and the thread running the level.
struct Shared {
  std::atomic<int> phase{kWarmup};
  std::atomic<int64_t> warmup_done{0};
  std::atomic<int64_t> measured{0};
  int64_t warmup_target = 0;
  int64_t measure_target = 0;
  std::mutex mu;
  std::condition_variable cv;

  void Notify() {
    std::lock_guard<std::mutex> lock(mu);
    cv.notify_all();
  }
};

// `plan`: every request is a sequence step, of slot `own_slot` (-1: any free slot, rate mode).
void SendLoop(InferClient* client, Shared* shared, Schedule* schedule, SequencePlan* plan,
              int64_t own_slot, WorkerRecord* record) {
  while (shared->phase.load(std::memory_order_acquire) != kStop) {
    Clock::time_point slot;
    if (schedule != nullptr) {
      slot = schedule->Next();
      std::unique_lock<std::mutex> lock(shared->mu);
      if (shared->cv.wait_until(lock, slot, [&] { return shared->phase.load() == kStop; })) break;
    }
    const int phase_at_start = shared->phase.load(std::memory_order_acquire);
    SequenceStep step;
    if (plan != nullptr) {
      step.slot = own_slot >= 0 ? own_slot : plan->Acquire();
      step = plan->Next(step.slot);
      client->SetSequence(step.id, step.start, step.end);
    }
    const Clock::time_point start = Clock::now();
    absl::Status status = client->Infer();
    const Clock::time_point end = Clock::now();
    if (plan != nullptr) {
      // A failed step leaves the sequence's state unknown: the slot starts a new one.
      if (!status.ok()) plan->Abandon(step.slot);
      if (own_slot < 0) plan->Release(step.slot);
    }
    if (!status.ok() && record->first_error.empty()) record->first_error = status.ToString();
    if (phase_at_start == kWarmup) {
      if (shared->warmup_done.fetch_add(1) + 1 == shared->warmup_target) shared->Notify();
      continue;
    }
    // Only requests that started and ended inside the window count.
    if (phase_at_start != kMeasure || shared->phase.load(std::memory_order_acquire) != kMeasure) {
      continue;
    }
    if (schedule != nullptr && start - slot > std::chrono::milliseconds(1)) ++record->delayed;
    if (status.ok()) {
      record->latencies_ns.push_back(
          std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count());
      record->sequences_started += step.start;
      record->sequences_completed += step.end;
    } else {
      ++record->errors;
    }
    if (shared->measured.fetch_add(1) + 1 == shared->measure_target) shared->Notify();
  }
}

}  // namespace

LoadGenerator::LoadGenerator(const PerfOptions& options, ClientFactory factory,
                             InferClient* stats_client, std::vector<InputTensor> inputs,
                             std::vector<std::string> outputs, bool sequences)
    : options_(options),
      factory_(std::move(factory)),
      stats_client_(stats_client),
      inputs_(std::move(inputs)),
      outputs_(std::move(outputs)),
      sequences_(sequences) {}

absl::StatusOr<LevelResult> LoadGenerator::RunLevel(double level) {
  const bool rate_mode = options_.mode == LoadMode::kRequestRate;
  const int64_t threads = rate_mode ? options_.max_threads : static_cast<int64_t>(level);
  const Clock::time_point level_start = Clock::now();
  const Clock::time_point hard_deadline = level_start + std::chrono::milliseconds(kHardCapMs);

  std::vector<std::unique_ptr<InferClient>> clients;
  for (int64_t i = 0; i < threads; ++i) {
    absl::StatusOr<std::unique_ptr<InferClient>> c = factory_();
    if (!c.ok()) return c.status();
    if (absl::Status s = (*c)->Prepare(inputs_, outputs_); !s.ok()) return s;
    clients.push_back(std::move(*c));
  }

  // Concurrency mode: slot i is thread i's; rate mode: --num-of-sequences slots shared.
  std::unique_ptr<SequencePlan> plan;
  if (sequences_) {
    const int64_t slots = rate_mode ? options_.num_sequences : threads;
    if (absl::Status s = SequencePlan::Check(options_, slots); !s.ok()) return s;
    plan = std::make_unique<SequencePlan>(options_, slots);
  }

  Shared shared;
  shared.warmup_target = options_.warmup_requests;
  shared.measure_target = options_.max_requests;
  if (shared.warmup_target == 0) shared.phase = kMeasure;  // Stats are read first; see below.
  std::unique_ptr<Schedule> schedule;
  if (rate_mode) {
    schedule =
        std::make_unique<Schedule>(Clock::now(), level, options_.distribution, options_.seed);
  }
  std::vector<WorkerRecord> records(threads);

  // With no warmup the window opens at once; the "before" snapshot must precede it.
  LevelResult result;
  result.mode = options_.mode;
  result.level = level;
  ServerStats before;
  absl::Status before_status = absl::OkStatus();
  auto snapshot_before = [&] {
    absl::StatusOr<ServerStats> s = stats_client_->GetStatistics();
    if (s.ok()) {
      before = *s;
    } else {
      before_status = s.status();
    }
  };
  if (shared.warmup_target == 0) snapshot_before();
  Clock::time_point window_start = Clock::now();

  std::vector<std::thread> senders;
  senders.reserve(threads);
  for (int64_t i = 0; i < threads; ++i) {
    senders.emplace_back(SendLoop, clients[i].get(), &shared, schedule.get(), plan.get(),
                         rate_mode ? int64_t{-1} : i, &records[i]);
  }

  if (shared.warmup_target > 0) {
    // Warmup: bounded by count and by time (at least 30 s or two windows).
    const Clock::time_point warmup_deadline = std::min(
        hard_deadline,
        Clock::now() + std::max(std::chrono::milliseconds(30'000),
                                std::chrono::milliseconds(2 * options_.measurement_interval_ms)));
    {
      std::unique_lock<std::mutex> lock(shared.mu);
      shared.cv.wait_until(lock, warmup_deadline,
                           [&] { return shared.warmup_done.load() >= shared.warmup_target; });
    }
    snapshot_before();
    window_start = Clock::now();
    shared.phase.store(kMeasure, std::memory_order_release);
  }

  const Clock::time_point window_deadline = std::min(
      hard_deadline, window_start + std::chrono::milliseconds(options_.measurement_interval_ms));
  {
    std::unique_lock<std::mutex> lock(shared.mu);
    shared.cv.wait_until(lock, window_deadline,
                         [&] { return shared.measured.load() >= shared.measure_target; });
  }
  {
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.phase.store(kStop, std::memory_order_release);
    shared.cv.notify_all();
  }
  const Clock::time_point window_end = Clock::now();
  absl::StatusOr<ServerStats> after = stats_client_->GetStatistics();
  for (std::thread& t : senders) t.join();
  if (plan != nullptr) {
    // Close the sequences the window cut short (not measured), so the server frees their state
    // now instead of after its idle timeout, and the next level starts clean.
    for (const SequenceStep& step : plan->CloseOpen()) {
      InferClient* client = clients[rate_mode ? 0 : step.slot].get();
      client->SetSequence(step.id, false, true);
      (void)client->Infer();
    }
    result.sequences = true;
  }

  result.window_seconds = std::chrono::duration<double>(window_end - window_start).count();
  std::vector<int64_t> latencies;
  for (WorkerRecord& r : records) {
    latencies.insert(latencies.end(), r.latencies_ns.begin(), r.latencies_ns.end());
    result.errors += r.errors;
    result.delayed += r.delayed;
    result.sequences_started += r.sequences_started;
    result.sequences_completed += r.sequences_completed;
    if (result.first_error.empty()) result.first_error = r.first_error;
  }
  result.latency = Summarize(&latencies, options_.percentile);
  if (result.window_seconds > 0) {
    result.client_infer_per_sec =
        static_cast<double>(result.latency.count * options_.batch) / result.window_seconds;
  }
  if (before_status.ok() && after.ok()) {
    result.have_server = true;
    result.server = Diff(before, *after, result.window_seconds);
  } else {
    result.first_error = absl::StrCat(
        result.first_error, result.first_error.empty() ? "" : "; ",
        "statistics: ", (before_status.ok() ? after.status() : before_status).ToString());
  }
  return result;
}

}  // namespace cuvil::perf
