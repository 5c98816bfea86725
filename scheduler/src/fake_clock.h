// A manually advanced clock for deterministic scheduler tests.
#ifndef CUVIL_SCHEDULER_FAKE_CLOCK_H_
#define CUVIL_SCHEDULER_FAKE_CLOCK_H_

#include <atomic>
#include <map>

#include "clock.h"

namespace cuvil {

// Thread-safe. Lock order: wakers_mu_ -> a waker's own mutex -> waits_mu_.
class FakeClock : public SchedulerClock {
 public:
  FakeClock();

  Clock::time_point Now() const override;
  // Waits for a signal only: deadlines pass when Advance() wakes the waiter.
  void WaitUntil(absl::CondVar* cv, absl::Mutex* mu, Clock::time_point now,
                 Clock::time_point deadline) override;
  void AddWaker(const void* key, std::function<void()> wake) override;
  void RemoveWaker(const void* key) override;

  // Moves time forward and wakes every waiter.
  void Advance(std::chrono::nanoseconds d);
  // Blocks until some thread entered a timed wait after reading a time >= `t`: proof that it
  // looked at the queue at `t` and chose to wait.
  void AwaitTimedWaitAt(Clock::time_point t);

 private:
  std::atomic<int64_t> now_ns_;  // Lock-free so Now() takes no lock under a waiter's mutex.
  absl::Mutex wakers_mu_;
  std::map<const void*, std::function<void()>> wakers_ ABSL_GUARDED_BY(wakers_mu_);
  absl::Mutex waits_mu_;
  Clock::time_point latest_wait_ ABSL_GUARDED_BY(waits_mu_) = Clock::time_point::min();
};

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_FAKE_CLOCK_H_
