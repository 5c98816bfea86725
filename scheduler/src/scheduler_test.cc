#include "cuvil/scheduler/scheduler.h"

#include <atomic>
#include <cstring>
#include <deque>
#include <set>
#include <string>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "fake_clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler_internal.h"

namespace cuvil {
namespace {

using std::chrono::microseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Generous watchdog so a broken scheduler fails a test instead of hanging it.
constexpr absl::Duration kWatchdog = absl::Seconds(30);

// A float32 model with input "x" [batch, D] and outputs "y" = 2x [batch, D] and "z" = row sums
// [batch, 1]. In varying mode x is [batch, -1]; every row starts with its length L, y is the
// row's last element doubled and z is L. Records every call; Run can be held at a gate.
class FakeExecutable : public Executable {
 public:
  struct Call {
    int64_t batch;
    float first;  // x[0]: identifies the first request of the batch.
    const void* input;
    std::thread::id thread;  // The thread Run ran on.
    uint64_t staged;         // The staged_bytes Run was given.
  };

  explicit FakeExecutable(int64_t dim = 2, bool varying = false) : dim_(dim), varying_(varying) {
    inputs_.push_back({"x", DType::kFloat32, {varying ? -1 : dim}, true});
    outputs_.push_back({"y", DType::kFloat32, {varying ? 1 : dim}, true});
    outputs_.push_back({"z", DType::kFloat32, {1}, true});
  }

  const std::vector<TensorSpec>& inputs() const override { return inputs_; }
  const std::vector<TensorSpec>& outputs() const override { return outputs_; }
  static int64_t ArenaBytes(int64_t batch) { return 64 * batch; }

  absl::Status Run(const void* const* inputs, absl::Span<const std::vector<int64_t>> input_shapes,
                   void* const* outputs, int64_t batch, uint64_t staged_bytes, ArenaReserve reserve,
                   std::vector<std::vector<int64_t>>* /*written_dims*/) const override {
    // The scheduler hands over the executed batch's shape: [batch, D] (D of the first request),
    // or [D] for a model without a batch dimension.
    const std::vector<int64_t>& shape = input_shapes.size() == 1 ? input_shapes[0] : dims_none_;
    const bool batched_shape = shape.size() == 2 && shape[0] == batch;
    const bool unbatched_shape = shape.size() == 1 && batch == 1;
    if (!(batched_shape || unbatched_shape) || (!varying_ && shape.back() != dim_)) {
      return absl::InternalError("scheduler passed the wrong input shape");
    }
    // The scheduler fills inputs[] and outputs[] in this call (sanitizers check the size).
    void* arena = reserve(static_cast<size_t>(ArenaBytes(batch)));
    std::memset(arena, 0xab, static_cast<size_t>(ArenaBytes(batch)));
    const float* x = static_cast<const float*>(inputs[0]);
    FakeClock* clock;
    std::chrono::nanoseconds advance;
    {
      absl::MutexLock l(&mu_);
      calls_.push_back({batch, x[0], inputs[0], std::this_thread::get_id(), staged_bytes});
      ++entered_;
      auto may_run = [this, v = x[0]]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return open_ && held_.count(v) == 0;
      };
      mu_.Await(absl::Condition(&may_run));
      clock = advance_clock_;
      advance = advance_;
    }
    if (clock != nullptr) clock->Advance(advance);
    float* y = static_cast<float*>(outputs[0]);
    float* z = static_cast<float*>(outputs[1]);
    for (int64_t r = 0; r < batch; ++r) {
      if (varying_) {
        // Rows of one batch share L; a wrongly merged batch breaks this.
        int64_t len = static_cast<int64_t>(x[0]);
        if (x[r * len] != static_cast<float>(len)) return absl::InternalError("ragged batch");
        y[r] = 2 * x[r * len + len - 1];
        z[r] = static_cast<float>(len);
      } else {
        float sum = 0;
        for (int64_t j = 0; j < dim_; ++j) {
          y[r * dim_ + j] = 2 * x[r * dim_ + j];
          sum += x[r * dim_ + j];
        }
        z[r] = sum;
      }
    }
    absl::MutexLock l(&mu_);
    ++finished_;
    if (fail_) return absl::InternalError("injected failure");
    return absl::OkStatus();
  }

  void Close() {
    absl::MutexLock l(&mu_);
    open_ = false;
  }
  void Open() {
    absl::MutexLock l(&mu_);
    open_ = true;
  }
  // Holds runs whose batch starts with value `v`.
  void Hold(float v) {
    absl::MutexLock l(&mu_);
    held_.insert(v);
  }
  void Release(float v) {
    absl::MutexLock l(&mu_);
    held_.erase(v);
  }
  void SetFail(bool fail) {
    absl::MutexLock l(&mu_);
    fail_ = fail;
  }
  // Each Run moves `clock` forward by `d`, so compute timings are exact.
  void AdvanceOnRun(FakeClock* clock, std::chrono::nanoseconds d) {
    absl::MutexLock l(&mu_);
    advance_clock_ = clock;
    advance_ = d;
  }
  bool AwaitEntered(int n) const {
    absl::MutexLock l(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return entered_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), kWatchdog);
  }
  std::vector<Call> calls() const {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  std::vector<int64_t> batches() const {
    std::vector<int64_t> b;
    for (const Call& c : calls()) b.push_back(c.batch);
    return b;
  }
  std::vector<float> firsts() const {
    std::vector<float> f;
    for (const Call& c : calls()) f.push_back(c.first);
    return f;
  }

 private:
  int64_t dim_;
  const std::vector<int64_t> dims_none_;
  bool varying_;
  std::vector<TensorSpec> inputs_, outputs_;
  mutable absl::Mutex mu_;
  mutable std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  mutable int entered_ ABSL_GUARDED_BY(mu_) = 0;
  mutable int finished_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = true;
  std::set<float> held_ ABSL_GUARDED_BY(mu_);
  bool fail_ ABSL_GUARDED_BY(mu_) = false;
  FakeClock* advance_clock_ ABSL_GUARDED_BY(mu_) = nullptr;
  std::chrono::nanoseconds advance_ ABSL_GUARDED_BY(mu_){0};
};

// absl::Notification's HasBeenNotified is inline and invisible to the TSan build's annotations
// (see tsan_absl_annotations.cc), so tests use this instead.
class Done {
 public:
  void Notify() {
    absl::MutexLock l(&mu_);
    done_ = true;
    cv_.SignalAll();
  }
  bool HasBeenNotified() const {
    absl::MutexLock l(&mu_);
    return done_;
  }
  bool WaitForNotificationWithTimeout(absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    const absl::Time deadline = absl::Now() + timeout;
    while (!done_) {
      if (cv_.WaitWithDeadline(&mu_, deadline)) return done_;
    }
    return true;
  }

 private:
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
};

// What one request got back.
struct Outcome {
  std::string id;
  int64_t rows = 0;
  float base = 0;
  const void* input_data = nullptr;
  Done done;
  InferenceResponse response;
  bool Wait() { return done.WaitForNotificationWithTimeout(kWatchdog); }
};

class SchedulerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Scheduler> Make(const SchedulerOptions& options) {
    auto scheduler = CreateSchedulerWithClock(options, exe_, clock_);
    EXPECT_TRUE(scheduler.ok()) << scheduler.status();
    return scheduler.ok() ? *std::move(scheduler) : nullptr;
  }

  // Submits `rows` rows x[i] = base + i (rows of dim_ values); `edit` may adjust the request.
  Outcome& Submit(Scheduler& scheduler, int64_t rows, float base,
                  const std::function<void(InferenceRequest&)>& edit = {}) {
    Outcome& out = outcomes_.emplace_back();
    out.id = "r" + std::to_string(outcomes_.size() - 1);
    out.rows = rows;
    out.base = base;
    auto data = std::make_shared<std::vector<float>>(static_cast<size_t>(rows * dim_));
    for (size_t i = 0; i < data->size(); ++i) (*data)[i] = base + static_cast<float>(i);
    auto request = std::make_unique<InferenceRequest>();
    request->id = out.id;
    request->inputs.push_back({reinterpret_cast<const uint8_t*>(data->data()),
                               data->size() * sizeof(float),
                               {rows, dim_}});
    request->holder = data;
    request->output_requested = {true, true};
    request->batch_size = rows;
    out.input_data = data->data();
    request->on_complete = [this, &out](InferenceResponse response) {
      out.response = std::move(response);
      {
        absl::MutexLock l(&log_mu_);
        completion_order_.push_back(out.id);
      }
      out.done.Notify();
    };
    if (edit) edit(*request);
    scheduler.Submit(std::move(request));
    return out;
  }

  bool WaitAll() {
    for (Outcome& o : outcomes_) {
      if (!o.Wait()) return false;
    }
    return true;
  }

  std::vector<std::string> CompletionOrder() {
    absl::MutexLock l(&log_mu_);
    return completion_order_;
  }

  // Checks `o` succeeded with exactly its own rows: y = 2x and z = row sums.
  void ExpectOwnRows(const Outcome& o) {
    SCOPED_TRACE(o.id);
    ASSERT_TRUE(o.response.status.ok()) << o.response.status;
    ASSERT_EQ(o.response.outputs.size(), 2u);
    const HostTensor& y = o.response.outputs[0].tensor;
    const HostTensor& z = o.response.outputs[1].tensor;
    EXPECT_EQ(o.response.outputs[0].name, "y");
    EXPECT_EQ(o.response.outputs[1].name, "z");
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{o.rows, dim_}));
    ASSERT_EQ(z.shape(), (std::vector<int64_t>{o.rows, 1}));
    for (int64_t r = 0; r < o.rows; ++r) {
      float sum = 0;
      for (int64_t j = 0; j < dim_; ++j) {
        float x = o.base + static_cast<float>(r * dim_ + j);
        EXPECT_EQ(y.data_as<float>()[r * dim_ + j], 2 * x);
        sum += x;
      }
      EXPECT_EQ(z.data_as<float>()[r], sum);
    }
  }

  static SchedulerOptions Unbatched(int64_t max_batch_size) {
    SchedulerOptions options;
    options.max_batch_size = max_batch_size;
    return options;
  }

  static SchedulerOptions Batching(int64_t max_batch_size) {
    SchedulerOptions options;
    options.max_batch_size = max_batch_size;
    options.dynamic_batching = true;
    return options;
  }

  int64_t dim_ = 2;
  std::shared_ptr<FakeClock> clock_ = std::make_shared<FakeClock>();
  std::shared_ptr<FakeExecutable> exe_ = std::make_shared<FakeExecutable>(dim_);
  std::deque<Outcome> outcomes_;  // Stable addresses for the callbacks.
  absl::Mutex log_mu_;
  std::vector<std::string> completion_order_ ABSL_GUARDED_BY(log_mu_);
};

TEST_F(SchedulerTest, WithoutDynamicBatchingEveryRequestRunsAlone) {
  SchedulerOptions options;
  options.max_batch_size = 8;
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  // Queued together while the instance is busy, yet never merged.
  Submit(*scheduler, 2, 100);
  Submit(*scheduler, 1, 200);
  Submit(*scheduler, 3, 300);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 2, 1, 3));
  std::vector<FakeExecutable::Call> calls = exe_->calls();
  for (size_t i = 0; i < outcomes_.size(); ++i) {
    ExpectOwnRows(outcomes_[i]);
    EXPECT_EQ(outcomes_[i].response.timings.executed_batch, outcomes_[i].rows);
    // A lone request runs on its own input bytes, without a gather copy.
    EXPECT_EQ(calls[i].input, outcomes_[i].input_data);
  }
}

TEST_F(SchedulerTest, BatchingMergesUpToMaxBatchSizeAndSplitsOutputs) {
  auto scheduler = Make(Batching(4));
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Submit(*scheduler, 1, 100);
  Submit(*scheduler, 2, 200);
  Submit(*scheduler, 1, 300);  // 1 + 2 + 1 = 4 = max.
  Submit(*scheduler, 1, 400);
  Submit(*scheduler, 2, 500);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 4, 3));
  EXPECT_THAT(exe_->firsts(), ElementsAre(0, 100, 400));
  std::vector<int64_t> executed;
  for (const Outcome& o : outcomes_) {
    ExpectOwnRows(o);
    executed.push_back(o.response.timings.executed_batch);
  }
  EXPECT_THAT(executed, ElementsAre(1, 4, 4, 4, 3, 3));
  // What an execution stages beyond its requests' own buffers reaches the executable, which
  // budgets it with its scratch before anything is allocated: a lone request nothing (it runs on
  // its own input and writes into its response), a batch its gathered rows of x (2 floats) and
  // its staged rows of y (2 floats) and z (1 float).
  std::vector<uint64_t> staged;
  for (const FakeExecutable::Call& c : exe_->calls()) staged.push_back(c.staged);
  EXPECT_THAT(staged, ElementsAre(0u, 4 * (8 + 8 + 4u), 3 * (8 + 8 + 4u)));
}

TEST_F(SchedulerTest, OnlyRequestedOutputsAreReturned) {
  auto scheduler = Make(Batching(4));
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Outcome& only_z =
      Submit(*scheduler, 2, 100, [](InferenceRequest& r) { r.output_requested = {false, true}; });
  Outcome& both = Submit(*scheduler, 1, 200);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 3));
  ASSERT_TRUE(only_z.response.status.ok());
  ASSERT_EQ(only_z.response.outputs.size(), 1u);
  EXPECT_EQ(only_z.response.outputs[0].name, "z");
  EXPECT_EQ(only_z.response.outputs[0].tensor.data_as<float>()[1], 102.0f + 103.0f);
  ExpectOwnRows(both);
}

TEST_F(SchedulerTest, TakesTheLargestPreferredBatchSize) {
  struct Case {
    std::vector<int32_t> preferred;
    int queued;
    std::vector<int64_t> expected;
  };
  for (const Case& c :
       std::vector<Case>{{{3}, 5, {1, 3, 2}},
                         {{2, 4}, 5, {1, 4, 1}},
                         {{2, 5}, 4, {1, 2, 2}},  // 2 is preferred, 4 is not: two batches of 2.
                         {{}, 5, {1, 5}}}) {
    SCOPED_TRACE(testing::PrintToString(c.preferred));
    exe_ = std::make_shared<FakeExecutable>(dim_);
    outcomes_.clear();
    SchedulerOptions options = Batching(8);
    options.batching.preferred_batch_sizes = c.preferred;
    auto scheduler = Make(options);
    exe_->Close();
    Submit(*scheduler, 1, 0);
    ASSERT_TRUE(exe_->AwaitEntered(1));
    for (int i = 1; i <= c.queued; ++i) Submit(*scheduler, 1, 100.0f * i);
    exe_->Open();
    ASSERT_TRUE(WaitAll());
    EXPECT_EQ(exe_->batches(), c.expected);
    for (const Outcome& o : outcomes_) ExpectOwnRows(o);
  }
}

TEST_F(SchedulerTest, MaxQueueDelayBoundsTheOldestRequestsWait) {
  SchedulerOptions options = Batching(4);
  options.batching.max_queue_delay_us = 1000;
  auto scheduler = Make(options);
  const Clock::time_point t0 = clock_->Now();
  Outcome& a = Submit(*scheduler, 1, 0);
  Outcome& b = Submit(*scheduler, 1, 100);
  clock_->Advance(microseconds(999));
  // The worker has seen both requests at t0 + 999us and chose to keep waiting.
  clock_->AwaitTimedWaitAt(t0 + microseconds(999));
  EXPECT_TRUE(exe_->calls().empty());
  EXPECT_FALSE(a.done.HasBeenNotified());
  clock_->Advance(microseconds(1));
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->batches(), ElementsAre(2));
  EXPECT_EQ(a.response.timings.queue_ns, 1'000'000u);
  EXPECT_EQ(b.response.timings.queue_ns, 1'000'000u);
  ExpectOwnRows(a);
  ExpectOwnRows(b);
}

TEST_F(SchedulerTest, SkipDelayWhenIdleRunsOnceTheLastBatchSizeIsQueued) {
  SchedulerOptions options = Batching(4);
  options.batching.max_queue_delay_us = 1'000'000;
  options.batching.skip_delay_when_idle = true;
  auto scheduler = Make(options);
  const Clock::time_point t0 = clock_->Now();
  // The fake clock never moves, so only the idle fast path can run a lone request.
  Outcome& a = Submit(*scheduler, 1, 0);
  ASSERT_TRUE(a.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(a.response.timings.queue_ns, 0u);
  exe_->Close();
  Outcome& b = Submit(*scheduler, 1, 100);  // Taken at once, then held inside Run.
  ASSERT_TRUE(exe_->AwaitEntered(2));
  Outcome& c = Submit(*scheduler, 1, 200);  // Queued while the instance is busy.
  Outcome& d = Submit(*scheduler, 1, 300);
  exe_->Open();
  ASSERT_TRUE(b.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(c.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  ASSERT_TRUE(d.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 1, 2));
  // The last execution served two requests: one request waits for a second, two run at once.
  Outcome& e = Submit(*scheduler, 1, 400);
  clock_->AwaitTimedWaitAt(t0);
  EXPECT_FALSE(e.done.HasBeenNotified());
  Outcome& f = Submit(*scheduler, 1, 500);
  ASSERT_TRUE(f.done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_TRUE(e.done.HasBeenNotified());
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 1, 2, 2));
  ExpectOwnRows(c);
  ExpectOwnRows(e);
  ExpectOwnRows(f);
}

// Options under which an idle instance runs a request on the submitting thread: each Run
// takes 100 us of fake time, under the 1 ms limit.
SchedulerOptions InlineOptions(SchedulerOptions options) {
  options.inline_execution_max_us = 1000;
  return options;
}

TEST_F(SchedulerTest, IdleInstanceRunsTheRequestOnTheSubmittingThread) {
  for (bool batching : {false, true}) {
    SCOPED_TRACE(batching ? "dynamic batching" : "no batching");
    SchedulerOptions options = batching ? Batching(4) : Unbatched(4);
    if (batching) options.batching.skip_delay_when_idle = true;
    exe_ = std::make_shared<FakeExecutable>(dim_);
    exe_->AdvanceOnRun(clock_.get(), microseconds(100));
    auto scheduler = Make(InlineOptions(options));
    // No estimate of the compute time yet: the first request goes to the worker.
    Outcome& first = Submit(*scheduler, 1, 0);
    ASSERT_TRUE(first.Wait());
    Outcome& second = Submit(*scheduler, 2, 10);
    // Completed before Submit returned, on this thread.
    EXPECT_TRUE(second.done.HasBeenNotified());
    std::vector<FakeExecutable::Call> calls = exe_->calls();
    ASSERT_EQ(calls.size(), 2u);
    EXPECT_NE(calls[0].thread, std::this_thread::get_id());
    EXPECT_EQ(calls[1].thread, std::this_thread::get_id());
    ExpectOwnRows(first);
    ExpectOwnRows(second);
    EXPECT_EQ(second.response.timings.compute_infer_ns, 100'000u);
    EXPECT_EQ(scheduler->Stats().execution_count, 2u);
    scheduler->Drain();
    outcomes_.clear();
  }
}

TEST_F(SchedulerTest, ARequestThatMayNotRunInlineGoesToTheWorker) {
  exe_->AdvanceOnRun(clock_.get(), microseconds(100));
  auto scheduler = Make(InlineOptions(Unbatched(4)));
  ASSERT_TRUE(Submit(*scheduler, 1, 0).Wait());  // Gives the estimate: later ones could inline.
  Outcome& inlined = Submit(*scheduler, 1, 10);
  EXPECT_TRUE(inlined.done.HasBeenNotified());
  Outcome& worker =
      Submit(*scheduler, 1, 20, [](InferenceRequest& r) { r.may_run_inline = false; });
  ASSERT_TRUE(worker.Wait());
  std::vector<FakeExecutable::Call> calls = exe_->calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[1].thread, std::this_thread::get_id());
  EXPECT_NE(calls[2].thread, std::this_thread::get_id());
  ExpectOwnRows(worker);
  scheduler->Drain();
}

TEST_F(SchedulerTest, SlowModelsAndBusyInstancesDoNotRunInline) {
  // Executions longer than the limit: every request goes to the worker.
  exe_->AdvanceOnRun(clock_.get(), microseconds(2000));
  auto scheduler = Make(InlineOptions(Unbatched(4)));
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Submit(*scheduler, 1, 10.0f * i).Wait());
  for (const FakeExecutable::Call& c : exe_->calls()) {
    EXPECT_NE(c.thread, std::this_thread::get_id());
  }
  scheduler->Drain();

  // A fast model whose only instance is busy: the request queues instead.
  exe_ = std::make_shared<FakeExecutable>(dim_);
  exe_->AdvanceOnRun(clock_.get(), microseconds(100));
  scheduler = Make(InlineOptions(Unbatched(4)));
  ASSERT_TRUE(Submit(*scheduler, 1, 0).Wait());
  exe_->Hold(100);
  std::thread holder([&] { Submit(*scheduler, 1, 100); });  // Runs inline, held in Run.
  ASSERT_TRUE(exe_->AwaitEntered(2));
  Outcome& queued = Submit(*scheduler, 1, 200);  // Returns at once: queued for the worker.
  EXPECT_FALSE(queued.done.HasBeenNotified());
  exe_->Release(100);
  holder.join();
  ASSERT_TRUE(WaitAll());
  std::vector<FakeExecutable::Call> calls = exe_->calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[2].first, 200.0f);
  EXPECT_NE(calls[2].thread, std::this_thread::get_id());
  for (const Outcome& o : outcomes_) ExpectOwnRows(o);
}

TEST_F(SchedulerTest, DrainWaitsForInlineExecutions) {
  exe_->AdvanceOnRun(clock_.get(), microseconds(100));
  auto scheduler = Make(InlineOptions(Unbatched(4)));
  ASSERT_TRUE(Submit(*scheduler, 1, 0).Wait());
  exe_->Hold(100);
  std::thread submitter([&] { Submit(*scheduler, 1, 100); });
  ASSERT_TRUE(exe_->AwaitEntered(2));
  Done drained;
  std::thread drainer([&] {
    scheduler->Drain();
    drained.Notify();
  });
  // Drain must not return while the inline execution is still inside Run.
  EXPECT_FALSE(drained.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  exe_->Release(100);
  submitter.join();
  drainer.join();
  EXPECT_TRUE(drained.HasBeenNotified());
  ASSERT_TRUE(WaitAll());
  for (const Outcome& o : outcomes_) ExpectOwnRows(o);
  EXPECT_EQ(scheduler->Stats().execution_count, 2u);
}

TEST_F(SchedulerTest, DrainWithATimeoutGivesUpOnAStuckExecutionAndFinishesLater) {
  auto scheduler = Make(Unbatched(4));
  exe_->Hold(100);
  Outcome& stuck = Submit(*scheduler, 1, 100);  // A worker runs it and stays inside Run.
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Outcome& queued = Submit(*scheduler, 1, 200);
  EXPECT_FALSE(scheduler->Drain(absl::Milliseconds(50)));  // Still inside: gives up.
  EXPECT_FALSE(stuck.done.HasBeenNotified());
  // A draining scheduler hands new requests back instead of running or rejecting them.
  auto request = std::make_unique<InferenceRequest>();
  EXPECT_NE(scheduler->SubmitUnlessDraining(std::move(request)), nullptr);
  exe_->Release(100);
  EXPECT_TRUE(scheduler->Drain(absl::Seconds(30)));  // Queued work ran, then the workers left.
  ASSERT_TRUE(stuck.Wait());
  ASSERT_TRUE(queued.Wait());
  EXPECT_TRUE(stuck.response.status.ok()) << stuck.response.status;
  EXPECT_TRUE(queued.response.status.ok()) << queued.response.status;
}

TEST_F(SchedulerTest, FailRunningAnswersAStuckExecutionAndDropsItsLateResult) {
  auto scheduler = Make(Unbatched(4));
  exe_->Hold(100);
  Outcome& stuck = Submit(*scheduler, 1, 100);  // A worker runs it and stays inside Run.
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Outcome& queued = Submit(*scheduler, 1, 200);
  EXPECT_FALSE(scheduler->Drain(absl::Milliseconds(50)));
  // Only executions running at least that long: this one started at the fake clock's now.
  EXPECT_EQ(scheduler->FailRunning(absl::UnavailableError("too soon"), absl::Seconds(5)), 0);
  EXPECT_FALSE(stuck.done.HasBeenNotified());
  clock_->Advance(std::chrono::seconds(5));
  EXPECT_EQ(scheduler->FailRunning(absl::UnavailableError("version retired"), absl::Seconds(5)), 1);
  ASSERT_TRUE(stuck.done.HasBeenNotified());  // At once, while its thread is still inside.
  EXPECT_EQ(stuck.response.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(stuck.response.status.message(), HasSubstr("version retired"));
  EXPECT_FALSE(queued.done.HasBeenNotified());  // Queued requests are not failed.
  EXPECT_EQ(scheduler->FailRunning(absl::UnavailableError("again")), 0);  // Answered once.
  exe_->Release(100);  // The kernel returns after all: its result is dropped (no second call).
  EXPECT_TRUE(scheduler->Drain(absl::Seconds(30)));
  ASSERT_TRUE(queued.Wait());
  EXPECT_TRUE(queued.response.status.ok()) << queued.response.status;
  EXPECT_EQ(stuck.response.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(scheduler->Stats().success.count, 1u);
}

TEST_F(SchedulerTest, TakeQueuedHandsOverWhatAStuckSchedulerWouldNotRun) {
  auto scheduler = Make(Unbatched(4));
  EXPECT_TRUE(scheduler->TakeQueued().empty());  // Not draining: nothing is taken.
  exe_->Hold(100);
  Outcome& stuck = Submit(*scheduler, 1, 100);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Submit(*scheduler, 1, 200);
  Submit(*scheduler, 2, 300);
  EXPECT_FALSE(scheduler->Drain(absl::Milliseconds(50)));
  std::vector<std::unique_ptr<InferenceRequest>> taken = scheduler->TakeQueued();
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0]->id, "r1");  // In queue order, on_complete not run.
  EXPECT_EQ(taken[1]->id, "r2");
  EXPECT_EQ(scheduler->Stats().pending, 0u);
  for (auto& request : taken) {  // The caller answers them (here: as a successor would).
    InferenceResponse response;
    response.status = absl::UnavailableError("handed on");
    request->on_complete(std::move(response));
  }
  EXPECT_EQ(scheduler->FailRunning(absl::UnavailableError("version retired")), 1);
  EXPECT_EQ(stuck.response.status.code(), absl::StatusCode::kUnavailable);
  exe_->Release(100);
  EXPECT_TRUE(scheduler->Drain(absl::Seconds(30)));
  EXPECT_EQ(exe_->calls().size(), 1u);  // The taken requests never ran here.
}

TEST_F(SchedulerTest, FailRunningReleasesTheLaterBatchesOfAnOrderedScheduler) {
  SchedulerOptions options = Batching(1);
  options.batching.preserve_ordering = true;
  options.instance_count = 2;
  auto scheduler = Make(options);
  exe_->Hold(100);
  Outcome& stuck = Submit(*scheduler, 1, 100);  // Ticket 0, on one instance.
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Outcome& later = Submit(*scheduler, 1, 200);  // Ticket 1, on the other: done, held back.
  ASSERT_TRUE(exe_->AwaitEntered(2));
  EXPECT_FALSE(later.done.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
  EXPECT_EQ(scheduler->FailRunning(absl::UnavailableError("version retired")), 1);
  ASSERT_TRUE(stuck.done.HasBeenNotified());
  EXPECT_EQ(stuck.response.status.code(), absl::StatusCode::kUnavailable);
  ASSERT_TRUE(later.Wait());  // Its ticket no longer waits for the stuck one.
  ExpectOwnRows(later);
  exe_->Release(100);
  EXPECT_TRUE(scheduler->Drain(absl::Seconds(30)));
  Outcome& after = Submit(*scheduler, 1, 300);  // Drained: refused, not lost.
  ASSERT_TRUE(after.done.HasBeenNotified());
  EXPECT_EQ(after.response.status.code(), absl::StatusCode::kUnavailable);
}

TEST_F(SchedulerTest, FullBatchDoesNotWaitForTheDelay) {
  SchedulerOptions options = Batching(4);
  options.batching.max_queue_delay_us = 1'000'000;
  auto scheduler = Make(options);
  exe_->Close();
  for (int i = 0; i < 4; ++i) Submit(*scheduler, 1, 100.0f * i);
  exe_->Open();
  // The fake clock never moves: only a full batch can execute.
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->batches(), ElementsAre(4));
  for (const Outcome& o : outcomes_) EXPECT_EQ(o.response.timings.queue_ns, 0u);
}

TEST_F(SchedulerTest, RequestLargerThanMaxBatchSizeIsRejected) {
  auto scheduler = Make(Batching(4));
  Outcome& big = Submit(*scheduler, 5, 0);
  ASSERT_TRUE(big.done.HasBeenNotified());  // Inline, not queued.
  EXPECT_EQ(big.response.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.response.status.message(), HasSubstr("max_batch_size 4"));
  scheduler->Drain();
  EXPECT_TRUE(exe_->calls().empty());
  EXPECT_EQ(scheduler->Stats().fail.count, 1u);
}

TEST_F(SchedulerTest, MalformedInputIsRejected) {
  auto scheduler = Make(Batching(4));
  Outcome& o = Submit(*scheduler, 2, 0, [](InferenceRequest& r) { r.inputs[0].byte_size -= 4; });
  ASSERT_TRUE(o.done.HasBeenNotified());
  EXPECT_EQ(o.response.status.code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, FullQueueRejectsAtOnce) {
  SchedulerOptions options = Batching(1);
  options.batching.default_queue_policy.max_queue_size = 2;
  int observed_full = 0;
  options.on_reject = [&observed_full](bool queue_full) { observed_full += queue_full ? 1 : 100; };
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));  // Running, so no longer queued.
  Submit(*scheduler, 1, 100);
  Submit(*scheduler, 1, 200);
  Outcome& rejected = Submit(*scheduler, 1, 300);
  ASSERT_TRUE(rejected.done.HasBeenNotified());
  EXPECT_EQ(rejected.response.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(rejected.response.status.message(), HasSubstr("queue is full"));
  EXPECT_EQ(scheduler->Stats().pending, 2u);
  EXPECT_EQ(scheduler->Stats().rejected_queue_full, 1u);
  EXPECT_EQ(scheduler->Stats().rejected_draining, 0u);
  EXPECT_EQ(scheduler->Stats().fail.count, 1u);
  EXPECT_EQ(observed_full, 1);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  for (int i = 0; i < 3; ++i) ExpectOwnRows(outcomes_[i]);
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 1, 1));
}

TEST_F(SchedulerTest, QueueTimeoutRejects) {
  SchedulerOptions options = Batching(4);
  options.batching.default_queue_policy.default_timeout_us = 100;
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Outcome& late = Submit(*scheduler, 1, 100);
  clock_->Advance(microseconds(200));
  Outcome& fresh = Submit(*scheduler, 1, 200);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_EQ(late.response.status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(late.response.status.message(), HasSubstr("timed out"));
  EXPECT_EQ(late.response.timings.queue_ns, 200'000u);
  ExpectOwnRows(fresh);
  EXPECT_THAT(exe_->firsts(), ElementsAre(0, 200));
}

TEST_F(SchedulerTest, TimeoutOverrideOnlyWhenAllowed) {
  for (bool allow : {true, false}) {
    SCOPED_TRACE(allow);
    exe_ = std::make_shared<FakeExecutable>(dim_);
    outcomes_.clear();
    SchedulerOptions options = Batching(4);
    options.batching.default_queue_policy.allow_timeout_override = allow;
    auto scheduler = Make(options);
    exe_->Close();
    Submit(*scheduler, 1, 0);
    ASSERT_TRUE(exe_->AwaitEntered(1));
    Outcome& short_timeout =
        Submit(*scheduler, 1, 100, [](InferenceRequest& r) { r.timeout_us = 50; });
    Outcome& no_timeout = Submit(*scheduler, 1, 200);
    clock_->Advance(microseconds(100));
    exe_->Open();
    ASSERT_TRUE(WaitAll());
    EXPECT_EQ(short_timeout.response.status.code(),
              allow ? absl::StatusCode::kDeadlineExceeded : absl::StatusCode::kOk);
    ExpectOwnRows(no_timeout);
  }
}

TEST_F(SchedulerTest, DelayedRequestLosesItsPlace) {
  SchedulerOptions options = Batching(1);
  options.batching.default_queue_policy.default_timeout_us = 100;
  options.batching.default_queue_policy.timeout_action = QueuePolicy::TimeoutAction::kDelay;
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Submit(*scheduler, 1, 100);  // Times out below, so it goes behind fresher requests.
  clock_->Advance(microseconds(200));
  Submit(*scheduler, 1, 200);
  Submit(*scheduler, 1, 300);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->firsts(), ElementsAre(0, 200, 300, 100));
  for (const Outcome& o : outcomes_) ExpectOwnRows(o);  // Delayed, not rejected.
}

TEST_F(SchedulerTest, HigherPriorityIsServedFirst) {
  SchedulerOptions options = Batching(1);
  options.batching.priority_levels = 3;
  options.batching.default_priority_level = 2;
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  auto priority = [](uint32_t p) { return [p](InferenceRequest& r) { r.priority = p; }; };
  Submit(*scheduler, 1, 100, priority(3));
  Submit(*scheduler, 1, 200, priority(0));  // The default, level 2.
  Submit(*scheduler, 1, 300, priority(1));
  Submit(*scheduler, 1, 400, priority(2));
  Submit(*scheduler, 1, 500, priority(9));  // Unknown levels mean the default, as in Triton.
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_THAT(exe_->firsts(), ElementsAre(0, 300, 200, 400, 500, 100));
}

TEST_F(SchedulerTest, PriorityPolicyAppliesPerLevel) {
  SchedulerOptions options = Batching(1);
  options.batching.priority_levels = 2;
  options.batching.default_priority_level = 2;
  options.batching.priority_queue_policy[1].max_queue_size = 1;
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  auto high = [](InferenceRequest& r) { r.priority = 1; };
  Outcome& first_high = Submit(*scheduler, 1, 100, high);
  Outcome& second_high = Submit(*scheduler, 1, 200, high);
  Outcome& low = Submit(*scheduler, 1, 300);  // Level 2 is unbounded.
  EXPECT_EQ(second_high.response.status.code(), absl::StatusCode::kUnavailable);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  ExpectOwnRows(first_high);
  ExpectOwnRows(low);
}

TEST_F(SchedulerTest, PreserveOrderingHoldsLaterResponses) {
  for (bool preserve : {true, false}) {
    SCOPED_TRACE(preserve);
    exe_ = std::make_shared<FakeExecutable>(dim_);
    outcomes_.clear();
    {
      absl::MutexLock l(&log_mu_);
      completion_order_.clear();
    }
    SchedulerOptions options = Batching(1);
    options.instance_count = 2;
    options.batching.preserve_ordering = preserve;
    auto scheduler = Make(options);
    exe_->Hold(100);
    Outcome& a = Submit(*scheduler, 1, 100);
    ASSERT_TRUE(exe_->AwaitEntered(1));
    Outcome& b = Submit(*scheduler, 1, 200);
    ASSERT_TRUE(exe_->AwaitEntered(2));
    // With `a` stuck, only the instance that ran `b` can take `c`: once `c` runs, that instance
    // has finished with `b`, delivery included.
    Submit(*scheduler, 1, 300);
    ASSERT_TRUE(exe_->AwaitEntered(3));
    EXPECT_EQ(b.done.HasBeenNotified(), !preserve);
    exe_->Release(100);
    ASSERT_TRUE(WaitAll());
    if (preserve) {
      EXPECT_THAT(CompletionOrder(), ElementsAre("r0", "r1", "r2"));
    } else {
      std::vector<std::string> order = CompletionOrder();
      EXPECT_LT(std::find(order.begin(), order.end(), "r1") - order.begin(),
                std::find(order.begin(), order.end(), "r0") - order.begin());
    }
    ExpectOwnRows(a);
  }
}

TEST_F(SchedulerTest, CancelledAndExpiredRequestsAreDropped) {
  auto scheduler = Make(Batching(4));
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  Outcome& c = Submit(*scheduler, 1, 100, [cancelled](InferenceRequest& r) {
    r.is_cancelled = [cancelled] { return cancelled->load(); };
  });
  Outcome& d = Submit(*scheduler, 1, 200, [this](InferenceRequest& r) {
    r.deadline = clock_->Now() + microseconds(10);
  });
  Outcome& ok = Submit(*scheduler, 1, 300);
  cancelled->store(true);
  clock_->Advance(microseconds(20));
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  EXPECT_EQ(c.response.status.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(d.response.status.code(), absl::StatusCode::kDeadlineExceeded);
  ExpectOwnRows(ok);
  // Neither dropped request took rows in the execution.
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 1));
  EXPECT_EQ(ok.response.timings.executed_batch, 1);
  SchedulerStats stats = scheduler->Stats();
  EXPECT_EQ(stats.fail.count, 2u);
  EXPECT_EQ(stats.success.count, 2u);
}

TEST_F(SchedulerTest, DifferentNonBatchDimsAreNotMergedAndDoNotCutOtherBatchesShort) {
  exe_ = std::make_shared<FakeExecutable>(0, /*varying=*/true);
  auto scheduler = Make(Batching(8));
  // Rows of length `len`: [len, base, base + 1, ...].
  auto submit = [&](int64_t rows, int64_t len, float base) -> Outcome& {
    Outcome& out = outcomes_.emplace_back();
    out.id = "v" + std::to_string(outcomes_.size() - 1);
    out.rows = rows;
    out.base = base;
    auto data = std::make_shared<std::vector<float>>();
    for (int64_t r = 0; r < rows; ++r) {
      data->push_back(static_cast<float>(len));
      for (int64_t j = 1; j < len; ++j) data->push_back(base + static_cast<float>(r * len + j));
    }
    auto request = std::make_unique<InferenceRequest>();
    request->inputs.push_back({reinterpret_cast<const uint8_t*>(data->data()),
                               data->size() * sizeof(float),
                               {rows, len}});
    request->holder = data;
    request->output_requested = {true, true};
    request->batch_size = rows;
    request->on_complete = [&out](InferenceResponse r) {
      out.response = std::move(r);
      out.done.Notify();
    };
    scheduler->Submit(std::move(request));
    return out;
  };
  exe_->Close();
  submit(1, 3, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Outcome& a = submit(1, 3, 100);
  Outcome& b = submit(2, 3, 200);
  Outcome& c = submit(1, 5, 300);
  Outcome& d = submit(1, 3, 400);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  // a, b and d share [*, 3]; c's [*, 5] is another shape class: it waits for a batch of its own
  // (the next one, which it heads) instead of cutting a+b+d short.
  EXPECT_THAT(exe_->batches(), ElementsAre(1, 4, 1));
  for (Outcome* o : {&a, &b, &c, &d}) ASSERT_TRUE(o->response.status.ok()) << o->response.status;
  EXPECT_EQ(b.response.outputs[0].tensor.shape(), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(b.response.outputs[0].tensor.data_as<float>()[0], 2 * (200 + 2));
  EXPECT_EQ(b.response.outputs[0].tensor.data_as<float>()[1], 2 * (200 + 5));
  EXPECT_EQ(c.response.outputs[1].tensor.data_as<float>()[0], 5);
  EXPECT_EQ(d.response.outputs[0].tensor.data_as<float>()[0], 2 * (400 + 2));
}

TEST_F(SchedulerTest, StatsCountEveryRequestAndExecution) {
  SchedulerOptions options = Batching(4);
  auto scheduler = Make(options);
  exe_->AdvanceOnRun(clock_.get(), microseconds(5));
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  constexpr int kRequests = 10;
  int64_t rows = 1;
  for (int i = 1; i < kRequests; ++i) {
    Submit(*scheduler, 1 + i % 2, 100.0f * i);
    rows += 1 + i % 2;
  }
  EXPECT_EQ(scheduler->Stats().pending, kRequests - 1u);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  scheduler->Drain();
  SchedulerStats stats = scheduler->Stats();
  std::vector<int64_t> batches = exe_->batches();
  EXPECT_EQ(stats.success.count, kRequests);
  EXPECT_EQ(stats.fail.count, 0u);
  EXPECT_EQ(stats.inference_count, static_cast<uint64_t>(rows));
  EXPECT_EQ(stats.execution_count, batches.size());
  EXPECT_EQ(stats.queue.count, kRequests);
  EXPECT_EQ(stats.compute_infer.count, kRequests);
  // Every request is charged its execution's 5us.
  EXPECT_EQ(stats.compute_infer.ns, kRequests * 5'000u);
  EXPECT_EQ(stats.pending, 0u);
  EXPECT_GT(stats.last_inference_ms, 0u);
  std::map<int64_t, uint64_t> expected_batches;
  for (int64_t b : batches) ++expected_batches[b];
  std::map<int64_t, uint64_t> got_batches;
  for (const auto& [size, stat] : stats.batch_stats) {
    got_batches[size] = stat.compute_infer.count;
    EXPECT_EQ(stat.compute_infer.ns, stat.compute_infer.count * 5'000u);
  }
  EXPECT_EQ(got_batches, expected_batches);
  for (const Outcome& o : outcomes_) {
    ExpectOwnRows(o);
    EXPECT_EQ(o.response.timings.compute_infer_ns, 5'000u);
  }
}

TEST_F(SchedulerTest, RunFailureFailsTheWholeBatch) {
  auto scheduler = Make(Batching(4));
  exe_->Close();
  Submit(*scheduler, 1, 0);
  ASSERT_TRUE(exe_->AwaitEntered(1));
  Submit(*scheduler, 1, 100);
  Submit(*scheduler, 2, 200);
  exe_->SetFail(true);
  exe_->Open();
  ASSERT_TRUE(WaitAll());
  for (const Outcome& o : outcomes_) {
    EXPECT_EQ(o.response.status.code(), absl::StatusCode::kInternal);
    EXPECT_TRUE(o.response.outputs.empty());
  }
  SchedulerStats stats = scheduler->Stats();
  EXPECT_EQ(stats.fail.count, 3u);
  EXPECT_EQ(stats.execution_count, 0u);
}

TEST_F(SchedulerTest, DrainFinishesQueuedWorkThenRejects) {
  SchedulerOptions options = Batching(8);
  options.batching.max_queue_delay_us = 1'000'000;  // The fake clock never gets there.
  auto scheduler = Make(options);
  exe_->Close();
  Submit(*scheduler, 8, 0);  // Full: runs at once.
  ASSERT_TRUE(exe_->AwaitEntered(1));
  for (int i = 1; i <= 5; ++i) Submit(*scheduler, 1, 100.0f * i);
  exe_->Open();
  scheduler->Drain();
  for (const Outcome& o : outcomes_) {
    ASSERT_TRUE(o.done.HasBeenNotified()) << o.id;
    ExpectOwnRows(o);
  }
  EXPECT_THAT(exe_->batches(), ElementsAre(8, 5));
  Outcome& after = Submit(*scheduler, 1, 900);
  ASSERT_TRUE(after.done.HasBeenNotified());
  EXPECT_EQ(after.response.status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(scheduler->Stats().rejected_draining, 1u);
  EXPECT_EQ(scheduler->Stats().rejected_queue_full, 0u);
  scheduler->Drain();  // Idempotent.
}

TEST_F(SchedulerTest, ModelWithoutBatchDimension) {
  exe_ = std::make_shared<FakeExecutable>(dim_);
  SchedulerOptions options;  // max_batch_size 0: inputs are [D], not [batch, D].
  options.dynamic_batching = true;
  auto scheduler = Make(options);
  auto data = std::make_shared<std::vector<float>>(std::vector<float>{3, 4});
  Outcome& out = outcomes_.emplace_back();
  auto request = std::make_unique<InferenceRequest>();
  request->inputs.push_back({reinterpret_cast<const uint8_t*>(data->data()), 8, {2}});
  request->holder = data;
  request->on_complete = [&out](InferenceResponse r) {
    out.response = std::move(r);
    out.done.Notify();
  };
  scheduler->Submit(std::move(request));
  ASSERT_TRUE(out.Wait());
  ASSERT_TRUE(out.response.status.ok()) << out.response.status;
  ASSERT_EQ(out.response.outputs.size(), 2u);  // Empty output_requested: all outputs.
  EXPECT_EQ(out.response.outputs[0].tensor.shape(), (std::vector<int64_t>{2}));
  EXPECT_EQ(out.response.outputs[0].tensor.data_as<float>()[1], 8);
  EXPECT_EQ(out.response.outputs[1].tensor.data_as<float>()[0], 7);
}

TEST_F(SchedulerTest, RejectsInvalidOptions) {
  SchedulerOptions options = Batching(4);
  options.batching.preferred_batch_sizes = {8};
  EXPECT_EQ(CreateScheduler(options, exe_).status().code(), absl::StatusCode::kInvalidArgument);
  options = Batching(4);
  options.instance_count = 0;
  EXPECT_EQ(CreateScheduler(options, exe_).status().code(), absl::StatusCode::kInvalidArgument);
  options = Batching(4);
  options.batching.priority_levels = 2;
  options.batching.default_priority_level = 3;
  EXPECT_EQ(CreateScheduler(options, exe_).status().code(), absl::StatusCode::kInvalidArgument);
}

// Real clock, several instances and submitting threads: every request gets exactly its rows.
// Mostly here for ThreadSanitizer.
TEST_F(SchedulerTest, ConcurrentSubmittersWithRealClock) {
  SchedulerOptions options = Batching(8);
  options.instance_count = 3;
  options.batching.max_queue_delay_us = 200;
  options.batching.preferred_batch_sizes = {4, 8};
  options.batching.preserve_ordering = true;
  auto created = CreateScheduler(options, exe_);
  ASSERT_TRUE(created.ok()) << created.status();
  std::unique_ptr<Scheduler> scheduler = *std::move(created);
  constexpr int kThreads = 4, kPerThread = 50;
  // Outcomes are created up front: the deque is not thread-safe.
  std::vector<Outcome*> slots;
  for (int i = 0; i < kThreads * kPerThread; ++i) slots.push_back(&outcomes_.emplace_back());
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Outcome& out = *slots[t * kPerThread + i];
        out.rows = 1 + (i % 3);
        out.base = static_cast<float>(10'000 * t + 100 * i);
        auto data = std::make_shared<std::vector<float>>(static_cast<size_t>(out.rows * dim_));
        for (size_t k = 0; k < data->size(); ++k) (*data)[k] = out.base + static_cast<float>(k);
        auto request = std::make_unique<InferenceRequest>();
        request->inputs.push_back({reinterpret_cast<const uint8_t*>(data->data()),
                                   data->size() * sizeof(float),
                                   {out.rows, dim_}});
        request->holder = data;
        request->output_requested = {true, true};
        request->batch_size = out.rows;
        request->on_complete = [&out](InferenceResponse r) {
          out.response = std::move(r);
          out.done.Notify();
        };
        scheduler->Submit(std::move(request));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  ASSERT_TRUE(WaitAll());
  for (const Outcome& o : outcomes_) ExpectOwnRows(o);
  scheduler->Drain();
  EXPECT_EQ(scheduler->Stats().success.count, static_cast<uint64_t>(kThreads * kPerThread));
}

}  // namespace
}  // namespace cuvil
