#include "cuvil/runtime/selection_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "cuvil/runtime/dtype.h"
#include "numeric_dtype.h"

namespace cuvil {
namespace {

// A strict weak order on values of T that puts NaN after every number and treats NaNs as equal
// (numpy's sort order).
template <typename T>
bool ValueLess(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

template <typename T>
int64_t Unique(const T* x, int64_t outer, int64_t n, int64_t inner, bool sorted, T* y,
               int64_t* first, int64_t* inverse, int64_t* counts) {
  // -1, 0, 1: slice a against slice b, element by element in row-major order.
  auto compare = [&](int64_t a, int64_t b) {
    for (int64_t o = 0; o < outer; ++o) {
      const T* pa = x + (o * n + a) * inner;
      const T* pb = x + (o * n + b) * inner;
      for (int64_t i = 0; i < inner; ++i) {
        if (ValueLess(pa[i], pb[i])) return -1;
        if (ValueLess(pb[i], pa[i])) return 1;
      }
    }
    return 0;
  };
  // Slices ordered by value, ties by index: each run of equal slices starts at its first
  // occurrence.
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return compare(a, b) < 0; });
  struct Group {
    int64_t first = 0;  // Index of the first occurrence.
    int64_t count = 0;
  };
  std::vector<Group> groups;
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  for (size_t r = 0; r < order.size(); ++r) {
    if (r == 0 || compare(order[r - 1], order[r]) != 0) groups.push_back({order[r], 0});
    ++groups.back().count;
    group_of[static_cast<size_t>(order[r])] = static_cast<int64_t>(groups.size() - 1);
  }
  // Output position of each group: value order when sorted, else first-occurrence order.
  std::vector<int64_t> position(groups.size());
  std::iota(position.begin(), position.end(), 0);
  if (!sorted) {
    std::vector<int64_t> by_first(groups.size());
    std::iota(by_first.begin(), by_first.end(), 0);
    std::sort(by_first.begin(), by_first.end(),
              [&](int64_t a, int64_t b) { return groups[a].first < groups[b].first; });
    for (size_t p = 0; p < by_first.size(); ++p) position[by_first[p]] = static_cast<int64_t>(p);
  }
  const auto u = static_cast<int64_t>(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t p = position[g];
    for (int64_t o = 0; y != nullptr && o < outer; ++o) {
      std::memcpy(y + (o * u + p) * inner, x + (o * n + groups[g].first) * inner,
                  static_cast<size_t>(inner) * sizeof(T));
    }
    if (first != nullptr) first[p] = groups[g].first;
    if (counts != nullptr) counts[p] = groups[g].count;
  }
  if (inverse != nullptr) {
    for (int64_t j = 0; j < n; ++j) inverse[j] = position[group_of[static_cast<size_t>(j)]];
  }
  return u;
}

struct Box {
  float ymin, xmin, ymax, xmax;
};

Box ReadBox(const float* b, bool center) {
  if (center) {
    const float half_w = b[2] / 2, half_h = b[3] / 2;
    return {b[1] - half_h, b[0] - half_w, b[1] + half_h, b[0] + half_w};
  }
  return {std::min(b[0], b[2]), std::min(b[1], b[3]), std::max(b[0], b[2]), std::max(b[1], b[3])};
}

// True when the boxes overlap by more than `threshold` (intersection over union); boxes without
// area never suppress each other.
bool Suppresses(const Box& a, const Box& b, float threshold) {
  const float area_a = (a.ymax - a.ymin) * (a.xmax - a.xmin);
  const float area_b = (b.ymax - b.ymin) * (b.xmax - b.xmin);
  if (area_a <= 0 || area_b <= 0) return false;
  const float h = std::min(a.ymax, b.ymax) - std::max(a.ymin, b.ymin);
  const float w = std::min(a.xmax, b.xmax) - std::max(a.xmin, b.xmin);
  if (h <= 0 || w <= 0) return false;
  const float intersection = h * w;
  const float union_area = area_a + area_b - intersection;
  if (union_area <= 0) return false;
  return intersection / union_area > threshold;
}

}  // namespace
}  // namespace cuvil

extern "C" int64_t cuvil_rt_unique(const void* x, int32_t dtype, int64_t outer, int64_t n,
                                   int64_t inner, int32_t sorted, void* y, int64_t* first,
                                   int64_t* inverse, int64_t* counts) {
  const bool s = sorted != 0;
  return cuvil::VisitNumericDType(static_cast<cuvil::DType>(dtype), int64_t{-1}, [&](auto tag) {
    using T = decltype(tag);
    return cuvil::Unique(static_cast<const T*>(x), outer, n, inner, s, static_cast<T*>(y), first,
                         inverse, counts);
  });
}

extern "C" int64_t cuvil_rt_nms(const float* boxes, const float* scores, int64_t batches,
                                int64_t classes, int64_t count, int64_t max_per_class,
                                float iou_threshold, float score_threshold,
                                int32_t has_score_threshold, int32_t center_point_box,
                                int64_t* selected) {
  if (max_per_class <= 0) return 0;
  int64_t written = 0;
  std::vector<int64_t> candidates;
  std::vector<int64_t> taken;
  for (int64_t b = 0; b < batches; ++b) {
    const float* batch_boxes = boxes + b * count * 4;
    for (int64_t c = 0; c < classes; ++c) {
      const float* s = scores + (b * classes + c) * count;
      candidates.clear();
      for (int64_t i = 0; i < count; ++i) {
        if (has_score_threshold == 0 || s[i] > score_threshold) candidates.push_back(i);
      }
      // NaN scores rank last, so the order stays a strict weak one.
      auto rank = [&](int64_t i) { return std::isnan(s[i]) ? -INFINITY : s[i]; };
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](int64_t a, int64_t z) { return rank(a) > rank(z); });
      taken.clear();
      for (int64_t i : candidates) {
        if (static_cast<int64_t>(taken.size()) >= max_per_class) break;
        const cuvil::Box box = cuvil::ReadBox(batch_boxes + i * 4, center_point_box != 0);
        bool keep = true;
        for (int64_t t : taken) {
          if (cuvil::Suppresses(cuvil::ReadBox(batch_boxes + t * 4, center_point_box != 0), box,
                                iou_threshold)) {
            keep = false;
            break;
          }
        }
        if (!keep) continue;
        taken.push_back(i);
        selected[written * 3] = b;
        selected[written * 3 + 1] = c;
        selected[written * 3 + 2] = i;
        ++written;
      }
    }
  }
  return written;
}
