#include "fake_clock.h"

namespace cuvil {

// Far from zero so "now minus something" never underflows.
FakeClock::FakeClock() : now_ns_(int64_t{1'000'000'000'000}) {}

Clock::time_point FakeClock::Now() const {
  return Clock::time_point(std::chrono::nanoseconds(now_ns_.load(std::memory_order_acquire)));
}

void FakeClock::WaitUntil(absl::CondVar* cv, absl::Mutex* mu, Clock::time_point now,
                          Clock::time_point deadline) {
  {
    absl::MutexLock l(&waits_mu_);
    if (now > latest_wait_) latest_wait_ = now;
  }
  cv->Wait(mu);
}

void FakeClock::AddWaker(const void* key, std::function<void()> wake) {
  absl::MutexLock l(&wakers_mu_);
  wakers_[key] = std::move(wake);
}

void FakeClock::RemoveWaker(const void* key) {
  absl::MutexLock l(&wakers_mu_);
  wakers_.erase(key);
}

void FakeClock::Advance(std::chrono::nanoseconds d) {
  now_ns_.fetch_add(d.count(), std::memory_order_acq_rel);
  absl::MutexLock l(&wakers_mu_);
  for (auto& [key, wake] : wakers_) wake();
}

void FakeClock::AwaitTimedWaitAt(Clock::time_point t) {
  absl::MutexLock l(&waits_mu_);
  auto reached = [this, t]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waits_mu_) { return latest_wait_ >= t; };
  waits_mu_.Await(absl::Condition(&reached));
}

}  // namespace cuvil
