// The AOT runtime's intra-op parallelism: none. An ahead-of-time library runs each call on the
// calling thread alone (no thread pool, no threads of its own); callers parallelise across calls.
#include <algorithm>

#include "cuvil/runtime/parallel.h"

namespace cuvil {

void SetIntraOpThreads(int) {}

int IntraOpThreads() { return 1; }

}  // namespace cuvil

extern "C" void cuvil_rt_parallel_for(int64_t count, int64_t,
                                      void (*body)(void* ctx, int64_t begin, int64_t end),
                                      void* ctx) {
  if (count > 0) body(ctx, 0, count);
}
