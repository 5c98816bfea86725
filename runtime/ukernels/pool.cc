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

// An odd window at stride 1, undilated, padded to keep the size (GoogLeNet's branch pools, 3x3
// pad 1): the plane is one array. V = the max over the window's rows (one pass of max_row per
// row offset over all interior rows at once), then out = the max over the window's columns of V
// along the flat array; the columns within KW/2 of a row's edge, where that flat window wraps
// into the neighbouring row, are redone alone. Per-row passes cost more than the maxima on
// 14x14 and 7x7 planes (3-6 ns per output).
bool IsSameSizeStride1(const cuvil_uk_pool_params& p) {
  return p.stride_h == 1 && p.stride_w == 1 && p.dilation_h == 1 && p.dilation_w == 1 &&
         p.kernel_h % 2 == 1 && p.kernel_w % 2 == 1 && p.pad_top == p.kernel_h / 2 &&
         p.pad_left == p.kernel_w / 2 && p.out_height == p.height && p.out_width == p.width;
}

// `v` holds H * W floats.
void SameSizePlane(const Table& tb, const cuvil_uk_pool_params& p, const float* x, float* y,
                   float* v) {
  const int64_t h = p.height, w = p.width, ph = p.kernel_h / 2, pw = p.kernel_w / 2;
  // Rows whose every window row is inside the plane, in one pass per row offset.
  const int64_t y0 = std::min(ph, h), y1 = std::max(y0, h - ph);
  const float* rows = x;
  if (ph > 0) {
    if (y1 > y0) {
      const int64_t n = (y1 - y0) * w;
      float* dst = v + y0 * w;
      const float* src = x + (y0 - ph) * w;
      tb.max_row(dst, src, src + w, n);
      for (int64_t d = 2; d <= 2 * ph; ++d) tb.max_row(dst, dst, src + d * w, n);
    }
    for (int64_t r = 0; r < h; ++r) {
      if (r >= y0 && r < y1) continue;
      const int64_t lo = std::max<int64_t>(r - ph, 0), hi = std::min(r + ph, h - 1);
      float* dst = v + r * w;
      if (lo == hi) {
        std::copy(x + lo * w, x + lo * w + w, dst);
        continue;
      }
      tb.max_row(dst, x + lo * w, x + (lo + 1) * w, w);
      for (int64_t t = lo + 2; t <= hi; ++t) tb.max_row(dst, dst, x + t * w, w);
    }
    rows = v;
  }
  if (pw == 0) {
    if (rows != y) std::copy(rows, rows + h * w, y);
    return;
  }
  const int64_t n = h * w - 2 * pw;
  if (n > 0) {
    tb.max_row(y + pw, rows, rows + 1, n);
    for (int64_t d = 2; d <= 2 * pw; ++d) tb.max_row(y + pw, y + pw, rows + d, n);
  }
  for (int64_t r = 0; r < h; ++r) {
    const float* in = rows + r * w;
    float* out = y + r * w;
    for (int64_t c = 0; c < w; ++c) {
      if (c == pw && w - pw > pw) c = w - pw;  // the middle columns are right already
      const int64_t lo = std::max<int64_t>(c - pw, 0), hi = std::min(c + pw, w - 1);
      float m = in[lo];
      for (int64_t t = lo + 1; t <= hi; ++t) m = MaxNan(m, in[t]);
      out[c] = m;
    }
  }
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
      if (p.stride_w == 2 && p.dilation_w == 1) {
        // Stride 2 (3x3/2 pools): the window maxima of the picked columns only, in one pass.
        // Maxima at every start column and then a scalar pick made SqueezeNet's three pools
        // 0.59 ms of a 5.3 ms run (b1, one Zen 5 thread); this takes 0.40.
        tb.max_stride2_row(out + ox0, r + c0, ox1 - ox0, p.kernel_w);
        for (int64_t ox = ox1; ox < p.out_width; ++ox) edge(ox);
        continue;
      }
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
  s.AddFloats(IsSameSizeStride1(p) ? p.height * p.width : 2 * p.width);
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
  if (IsSameSizeStride1(p)) {
    float* v = buffer.Get(static_cast<size_t>(p.height * p.width));
    const int64_t plane = p.height * p.width;
    for (int64_t i = begin; i < end; ++i)
      SameSizePlane(tb, p, job.x + i * plane, job.y + i * plane, v);
    return;
  }
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
