// The AOT runtime's heap helpers for generated code (the same contract as runtime_symbols.cc's).
#include <stdlib.h>

#include "../src/kernels.h"

extern "C" {

void* cuvil_rt_alloc(int64_t bytes) {
  size_t rounded = (static_cast<size_t>(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
  return aligned_alloc(64, rounded);
}

void cuvil_rt_free(void* p) { free(p); }

}  // extern "C"
