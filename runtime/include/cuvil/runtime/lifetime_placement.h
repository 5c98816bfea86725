// Offsets for buffers that are live over intervals of a schedule, shared by the compiler's memory
// plan and the symbolic arena so both reuse memory the same way.
#ifndef CUVIL_RUNTIME_LIFETIME_PLACEMENT_H_
#define CUVIL_RUNTIME_LIFETIME_PLACEMENT_H_

#include <cstdint>

#include "absl/types/span.h"

namespace cuvil {

// One buffer to place: `size` units, live from step `first` through step `last`.
// Thread-compatible plain data.
struct LifetimeInterval {
  int64_t size = 0;
  int first = 0;
  int last = 0;
  int64_t offset = -1;  // Set by PlaceByLifetime.
};

// Greedy by decreasing size (ties keep their order): each interval gets the lowest offset that is
// a multiple of `align` (> 0) and does not overlap an already placed interval whose lifetime
// overlaps its own. Sets every offset and returns the region size rounded up to `align`. The
// caller bounds the sum of the aligned sizes well below INT64_MAX; offsets never exceed it.
int64_t PlaceByLifetime(absl::Span<LifetimeInterval> intervals, int64_t align);

}  // namespace cuvil

#endif  // CUVIL_RUNTIME_LIFETIME_PLACEMENT_H_
