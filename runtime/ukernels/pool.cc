// Max pooling over NCHW planes: per output row, the rows of its window are reduced into one row
// and that row's window maxima at every start column into another (both whole-row passes of the
// tier's max_row), then each output picks its column. Taps outside the input are skipped instead
// of compared with a padding value.
#include <algorithm>
#include <cstdlib>
#include <limits>

#include "call_scratch.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "scratch_sizes.h"
#include "thread_buffer.h"
#include "ukernel_table.h"

namespace cuvil::uk {
namespace {

// ONNX Max: NaN in either operand gives NaN.
inline float MaxNan(float m, float v) { return (v > m || v != v) ? v : m; }

// First tap t >= 0 with 0 <= start + t * step, and one past the last with start + t * step < n
// (both clamped to [0, taps]).
void TapRange(int64_t start, int64_t step, int64_t taps, int64_t n, int64_t* t0, int64_t* t1) {
  int64_t lo = start >= 0 ? 0 : (-start + step - 1) / step;
  int64_t hi = start >= n ? 0 : (n - 1 - start) / step + 1;
  *t0 = std::min(lo, taps);
  *t1 = std::clamp(hi, *t0, taps);
}

// The common 2x2, stride-2, unpadded window (LeNet, VGG): one fused pass per output row over the
// two input rows, then the pairwise pick. `row` holds 2 * OW floats.
void Pool2x2Plane(const Table& tb, const cuvil_uk_pool_params& p, const float* x, float* y,
                  float* row) {
  const int64_t n = 2 * p.out_width;
  for (int64_t oy = 0; oy < p.out_height; ++oy) {
    const float* r0 = x + 2 * oy * p.width;
    const float* r1 = r0 + p.width;
    tb.max_row(row, r0, r1, n);
    float* out = y + oy * p.out_width;
    for (int64_t ox = 0; ox < p.out_width; ++ox) out[ox] = MaxNan(row[2 * ox], row[2 * ox + 1]);
  }
}

bool Is2x2Stride2(const cuvil_uk_pool_params& p) {
  return p.kernel_h == 2 && p.kernel_w == 2 && p.stride_h == 2 && p.stride_w == 2 &&
         p.dilation_h == 1 && p.dilation_w == 1 && p.pad_top == 0 && p.pad_left == 0 &&
         2 * p.out_height <= p.height && 2 * p.out_width <= p.width;
}

// `row` and `wide` hold W floats each.
void PoolPlane(const Table& tb, const cuvil_uk_pool_params& p, const float* x, float* y, float* row,
               float* wide) {
  if (Is2x2Stride2(p)) return Pool2x2Plane(tb, p, x, y, row);
  const float lowest = -std::numeric_limits<float>::infinity();
  // Output columns whose every tap lies inside the row: no range check per tap.
  int64_t ox0 = 0, ox1 = 0;
  {
    // ox * SW - PL >= 0 and ox * SW - PL + (KW - 1) * DW < W.
    const int64_t span = (p.kernel_w - 1) * p.dilation_w;
    ox0 = std::min(p.out_width, (p.pad_left + p.stride_w - 1) / p.stride_w);
    const int64_t last = p.width - 1 - span + p.pad_left;  // largest ox * SW allowed
    ox1 = last < 0 ? 0 : std::min(p.out_width, last / p.stride_w + 1);
    ox1 = std::max(ox1, ox0);
  }
  for (int64_t oy = 0; oy < p.out_height; ++oy) {
    float* out = y + oy * p.out_width;
    const int64_t iy0 = oy * p.stride_h - p.pad_top;
    int64_t t0, t1;
    TapRange(iy0, p.dilation_h, p.kernel_h, p.height, &t0, &t1);
    if (t0 == t1) {
      std::fill(out, out + p.out_width, lowest);
      continue;
    }
    // One tap: the input row itself; more: their max, starting from the first two.
    const float* r = x + (iy0 + t0 * p.dilation_h) * p.width;
    if (t1 - t0 > 1) {
      tb.max_row(row, r, r + p.dilation_h * p.width, p.width);
      for (int64_t t = t0 + 2; t < t1; ++t) {
        tb.max_row(row, row, x + (iy0 + t * p.dilation_h) * p.width, p.width);
      }
      r = row;
    }
    auto edge = [&](int64_t ox) {
      const int64_t ix0 = ox * p.stride_w - p.pad_left;
      int64_t k0, k1;
      TapRange(ix0, p.dilation_w, p.kernel_w, p.width, &k0, &k1);
      float m = lowest;
      for (int64_t k = k0; k < k1; ++k) m = MaxNan(m, r[ix0 + k * p.dilation_w]);
      out[ox] = m;
    };
    for (int64_t ox = 0; ox < ox0; ++ox) edge(ox);
    if (ox0 < ox1) {
      // Window maxima at every start column the interior reads (contiguous, so they vectorise),
      // then the strided pick.
      const int64_t c0 = ox0 * p.stride_w - p.pad_left, c1 = (ox1 - 1) * p.stride_w - p.pad_left;
      const int64_t n = c1 + 1 - c0;
      const float* picks = r;
      if (p.kernel_w > 1) {
        tb.max_row(wide + c0, r + c0, r + c0 + p.dilation_w, n);
        for (int64_t k = 2; k < p.kernel_w; ++k) {
          tb.max_row(wide + c0, wide + c0, r + c0 + k * p.dilation_w, n);
        }
        picks = wide;
      }
      for (int64_t ox = ox0; ox < ox1; ++ox) out[ox] = picks[ox * p.stride_w - p.pad_left];
    }
    for (int64_t ox = ox1; ox < p.out_width; ++ox) edge(ox);
  }
}

}  // namespace

int64_t MaxPool2dScratchBytes(const cuvil_uk_pool_params& p) {
  ScratchTally s;
  s.AddFloats(2 * p.width);
  return s.bytes();
}

namespace {

struct PoolJob {
  const cuvil_uk_pool_params* p;
  const float* x;
  float* y;
};

void PoolPlanes(void* ctx, int64_t begin, int64_t end) {
  const PoolJob& job = *static_cast<const PoolJob*>(ctx);
  const cuvil_uk_pool_params& p = *job.p;
  const Table& tb = ActiveTable();
  thread_local ThreadBuffer buffer;  // kept between calls: a warm pool allocates nothing
  float* rows = buffer.Get(2 * static_cast<size_t>(p.width));
  for (int64_t i = begin; i < end; ++i) {
    PoolPlane(tb, p, job.x + i * p.height * p.width, job.y + i * p.out_height * p.out_width, rows,
              rows + p.width);
  }
}

}  // namespace
}  // namespace cuvil::uk

extern "C" void cuvil_uk_maxpool2d(const cuvil_uk_pool_params* p, const float* x, float* y,
                                   int64_t planes) {
  if (planes <= 0 || p->out_height <= 0 || p->out_width <= 0) return;
  cuvil::uk::MicrokernelScratchScope scratch;
  cuvil::uk::PoolJob job{p, x, y};
  // Cost per plane in the runtime's units (about one multiply-add per compare).
  const int64_t cost = p->out_height * p->out_width * p->kernel_h * p->kernel_w;
  cuvil_rt_parallel_for(planes, cost, cuvil::uk::PoolPlanes, &job);
}
