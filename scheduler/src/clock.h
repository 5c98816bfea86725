// The time source a scheduler reads and waits on, behind an interface so tests can drive
// batching delays and queue timeouts with a fake clock instead of sleeps.
#ifndef CUVIL_SCHEDULER_CLOCK_H_
#define CUVIL_SCHEDULER_CLOCK_H_

#include <functional>

#include "absl/synchronization/mutex.h"
#include "cuvil/scheduler/inference_request.h"

namespace cuvil {

// Thread-safe.
class SchedulerClock {
 public:
  virtual ~SchedulerClock() = default;
  virtual Clock::time_point Now() const = 0;
  // Blocks on `cv` (releasing `mu`, which the caller holds) until signalled or until
  // `deadline`; `now` is the caller's last reading. May return early: callers re-check.
  virtual void WaitUntil(absl::CondVar* cv, absl::Mutex* mu, Clock::time_point now,
                         Clock::time_point deadline) = 0;
  // `wake` runs whenever time jumps (fake clocks only), so waiters re-check their deadlines.
  // It must not call back into the clock.
  virtual void AddWaker(const void* key, std::function<void()> wake) {}
  virtual void RemoveWaker(const void* key) {}
};

// The steady clock.
class RealClock : public SchedulerClock {
 public:
  Clock::time_point Now() const override;
  void WaitUntil(absl::CondVar* cv, absl::Mutex* mu, Clock::time_point now,
                 Clock::time_point deadline) override;
};

inline uint64_t NanosBetween(Clock::time_point from, Clock::time_point to) {
  return to > from ? static_cast<uint64_t>(
                         std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count())
                   : 0;
}

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_CLOCK_H_
