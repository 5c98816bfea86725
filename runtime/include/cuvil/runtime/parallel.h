// Intra-op parallelism for generated code: kernels split independent work (GEMM column panels)
// across a process-wide worker pool, up to the calling thread's intra-op thread budget.
#ifndef CUVIL_RUNTIME_PARALLEL_H_
#define CUVIL_RUNTIME_PARALLEL_H_

#include <cstdint>

namespace cuvil {

// Sets how many threads (the caller included) one execution started from this thread may use.
// Thread-local; the default is 1 (no parallelism). Values below 1 mean 1.
void SetIntraOpThreads(int threads);
int IntraOpThreads();

// Work (in the caller's cost units, e.g. multiply-adds) below which a chunk is not worth a thread.
inline constexpr int64_t kMinParallelWork = int64_t{1} << 18;

}  // namespace cuvil

extern "C" {
// Runs body(ctx, begin, end) over [0, count) split into contiguous chunks, one per available
// thread but never less than about kMinParallelWork units of `cost_per_item` each (handing work
// to another thread costs microseconds); returns when every chunk has finished. Reentrant; the
// pool never makes a chunk wait for another chunk to start, so concurrent callers cannot
// deadlock (a body may wait for work other running chunks have already claimed, as Winograd's
// phases do, never for a chunk that has not started).
void cuvil_rt_parallel_for(int64_t count, int64_t cost_per_item,
                           void (*body)(void* ctx, int64_t begin, int64_t end), void* ctx);
}

#endif  // CUVIL_RUNTIME_PARALLEL_H_
