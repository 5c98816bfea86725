// Memory kernels use outside the planned arena: the microkernels' per-thread buffers and the
// heap blocks generated code allocates during an execution.
#ifndef CUVIL_RUNTIME_SCRATCH_USAGE_H_
#define CUVIL_RUNTIME_SCRATCH_USAGE_H_

#include <cstdint>

namespace cuvil {

// Process-wide figures, in bytes.
struct ScratchUsage {
  int64_t thread_buffer_bytes = 0;  // Held by every thread's microkernel buffers now.
  int64_t heap_live_bytes = 0;      // Generated code's heap blocks not yet freed.
  int64_t heap_peak_bytes = 0;      // Most heap block bytes live at once since the last reset.
  int64_t heap_cached_bytes = 0;    // Freed heap blocks threads keep to hand out again.
};

// The figures now. Thread-safe (each field is read atomically; together they are a snapshot
// only while nothing executes).
ScratchUsage ReadScratchUsage();

// Restarts heap_peak_bytes from the bytes live now, e.g. before the executions to measure.
// Thread-safe.
void ResetHeapPeak();

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_SCRATCH_USAGE_H_
