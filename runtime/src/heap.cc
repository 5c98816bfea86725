// The heap helpers generated code calls (cuvil_rt_alloc / cuvil_rt_free): one definition for the
// JIT's runtime (registered by runtime_symbols.cc) and the AOT runtime (runtime/aot/).
#include <cstdlib>

#include "kernels.h"

extern "C" {

void* cuvil_rt_alloc(int64_t bytes) {
  size_t rounded = (static_cast<size_t>(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
  return std::aligned_alloc(64, rounded);
}

void cuvil_rt_free(void* p) { std::free(p); }

}  // extern "C"
