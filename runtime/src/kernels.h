// Private: declarations of the runtime library's C functions that generated code calls.
// Thread-safe: every function is reentrant.
#ifndef CUVIL_RUNTIME_SRC_KERNELS_H_
#define CUVIL_RUNTIME_SRC_KERNELS_H_

#include <cstdint>

extern "C" {
// 64-byte aligned scratch memory for kernels whose temporaries scale with the batch. A freed
// block may be kept by its thread and handed out again (a warm execution allocates nothing).
void* cuvil_rt_alloc(int64_t bytes);
void cuvil_rt_free(void* p);
// Bytes of freed blocks that threads keep for reuse (process-wide).
int64_t cuvil_rt_heap_cached_bytes();
// Bytes of cuvil_rt_alloc blocks not yet freed (64-byte rounded, process-wide); the most of them
// held at once since the start or the last reset, which restarts it from the bytes live then.
int64_t cuvil_rt_heap_live_bytes();
int64_t cuvil_rt_heap_peak_bytes();
void cuvil_rt_heap_reset_peak();
}

#endif  // CUVIL_RUNTIME_SRC_KERNELS_H_
