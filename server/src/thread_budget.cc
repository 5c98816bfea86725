#include "thread_budget.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cuvil {
ThreadBudget ComputeThreadBudget(int cores, int http_threads) {
  ThreadBudget b;
  b.cores = std::max(1, cores);
  b.http_threads = std::max(1, http_threads);
  b.intra_op_pool = b.cores - 1;
  b.grpc_threads = b.cores;
  return b;
}

bool Oversubscribes(const SchedulerOptions& options, int cores) {
  const int64_t execution =
      int64_t{std::max(1, options.instance_count)} * std::max(1, options.intra_op_threads);
  return execution > std::max(1, cores);
}

std::string DescribeThreadBudget(const ThreadBudget& b) {
  return absl::StrCat("threads: ", b.cores, " cores; gRPC ", b.grpc_threads,
                      " completion-queue threads run every method (no thread per call), ",
                      b.grpc_blocking_threads, " more for calls that block (load, unload, patch, ",
                      "snapshot); HTTP ", b.http_threads, " connection threads; intra-op pool ",
                      b.intra_op_pool, " workers");
}

std::string DescribeModelThreads(const std::string& name, int64_t version,
                                 const SchedulerOptions& options, int cores) {
  return absl::StrCat("threads: model ", name, " version ", version, ": ", options.instance_count,
                      " instance worker(s) x ", options.intra_op_threads, " intra-op thread(s)",
                      Oversubscribes(options, cores)
                          ? absl::StrCat(" (above the ", cores,
                                         " cores: the config's instance_group or "
                                         "intra_op_threads asks for it)")
                          : "");
}

}  // namespace cuvil
