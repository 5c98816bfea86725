// Faulting fresh memory in ahead of a write, in bounded steps.
#ifndef CUVIL_RUNTIME_PREFAULT_H_
#define CUVIL_RUNTIME_PREFAULT_H_

#include <cstddef>

namespace cuvil {

// Asks the kernel to back the whole pages inside [p, p + bytes) for writing (MADV_POPULATE_WRITE):
// one call per step instead of one trap per 4 KiB page. A hint: nothing happens where the kernel
// lacks it, and the memory is unchanged either way. The range goes in 1 MiB steps because the
// call holds the process's memory-map lock: one step keeps another thread's mmap (an allocation)
// waiting well under a millisecond, where one call over 46 MB stalled it for the whole fill.
// Thread-safe.
void PrefaultForWrite(void* p, size_t bytes);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_PREFAULT_H_
