// Private: how many threads each part of the server runs, sized together from the core count
// (docs/serving.md, "Thread budget"), and the lines the server logs about them at start.
#ifndef CUVIL_SERVER_SRC_THREAD_BUDGET_H_
#define CUVIL_SERVER_SRC_THREAD_BUDGET_H_

#include <string>

#include "cuvil/scheduler/scheduler.h"

namespace cuvil {

// The front end's threads. Plain values; thread-compatible.
struct ThreadBudget {
  int cores = 1;
  // gRPC's synchronous methods (probes, metadata, repository and admin calls): one completion
  // queue with 1..2 pollers; a call that runs takes a thread, at most sync_max_threads in all.
  // ModelInfer runs on grpc_infer_threads threads polling its completion queue (one per core:
  // they execute small models inline), ModelStreamInfer on gRPC's callback threads; never a
  // thread per call.
  int grpc_infer_threads = 1;
  int grpc_sync_cqs = 1;
  int grpc_sync_min_pollers = 1;
  int grpc_sync_max_pollers = 2;
  int grpc_sync_max_threads = 1;
  // HTTP handler threads: each keep-alive connection holds one while open (blocked on its
  // socket), so this bounds concurrent HTTP connections rather than CPU use.
  int http_threads = 1;
  // The process-wide intra-op pool (runtime/parallel.cc): cores - 1 workers that join the
  // executing thread, which always works itself.
  int intra_op_pool = 0;
};

// Sizes the front end for `cores` (values below 1 mean 1). `max_concurrent_calls` bounds the
// synchronous gRPC threads (plus a headroom for pollers and refusals); `http_threads` is taken
// as given (at least 1).
ThreadBudget ComputeThreadBudget(int cores, int max_concurrent_calls, int http_threads);

// True when `options`' instances times intra-op threads exceed the cores.
bool Oversubscribes(const SchedulerOptions& options, int cores);

// One line describing `budget` for the start-up log.
std::string DescribeThreadBudget(const ThreadBudget& budget);

// One line describing a model version's execution threads for the start-up log.
std::string DescribeModelThreads(const std::string& name, int64_t version,
                                 const SchedulerOptions& options, int cores);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_THREAD_BUDGET_H_
