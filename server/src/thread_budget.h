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
  // gRPC: every method of every service runs on grpc_threads threads polling one completion
  // queue (one per core: they read, decode and answer calls, and execute small models inline);
  // calls that block (loads, unloads, patches, snapshots) move to grpc_blocking_threads, which
  // sleep otherwise. Never a thread per call.
  int grpc_threads = 1;
  int grpc_blocking_threads = 4;
  // HTTP handler threads: each keep-alive connection holds one while open (blocked on its
  // socket), so this bounds concurrent HTTP connections rather than CPU use.
  int http_threads = 1;
  // The process-wide intra-op pool (runtime/parallel.cc): cores - 1 workers that join the
  // executing thread, which always works itself.
  int intra_op_pool = 0;
};

// Sizes the front end for `cores` (values below 1 mean 1); `http_threads` is taken as given (at
// least 1).
ThreadBudget ComputeThreadBudget(int cores, int http_threads);

// True when `options`' instances times intra-op threads exceed the cores.
bool Oversubscribes(const SchedulerOptions& options, int cores);

// One line describing `budget` for the start-up log.
std::string DescribeThreadBudget(const ThreadBudget& budget);

// One line describing a model version's execution threads for the start-up log.
std::string DescribeModelThreads(const std::string& name, int64_t version,
                                 const SchedulerOptions& options, int cores);

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_THREAD_BUDGET_H_
