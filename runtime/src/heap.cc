// The heap helpers generated code calls (cuvil_rt_alloc / cuvil_rt_free): one definition for the
// JIT's runtime (registered by runtime_symbols.cc) and the AOT runtime (runtime/aot/).
#include <cstdlib>

#include "kernels.h"

namespace {

// Every block starts with a 64-byte header holding its size, so that free can count it and the
// caller's pointer keeps 64-byte alignment.
constexpr size_t kHeader = 64;

// Bytes of blocks allocated and not yet freed, and the most of them seen. Compiler builtins, not
// <atomic>: the AOT runtime's cross builds have no C++ library headers to lean on.
int64_t live_bytes = 0;
int64_t peak_bytes = 0;

void RaisePeak(int64_t live) {
  int64_t seen = __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED);
  while (live > seen && !__atomic_compare_exchange_n(&peak_bytes, &seen, live, /*weak=*/true,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

}  // namespace

extern "C" {

void* cuvil_rt_alloc(int64_t bytes) {
  const size_t rounded = (static_cast<size_t>(bytes > 0 ? bytes : 1) + 63) / 64 * 64;
  char* block = static_cast<char*>(std::aligned_alloc(64, rounded + kHeader));
  if (block == nullptr) return nullptr;
  *reinterpret_cast<size_t*>(block) = rounded;
  RaisePeak(__atomic_add_fetch(&live_bytes, static_cast<int64_t>(rounded), __ATOMIC_RELAXED));
  return block + kHeader;
}

void cuvil_rt_free(void* p) {
  if (p == nullptr) return;
  char* block = static_cast<char*>(p) - kHeader;
  __atomic_sub_fetch(&live_bytes, static_cast<int64_t>(*reinterpret_cast<size_t*>(block)),
                     __ATOMIC_RELAXED);
  std::free(block);
}

int64_t cuvil_rt_heap_live_bytes() { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }

int64_t cuvil_rt_heap_peak_bytes() { return __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED); }

void cuvil_rt_heap_reset_peak() {
  __atomic_store_n(&peak_bytes, cuvil_rt_heap_live_bytes(), __ATOMIC_RELAXED);
}

}  // extern "C"
