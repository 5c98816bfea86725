#include "cuvil/runtime/scratch_usage.h"

#include "../ukernels/thread_buffer.h"
#include "kernels.h"

namespace cuvil {

ScratchUsage ReadScratchUsage() {
  ScratchUsage u;
  u.thread_buffer_bytes = uk::ThreadBufferBytes();
  u.heap_live_bytes = cuvil_rt_heap_live_bytes();
  u.heap_peak_bytes = cuvil_rt_heap_peak_bytes();
  u.heap_cached_bytes = cuvil_rt_heap_cached_bytes();
  return u;
}

void ResetHeapPeak() { cuvil_rt_heap_reset_peak(); }

}  // namespace cuvil
