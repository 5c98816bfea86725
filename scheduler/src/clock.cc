#include "clock.h"

#include "absl/time/time.h"

namespace cuvil {

Clock::time_point RealClock::Now() const { return Clock::now(); }

void RealClock::WaitUntil(absl::CondVar* cv, absl::Mutex* mu, Clock::time_point now,
                          Clock::time_point deadline) {
  if (deadline <= now) return;
  cv->WaitWithTimeout(mu, absl::FromChrono(deadline - now));
}

}  // namespace cuvil
