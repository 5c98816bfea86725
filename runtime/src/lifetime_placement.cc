#include "cuvil/runtime/lifetime_placement.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace cuvil {

int64_t PlaceByLifetime(absl::Span<LifetimeInterval> intervals, int64_t align) {
  auto align_up = [align](int64_t v) { return (v + align - 1) / align * align; };
  std::vector<LifetimeInterval*> order;
  order.reserve(intervals.size());
  for (LifetimeInterval& it : intervals) order.push_back(&it);
  std::stable_sort(
      order.begin(), order.end(),
      [](const LifetimeInterval* a, const LifetimeInterval* b) { return a->size > b->size; });
  std::vector<const LifetimeInterval*> placed;
  placed.reserve(order.size());
  std::vector<std::pair<int64_t, int64_t>> busy;
  int64_t total = 0;
  for (LifetimeInterval* cur : order) {
    busy.clear();
    for (const LifetimeInterval* p : placed) {
      if (p->last < cur->first || cur->last < p->first) continue;
      busy.push_back({p->offset, p->offset + p->size});
    }
    std::sort(busy.begin(), busy.end());
    int64_t offset = 0;
    for (const auto& [lo, hi] : busy) {
      if (offset + cur->size <= lo) break;
      offset = std::max(offset, align_up(hi));
    }
    cur->offset = offset;
    total = std::max(total, offset + cur->size);
    placed.push_back(cur);
  }
  return align_up(total);
}

}  // namespace cuvil
