#include "sequence_plan.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace cuvil::perf {

absl::Status SequencePlan::Check(const PerfOptions& options, int64_t slots) {
  const uint64_t ids = options.sequence_id_end - options.sequence_id_start;  // Count minus one.
  if (ids < static_cast<uint64_t>(slots)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--sequence-id-range ", options.sequence_id_start, ":", options.sequence_id_end, " holds ",
        ids + 1, " ids; ", slots, " sequences run at once, so it needs more ids than that"));
  }
  return absl::OkStatus();
}

SequencePlan::SequencePlan(const PerfOptions& options, int64_t slots)
    : options_(options),
      slots_(static_cast<size_t>(slots)),
      next_id_(options.sequence_id_start),
      rng_(options.seed) {}

int64_t SequencePlan::NewLength() {
  const double n = static_cast<double>(options_.sequence_length);
  const double v = options_.sequence_length_variation / 100.0;
  if (v == 0) return options_.sequence_length;
  std::uniform_real_distribution<double> d(n * (1 - v), n * (1 + v));
  return std::max<int64_t>(1, std::llround(d(rng_)));
}

uint64_t SequencePlan::NewId() {
  // Check() guarantees a free id within slots + 1 tries.
  for (;;) {
    const uint64_t id = next_id_;
    next_id_ = next_id_ == options_.sequence_id_end ? options_.sequence_id_start : next_id_ + 1;
    if (!in_use_.contains(id)) return id;
  }
}

void SequencePlan::Close(Slot& s) {
  in_use_.erase(s.id);
  s.open = false;
}

int64_t SequencePlan::Acquire() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t n = static_cast<int64_t>(slots_.size());
  for (;;) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = (next_slot_ + i) % n;
      if (!slots_[slot].busy) {
        slots_[slot].busy = true;
        next_slot_ = (slot + 1) % n;
        return slot;
      }
    }
    free_.wait(lock);
  }
}

void SequencePlan::Release(int64_t slot) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    slots_[slot].busy = false;
  }
  free_.notify_one();
}

SequenceStep SequencePlan::Next(int64_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[slot];
  SequenceStep step;
  step.slot = slot;
  if (!s.open) {
    s.open = true;
    s.id = NewId();
    in_use_.insert(s.id);
    s.length = NewLength();
    s.taken = 0;
    step.start = true;
    ++started_;
  }
  step.id = s.id;
  step.number = ++s.taken;
  if (s.taken >= s.length) {
    step.end = true;
    ++completed_;
    Close(s);
  }
  return step;
}

void SequencePlan::Abandon(int64_t slot) {
  std::lock_guard<std::mutex> lock(mu_);
  if (slots_[slot].open) Close(slots_[slot]);
}

std::vector<SequenceStep> SequencePlan::CloseOpen() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<SequenceStep> out;
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (!s.open) continue;
    out.push_back({static_cast<int64_t>(i), s.id, false, true, s.taken + 1});
    Close(s);
  }
  return out;
}

uint64_t SequencePlan::started() const {
  std::lock_guard<std::mutex> lock(mu_);
  return started_;
}

uint64_t SequencePlan::completed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return completed_;
}

}  // namespace cuvil::perf
