// ModelVersion: one loaded version's compiled code, scheduler and statistics (model_manager.h).
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cuvil/server/model_manager.h"
#include "request_sampler.h"
#include "sequence_batcher.h"

namespace cuvil {

const char* ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
    case ModelState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

ModelVersion::ModelVersion(std::string name, int64_t version, inference::ModelConfig config,
                           std::unique_ptr<LoadedModel> loaded,
                           std::shared_ptr<const Executable> executable,
                           std::unique_ptr<Scheduler> scheduler, double compile_ms,
                           uint64_t compilations)
    : name_(std::move(name)),
      version_(version),
      version_string_(absl::StrCat(version)),
      config_(std::move(config)),
      loaded_(std::move(loaded)),
      executable_(std::move(executable)),
      scheduler_(std::move(scheduler)),
      compile_ms_(compile_ms),
      compilations_(compilations) {
  RequestSamplerOptions options;
  if (auto it = config_.parameters().find("cuvil.validation_samples");
      it != config_.parameters().end()) {
    int64_t n = 0;
    options.capacity =
        absl::SimpleAtoi(it->second.string_value(), &n) && n >= 0 ? static_cast<size_t>(n) : 0;
  }
  std::vector<std::string> signature;
  if (loaded_ != nullptr) {
    for (const TensorSignature& sig : loaded_->model().inputs) signature.push_back(sig.name);
    for (const KernelFunction& k : loaded_->model().kernels) {
      if (k.op_type == "Loop" || k.op_type == "Scan") has_loops_ = true;
    }
  }
  if (executable_ != nullptr) {
    sampler_ = std::make_unique<RequestSampler>(executable_->inputs(), signature, options);
  }
}

std::vector<std::vector<HostTensor>> ModelVersion::RecentRequests() const {
  return sampler_ != nullptr ? sampler_->Recent() : std::vector<std::vector<HostTensor>>{};
}

void ModelVersion::set_sequences(std::unique_ptr<SequenceBatcher> sequences) {
  sequences_ = std::move(sequences);
}

ModelVersion::~ModelVersion() {
  // Workers must stop before the JIT code they call is removed.
  if (scheduler_) scheduler_->Drain();
  scheduler_.reset();
  executable_.reset();
  loaded_.reset();
}

namespace {

bool SameTensors(const std::vector<TensorSpec>& a, const std::vector<TensorSpec>& b) {
  return std::equal(
      a.begin(), a.end(), b.begin(), b.end(), [](const TensorSpec& x, const TensorSpec& y) {
        return x.name == y.name && x.dtype == y.dtype && x.dims == y.dims && x.batched == y.batched;
      });
}

}  // namespace

std::shared_ptr<ModelVersion> ModelVersion::Successor() {
  absl::MutexLock lock(&retire_mu_);
  return successor_.lock();
}

void ModelVersion::Submit(std::unique_ptr<InferenceRequest> request) {
  // No lock is held across the scheduler's Submit, which may run the request inline: a reload
  // must never wait for an execution to name the successor. A version that serves takes no lock
  // here; a draining one hands the request back.
  if (sampler_ != nullptr) sampler_->Record(*request);
  request = scheduler_->SubmitUnlessDraining(std::move(request));
  if (request == nullptr) return;
  // Draining: RetireTo named the successor (if any) before the drain began.
  std::shared_ptr<ModelVersion> next = Successor();
  if (next == nullptr) return scheduler_->Submit(std::move(request));  // UNAVAILABLE.
  next->Submit(std::move(request));
}

int ModelVersion::AbandonStuck(const absl::Status& status, absl::Duration stuck_after) {
  for (std::unique_ptr<InferenceRequest>& request : scheduler_->TakeQueued()) {
    std::shared_ptr<ModelVersion> next = Successor();
    if (next != nullptr) {
      next->Submit(std::move(request));
    } else {
      scheduler_->Submit(std::move(request));  // Draining: UNAVAILABLE.
    }
  }
  return scheduler_->FailRunning(status, stuck_after);
}

bool ModelVersion::RetireTo(std::shared_ptr<ModelVersion> successor, absl::Duration timeout) {
  const bool compatible = successor != nullptr && successor.get() != this &&
                          successor->config().max_batch_size() == config_.max_batch_size() &&
                          SameTensors(successor->executable().inputs(), executable_->inputs()) &&
                          SameTensors(successor->executable().outputs(), executable_->outputs());
  if (compatible) {
    absl::MutexLock lock(&retire_mu_);
    successor_ = std::move(successor);
  }
  return Drain(timeout);
}

namespace {

DurationStat Minus(DurationStat a, DurationStat b) { return {a.count - b.count, a.ns - b.ns}; }

}  // namespace

SchedulerStats ModelVersion::Stats() const {
  SchedulerStats s = scheduler_->Stats();
  const SchedulerStats& b = baseline_;
  s.inference_count -= b.inference_count;
  s.execution_count -= b.execution_count;
  s.success = Minus(s.success, b.success);
  s.fail = Minus(s.fail, b.fail);
  s.rejected_queue_full -= b.rejected_queue_full;
  s.rejected_draining -= b.rejected_draining;
  s.queue = Minus(s.queue, b.queue);
  s.compute_input = Minus(s.compute_input, b.compute_input);
  s.compute_infer = Minus(s.compute_infer, b.compute_infer);
  s.compute_output = Minus(s.compute_output, b.compute_output);
  for (auto it = s.batch_stats.begin(); it != s.batch_stats.end();) {
    if (auto base = b.batch_stats.find(it->first); base != b.batch_stats.end()) {
      it->second.compute_input = Minus(it->second.compute_input, base->second.compute_input);
      it->second.compute_infer = Minus(it->second.compute_infer, base->second.compute_infer);
      it->second.compute_output = Minus(it->second.compute_output, base->second.compute_output);
    }
    it = it->second.compute_infer.count == 0 ? s.batch_stats.erase(it) : std::next(it);
  }
  if (s.inference_count == 0) s.last_inference_ms = 0;
  return s;
}

}  // namespace cuvil
