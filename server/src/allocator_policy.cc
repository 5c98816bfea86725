#include "allocator_policy.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace cuvil {

void PinAllocatorThresholds() {
#if defined(__GLIBC__)
  // Setting either threshold explicitly turns off glibc's dynamic adjustment of both.
  mallopt(M_MMAP_THRESHOLD, static_cast<int>(kMmapThresholdBytes));
  mallopt(M_TRIM_THRESHOLD, static_cast<int>(2 * kMmapThresholdBytes));
#endif
}

}  // namespace cuvil
