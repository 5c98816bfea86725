// Private: declarations of the runtime library's C functions that generated code calls.
// Thread-safe: every function is reentrant.
#ifndef CUVIL_RUNTIME_SRC_KERNELS_H_
#define CUVIL_RUNTIME_SRC_KERNELS_H_

#include <cstdint>

extern "C" {
// 64-byte aligned scratch memory for kernels whose temporaries scale with the batch.
void* cuvil_rt_alloc(int64_t bytes);
void cuvil_rt_free(void* p);
}

#endif  // CUVIL_RUNTIME_SRC_KERNELS_H_
