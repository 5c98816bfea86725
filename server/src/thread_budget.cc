#include "thread_budget.h"

#include <algorithm>
#include <climits>

#include "absl/strings/str_cat.h"

namespace cuvil {
namespace {

// Threads the synchronous gRPC server may add above the call limit: its pollers (at most 2 per
// completion queue) and the threads that answer refused calls.
constexpr int kSyncThreadHeadroom = 8;

}  // namespace

ThreadBudget ComputeThreadBudget(int cores, int max_concurrent_calls, int http_threads) {
  ThreadBudget b;
  b.cores = std::max(1, cores);
  const int calls = std::max(1, max_concurrent_calls);
  b.grpc_sync_max_threads =
      calls > INT_MAX - kSyncThreadHeadroom ? INT_MAX : calls + kSyncThreadHeadroom;
  b.http_threads = std::max(1, http_threads);
  b.intra_op_pool = b.cores - 1;
  b.grpc_infer_threads = b.cores;
  return b;
}

bool Oversubscribes(const SchedulerOptions& options, int cores) {
  const int64_t execution =
      int64_t{std::max(1, options.instance_count)} * std::max(1, options.intra_op_threads);
  return execution > std::max(1, cores);
}

std::string DescribeThreadBudget(const ThreadBudget& b) {
  return absl::StrCat("threads: ", b.cores, " cores; gRPC ModelInfer ", b.grpc_infer_threads,
                      " queue pollers, streams on gRPC's callback threads ",
                      "(no thread per call), other gRPC methods ", b.grpc_sync_cqs, " queue x ",
                      b.grpc_sync_min_pollers, "-", b.grpc_sync_max_pollers, " pollers (at most ",
                      b.grpc_sync_max_threads, " threads); HTTP ", b.http_threads,
                      " connection threads; intra-op pool ", b.intra_op_pool, " workers");
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
