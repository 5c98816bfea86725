#include "cuvil/runtime/prefault.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>

namespace cuvil {

void PrefaultForWrite(void* p, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  constexpr uintptr_t kPage = 4096;
  constexpr uintptr_t kStep = uintptr_t{1} << 20;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  if (bytes > UINTPTR_MAX - start) return;
  const uintptr_t begin = (start + kPage - 1) / kPage * kPage;
  const uintptr_t end = (start + bytes) / kPage * kPage;
  for (uintptr_t at = begin; at < end; at += std::min(kStep, end - at)) {
    if (madvise(reinterpret_cast<void*>(at), std::min(kStep, end - at), MADV_POPULATE_WRITE) != 0) {
      return;  // Not supported (older kernel) or out of memory: the writes fault it in instead.
    }
  }
#else
  (void)p;
  (void)bytes;
#endif
}

}  // namespace cuvil
