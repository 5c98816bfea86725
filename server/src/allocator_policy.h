// Private: process-wide allocator settings the server applies once at startup.
#ifndef CUVIL_SERVER_SRC_ALLOCATOR_POLICY_H_
#define CUVIL_SERVER_SRC_ALLOCATOR_POLICY_H_

#include <cstddef>

namespace cuvil {

// Large blocks (at least this many bytes) get their own mapping, returned to the system on free.
inline constexpr size_t kMmapThresholdBytes = size_t{128} << 10;

// Pins glibc malloc's mmap and trim thresholds so memory freed by unloaded models goes back to
// the system. Without it glibc raises the mmap threshold to the size of the largest block freed
// so far (up to 32 MiB) and the trim threshold to twice that: every scheduler worker of every
// load then takes its conv scratch buffers (MiBs) from a per-thread malloc arena, and the freed
// top of a non-main arena is never trimmed below that threshold (malloc_trim does not trim it
// either), so each load/unload cycle left ~5 MiB resident per arena.
//
// Call once from main() before threads start. Explicit GLIBC_TUNABLES settings of
// glibc.malloc.mmap_threshold / trim_threshold are overridden. A no-op on other C libraries.
void PinAllocatorThresholds();

}  // namespace cuvil

#endif  // CUVIL_SERVER_SRC_ALLOCATOR_POLICY_H_
