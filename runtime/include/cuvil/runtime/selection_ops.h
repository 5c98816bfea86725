// Kernels whose output size depends on the data, called by generated code: Unique and
// NonMaxSuppression. Each returns the size it chose (the value of the model's data-dependent
// symbol) and writes only that many results, at most its stated upper bound. Thread-safe: every
// function is reentrant and allocates its own temporaries.
#ifndef CUVIL_RUNTIME_SELECTION_OPS_H_
#define CUVIL_RUNTIME_SELECTION_OPS_H_

#include <cstdint>

extern "C" {

// ONNX Unique along an axis. `x` (of DType `dtype`: any integer, bool, float32 or float64) is
// viewed as [outer, n, inner] and slice j is x[:, j, :] (without an axis: [1, numel, 1]). Writes
// the u distinct slices to `y` ([outer, u, inner]) in order of first occurrence, or ascending when
// `sorted` (compared element by element in row-major order; NaN after every number, NaNs equal).
// `first[k]` gets the index of distinct slice k's first occurrence, `inverse[j]` the position of
// slice j in y, `counts[k]` how often slice k occurs; y and each of the three may be null.
// Returns u (<= n), or -1 for an unsupported dtype (nothing written).
int64_t cuvil_rt_unique(const void* x, int32_t dtype, int64_t outer, int64_t n, int64_t inner,
                        int32_t sorted, void* y, int64_t* first, int64_t* inverse, int64_t* counts);

// ONNX NonMaxSuppression. boxes [batches, count, 4] (corners y1, x1, y2, x2 in any order, or
// centre x, centre y, width, height when `center_point_box`), scores [batches, classes, count].
// For each batch and class, the boxes scoring above `score_threshold` (when
// `has_score_threshold`) are taken by descending score (ties: lower index first), and one is
// dropped when its intersection over union with a box already taken exceeds `iou_threshold`; at
// most `max_per_class` are taken (none when <= 0). Writes [batch, class, box] triples to
// `selected` (batch-major, then class, then order taken) and returns how many: at most
// batches * classes * min(count, max_per_class).
int64_t cuvil_rt_nms(const float* boxes, const float* scores, int64_t batches, int64_t classes,
                     int64_t count, int64_t max_per_class, float iou_threshold,
                     float score_threshold, int32_t has_score_threshold, int32_t center_point_box,
                     int64_t* selected);
}

#endif  // CUVIL_RUNTIME_SELECTION_OPS_H_
