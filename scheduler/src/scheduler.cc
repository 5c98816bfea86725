// The per model-version scheduler: a shared priority queue, `instance_count` workers that each
// form a batch, execute it in their own context and complete its requests.
#include "cuvil/scheduler/scheduler.h"

#include <atomic>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "completion_sequencer.h"
#include "cuvil/runtime/parallel.h"
#include "execution_context.h"
#include "model_layout.h"
#include "request_queue.h"
#include "scheduler_internal.h"
#include "stats_recorder.h"

namespace cuvil {

namespace {

// Thread-safe. Lock order: mu_ -> the clock's internal locks; on_complete runs with no lock.
class BatchingScheduler final : public Scheduler {
 public:
  BatchingScheduler(const SchedulerOptions& options, std::shared_ptr<const Executable> executable,
                    std::shared_ptr<SchedulerClock> clock)
      : options_(options),
        executable_(std::move(executable)),
        clock_(std::move(clock)),
        layout_(*executable_, options.max_batch_size),
        ordered_(options.dynamic_batching && options.batching.preserve_ordering),
        skip_delay_when_idle_(options.dynamic_batching && options.batching.skip_delay_when_idle),
        stats_(layout_.max_rows()),
        queue_(options, &layout_) {}

  ~BatchingScheduler() override { Drain(absl::InfiniteDuration()); }

  void Start() {
    clock_->AddWaker(this, [this] {
      absl::MutexLock l(&mu_);
      cv_.SignalAll();
    });
    for (int i = 0; i < options_.instance_count; ++i) {
      contexts_.push_back(
          std::make_unique<ExecutionContext>(executable_.get(), &layout_, clock_.get()));
    }
    {
      absl::MutexLock l(&running_mu_);
      running_.resize(contexts_.size());
      for (size_t i = 0; i < contexts_.size(); ++i) running_[i].context = contexts_[i].get();
    }
    {
      absl::MutexLock l(&mu_);
      for (auto& context : contexts_) idle_contexts_.push_back(context.get());
    }
    {
      absl::MutexLock l(&mu_);
      live_workers_ = options_.instance_count;
    }
    for (int i = 0; i < options_.instance_count; ++i) {
      workers_.emplace_back([this] {
        WorkerLoop();
        absl::MutexLock l(&mu_);
        --live_workers_;  // Last touch of `this`: Drain may join the thread now.
      });
    }
  }

  void Submit(std::unique_ptr<InferenceRequest> request) override {
    SubmitImpl(std::move(request), /*hand_back=*/false);
  }

  std::unique_ptr<InferenceRequest> SubmitUnlessDraining(
      std::unique_ptr<InferenceRequest> request) override {
    return SubmitImpl(std::move(request), /*hand_back=*/true);
  }

 private:
  std::unique_ptr<InferenceRequest> SubmitImpl(std::unique_ptr<InferenceRequest> request,
                                               bool hand_back) {
    if (request == nullptr) return nullptr;
    // Handed back before validation (the caller routes it on); rechecked under mu_ below.
    if (hand_back && draining_hint_.load(std::memory_order_acquire)) return request;
    absl::StatusOr<int64_t> rows = layout_.Validate(*request);
    if (!rows.ok()) {
      Reject(std::move(request), rows.status());
      return nullptr;
    }
    QueuedRequest queued;
    queued.request = std::move(request);
    queued.rows = *rows;
    queued.enqueued = clock_->Now();
    absl::Status status;
    bool draining = false;
    ExecutionContext* inline_context = nullptr;
    {
      absl::MutexLock l(&mu_);
      draining = draining_;
      if (draining) {
        status = absl::UnavailableError("scheduler is draining and accepts no new requests");
      } else if (queued.request->may_run_inline && CanRunInline()) {
        inline_context = ClaimContext();
        last_batch_requests_ = 1;
        ++inline_calls_;
      } else {
        status = queue_.Enqueue(queued);  // Fails only when the level's queue is full.
      }
      if (status.ok() && inline_context == nullptr) cv_.Signal();
    }
    if (inline_context != nullptr) {
      RunInline(*inline_context, std::move(queued));
      return nullptr;
    }
    if (draining && hand_back) return std::move(queued.request);
    if (!status.ok()) {
      stats_.RecordRejection(/*queue_full=*/!draining);
      if (options_.on_reject) options_.on_reject(!draining);
      Reject(std::move(queued.request), status);
    }
    return nullptr;
  }

 public:
  using Scheduler::Drain;
  bool Drain(absl::Duration timeout) override {
    absl::MutexLock drain_lock(&drain_mu_);
    if (drained_) return true;
    {
      absl::MutexLock l(&mu_);
      draining_ = true;
      draining_hint_.store(true, std::memory_order_release);
      cv_.SignalAll();
      // Workers leave once the queue is empty; inline executions run on their callers'
      // threads: wait for both.
      const bool idle =
          mu_.AwaitWithTimeout(absl::Condition(
                                   +[](BatchingScheduler* s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu_) {
                                     return s->live_workers_ == 0 && s->inline_calls_ == 0;
                                   },
                                   this),
                               timeout);
      if (!idle) return false;
    }
    for (std::thread& worker : workers_) worker.join();
    workers_.clear();
    clock_->RemoveWaker(this);
    drained_ = true;
    return true;
  }

  int FailRunning(const absl::Status& status, absl::Duration running_at_least) override {
    std::vector<std::function<void(InferenceResponse)>> callbacks;
    std::vector<uint64_t> tickets;  // preserve_ordering: released so later batches go out.
    const Clock::time_point started_by =
        clock_->Now() - absl::ToChronoNanoseconds(running_at_least);
    {
      absl::MutexLock l(&running_mu_);
      for (RunningExecution& r : running_) {
        if (r.batch == nullptr || r.abandoned || r.started > started_by) continue;
        r.abandoned = true;
        tickets.push_back(r.ticket);
        // The executing thread reads other fields of these requests, never on_complete until
        // it has seen `abandoned` under running_mu_.
        for (QueuedRequest& q : *r.batch) {
          if (q.request != nullptr && q.request->on_complete) {
            callbacks.push_back(std::move(q.request->on_complete));
            q.request->on_complete = nullptr;
          }
        }
      }
    }
    for (auto& on_complete : callbacks) {
      stats_.RecordFailure(0);
      InferenceResponse response;
      response.status = status;
      on_complete(std::move(response));
    }
    if (ordered_) {
      for (uint64_t ticket : tickets) {
        std::vector<Completion> none;
        sequencer_.Deliver(ticket, none);
      }
    }
    return static_cast<int>(callbacks.size());
  }

  std::vector<std::unique_ptr<InferenceRequest>> TakeQueued() override {
    std::vector<QueuedRequest> queued;
    {
      absl::MutexLock l(&mu_);
      if (!draining_) return {};
      queued = queue_.TakeAll();
    }
    std::vector<std::unique_ptr<InferenceRequest>> requests;
    requests.reserve(queued.size());
    for (QueuedRequest& q : queued) requests.push_back(std::move(q.request));
    return requests;
  }

  SchedulerStats Stats() const override {
    SchedulerStats stats = stats_.Snapshot();
    absl::MutexLock l(&mu_);
    stats.pending = queue_.size();
    return stats;
  }

 private:
  void Reject(std::unique_ptr<InferenceRequest> request, absl::Status status) {
    stats_.RecordFailure(0);
    Completion c;
    c.request = std::move(request);
    c.response.status = std::move(status);
    DeliverCompletion(c);
  }

  // True when a request submitted now would start at once on an idle instance, alone: nothing is
  // queued, and with dynamic batching no batch is forming (the last execution served one request
  // and a worker would skip the delay), so running it here changes no batch, only who runs it.
  bool CanRunInline() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (options_.inline_execution_max_us == 0 || ordered_) return false;
    if (idle_contexts_.empty() || !queue_.empty()) return false;
    if (recent_execution_ns_ == 0 || recent_execution_ns_ > options_.inline_execution_max_us * 1000)
      return false;
    if (!options_.dynamic_batching) return true;
    return skip_delay_when_idle_ && busy_ == 0 && last_batch_requests_ <= 1;
  }

  ExecutionContext* ClaimContext() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    ExecutionContext* context = idle_contexts_.back();
    idle_contexts_.pop_back();
    ++busy_;
    return context;
  }

  // Returns a context claimed by ClaimContext and folds the execution's duration into the
  // estimate CanRunInline reads.
  void ReleaseContext(ExecutionContext* context, uint64_t execution_ns)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    idle_contexts_.push_back(context);
    --busy_;
    if (execution_ns > 0) {
      // A moving average over about 8 executions, so one slow run does not switch inlining off.
      recent_execution_ns_ =
          recent_execution_ns_ == 0 ? execution_ns : (recent_execution_ns_ * 7 + execution_ns) / 8;
    }
    if (draining_) {
      cv_.SignalAll();  // Workers waiting for a context must see the drain.
    } else if (!queue_.empty()) {
      cv_.Signal();
    }
  }

  // Executes one request on the calling thread in `context` (claimed by Submit).
  void RunInline(ExecutionContext& context, QueuedRequest queued) {
    const int caller_threads = IntraOpThreads();
    SetIntraOpThreads(options_.intra_op_threads);
    std::vector<QueuedRequest> batch;
    batch.push_back(std::move(queued));
    std::vector<InferenceResponse> responses;
    std::vector<Completion> done;
    bool abandoned = false;
    const uint64_t execution_ns = Process(context, /*ticket=*/0, batch, responses, done, abandoned);
    SetIntraOpThreads(caller_threads);
    {
      absl::MutexLock l(&mu_);
      ReleaseContext(&context, execution_ns);
    }
    Deliver(/*ticket=*/0, done, abandoned);
    absl::MutexLock l(&mu_);
    --inline_calls_;  // Last touch of `this`: Drain (and so destruction) may proceed.
  }

  void WorkerLoop() {
    SetIntraOpThreads(options_.intra_op_threads);  // The budget generated kernels split work over.
    // Reused across batches so the steady state does not allocate for bookkeeping.
    std::vector<QueuedRequest> batch;
    std::vector<Completion> done;
    std::vector<InferenceResponse> responses;
    batch.reserve(static_cast<size_t>(layout_.max_rows()));
    while (true) {
      uint64_t ticket = 0;
      ExecutionContext* context = nullptr;
      {
        absl::MutexLock l(&mu_);
        while (true) {
          if (idle_contexts_.empty()) {  // Every instance is running inline on a caller.
            cv_.Wait(&mu_);
            continue;
          }
          const Clock::time_point now = clock_->Now();
          // Idle instances and as many requests queued as the last batch served: in a closed
          // loop every client has sent, so waiting longer only adds latency.
          const bool caught_up = skip_delay_when_idle_ && busy_ == 0 &&
                                 queue_.size() >= std::max<size_t>(last_batch_requests_, 1);
          RequestQueue::Decision decision =
              queue_.NextBatch(now, draining_ || caught_up, &batch, &done);
          if (decision.taken > 0 || !done.empty()) break;
          if (queue_.empty()) {
            if (draining_) return;
            cv_.Wait(&mu_);
          } else {
            clock_->WaitUntil(&cv_, &mu_, now, decision.wake_at);
          }
        }
        if (ordered_) ticket = next_ticket_++;
        last_batch_requests_ = batch.size();
        context = ClaimContext();
        // Another idle instance can start on what is left.
        if (!queue_.empty()) cv_.Signal();
      }
      bool abandoned = false;
      const uint64_t execution_ns = Process(*context, ticket, batch, responses, done, abandoned);
      {
        absl::MutexLock l(&mu_);
        ReleaseContext(context, execution_ns);
      }
      Deliver(ticket, done, abandoned);
    }
  }

  // Executes `batch` (minus cancelled or late requests) and appends its completions to `done`
  // (for Deliver). Returns the execution's duration (0 when nothing ran, it failed or it was
  // abandoned). Sets `abandoned` when FailRunning answered the batch's requests meanwhile (its
  // ticket, if any, was delivered then): only the completions made before the execution remain.
  uint64_t Process(ExecutionContext& context, uint64_t ticket, std::vector<QueuedRequest>& batch,
                   std::vector<InferenceResponse>& responses, std::vector<Completion>& done,
                   bool& abandoned) {
    for (const Completion& c : done) stats_.RecordFailure(c.response.timings.queue_ns);
    const Clock::time_point start = clock_->Now();
    uint64_t execution_ns = 0;
    // Polled here, outside the lock, since is_cancelled is caller code.
    size_t kept = 0;
    for (size_t i = 0; i < batch.size(); ++i) {
      InferenceRequest& request = *batch[i].request;
      absl::Status status;
      if (request.is_cancelled && request.is_cancelled()) {
        status = absl::CancelledError("request was cancelled before execution");
      } else if (request.deadline <= start) {
        status = absl::DeadlineExceededError("request deadline passed before execution");
      }
      if (status.ok()) {
        if (kept != i) batch[kept] = std::move(batch[i]);
        ++kept;
        continue;
      }
      uint64_t queued_ns = NanosBetween(batch[i].enqueued, start);
      stats_.RecordFailure(queued_ns);
      Completion c;
      c.request = std::move(batch[i].request);
      c.response.status = std::move(status);
      c.response.timings.queue_ns = queued_ns;
      done.push_back(std::move(c));
    }
    batch.resize(kept);

    if (!batch.empty()) {
      responses.clear();
      responses.resize(batch.size());
      if (options_.on_batch_start) {
        int64_t rows = 0;
        for (const QueuedRequest& q : batch) rows += q.rows;
        options_.on_batch_start(rows);
      }
      RunningExecution* running = nullptr;
      {
        absl::MutexLock l(&running_mu_);
        running = &RunningOf(context);
        running->batch = &batch;
        running->ticket = ticket;
        running->started = start;
      }
      ExecutionContext::Result result = context.Execute(batch, responses);
      const Clock::time_point end = clock_->Now();
      {
        absl::MutexLock l(&running_mu_);
        running->batch = nullptr;
        abandoned = std::exchange(running->abandoned, false);
      }
      if (options_.on_batch_done) {
        options_.on_batch_done(result.rows, result.input_ns + result.infer_ns + result.output_ns,
                               result.status.ok() && !abandoned);
      }
      if (abandoned) {  // Answered by FailRunning; what it computed is dropped.
        batch.clear();
        return 0;
      }
      if (result.status.ok()) {
        stats_.RecordExecution(result.rows, result.input_ns, result.infer_ns, result.output_ns);
        execution_ns = result.input_ns + result.infer_ns + result.output_ns;
      }
      for (size_t i = 0; i < batch.size(); ++i) {
        Completion c;
        c.request = std::move(batch[i].request);
        c.response = std::move(responses[i]);
        RequestTimings& t = c.response.timings;
        t.queue_ns = NanosBetween(batch[i].enqueued, start);
        t.compute_input_ns = result.input_ns;
        t.compute_infer_ns = result.infer_ns;
        t.compute_output_ns = result.output_ns;
        t.executed_batch = result.rows;
        const uint64_t total_ns = NanosBetween(batch[i].enqueued, end);
        if (result.status.ok()) {
          stats_.RecordSuccess(t, total_ns);
        } else {
          c.response.status = result.status;
          c.response.outputs.clear();
          stats_.RecordFailure(total_ns);
        }
        done.push_back(std::move(c));
      }
      batch.clear();
    }

    return execution_ns;
  }

  // Completes the requests of one Process call; called after its context is released, so a
  // client that submits again on completion finds the instance idle. An abandoned execution's
  // ticket was delivered by FailRunning: what is left goes out at once.
  void Deliver(uint64_t ticket, std::vector<Completion>& done, bool abandoned) {
    if (ordered_ && !abandoned) {
      sequencer_.Deliver(ticket, done);
    } else {
      for (Completion& c : done) DeliverCompletion(c);
    }
    done.clear();
  }

  const SchedulerOptions options_;  // intra_op_threads is kept for executables that use it.
  const std::shared_ptr<const Executable> executable_;
  const std::shared_ptr<SchedulerClock> clock_;
  const ModelLayout layout_;
  const bool ordered_;
  const bool skip_delay_when_idle_;
  StatsRecorder stats_;
  CompletionSequencer sequencer_;

  mutable absl::Mutex mu_;
  absl::CondVar cv_;  // Signalled on new work, draining and (fake) clock jumps.
  RequestQueue queue_ ABSL_GUARDED_BY(mu_);
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> draining_hint_{false};  // draining_, readable without mu_ (set once).
  uint64_t next_ticket_ ABSL_GUARDED_BY(mu_) = 0;
  int busy_ ABSL_GUARDED_BY(mu_) = 0;                    // Instances executing a batch.
  size_t last_batch_requests_ ABSL_GUARDED_BY(mu_) = 0;  // Requests in the latest batch taken.
  // Contexts no execution holds; a worker or an inline caller claims one per execution.
  std::vector<ExecutionContext*> idle_contexts_ ABSL_GUARDED_BY(mu_);
  uint64_t recent_execution_ns_ ABSL_GUARDED_BY(mu_) = 0;  // Moving average; 0 until one ran.
  int inline_calls_ ABSL_GUARDED_BY(mu_) = 0;  // RunInline calls not yet returned (Drain waits).
  int live_workers_ ABSL_GUARDED_BY(mu_) = 0;  // Worker threads not yet past WorkerLoop.

  // One per context: the batch it is executing, for FailRunning. Taken around each execution
  // only (never with mu_ held), so it is uncontended but for FailRunning.
  struct RunningExecution {
    ExecutionContext* context = nullptr;  // Fixed by Start().
    std::vector<QueuedRequest>* batch = nullptr;
    uint64_t ticket = 0;
    Clock::time_point started;
    bool abandoned = false;  // FailRunning answered `batch`; its executor drops the results.
  };
  RunningExecution& RunningOf(const ExecutionContext& context)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(running_mu_) {
    for (RunningExecution& r : running_) {
      if (r.context == &context) return r;
    }
    return running_.front();  // Unreachable: every context has its entry.
  }
  absl::Mutex running_mu_;
  // Sized once by Start(); entries are reached by reference afterwards.
  std::vector<RunningExecution> running_ ABSL_GUARDED_BY(running_mu_);

  absl::Mutex drain_mu_;  // Serialises Drain(), which the destructor also calls.
  bool drained_ ABSL_GUARDED_BY(drain_mu_) = false;
  // Written only by Start(); each context is used by one thread at a time (see idle_contexts_).
  std::vector<std::unique_ptr<ExecutionContext>> contexts_;
  std::vector<std::thread> workers_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Scheduler>> CreateSchedulerWithClock(
    const SchedulerOptions& options, std::shared_ptr<const Executable> executable,
    std::shared_ptr<SchedulerClock> clock) {
  if (executable == nullptr) return absl::InvalidArgumentError("no executable");
  if (clock == nullptr) return absl::InvalidArgumentError("no clock");
  if (options.instance_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("instance_count must be at least 1, got ", options.instance_count));
  }
  if (absl::Status s = RequestQueue::ValidateOptions(options); !s.ok()) return s;
  auto scheduler =
      std::make_unique<BatchingScheduler>(options, std::move(executable), std::move(clock));
  scheduler->Start();
  return scheduler;
}

absl::StatusOr<std::unique_ptr<Scheduler>> CreateScheduler(
    const SchedulerOptions& options, std::shared_ptr<const Executable> executable) {
  return CreateSchedulerWithClock(options, std::move(executable), std::make_shared<RealClock>());
}

}  // namespace cuvil
