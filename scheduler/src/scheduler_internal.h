// Scheduler construction with an injected clock, for tests.
#ifndef CUVIL_SCHEDULER_SCHEDULER_INTERNAL_H_
#define CUVIL_SCHEDULER_SCHEDULER_INTERNAL_H_

#include <memory>

#include "clock.h"
#include "cuvil/scheduler/scheduler.h"

namespace cuvil {

// CreateScheduler, reading and waiting on `clock` instead of the steady clock.
absl::StatusOr<std::unique_ptr<Scheduler>> CreateSchedulerWithClock(
    const SchedulerOptions& options, std::shared_ptr<const Executable> executable,
    std::shared_ptr<SchedulerClock> clock);

}  // namespace cuvil

#endif  // CUVIL_SCHEDULER_SCHEDULER_INTERNAL_H_
