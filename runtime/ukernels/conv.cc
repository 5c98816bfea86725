// Convolution driver over the microkernels.
//
// Every conv is a GEMM per (image, group): Y[m][q] = sum_r W[m][r] * B[r][q], r over (input
// channel, tap). B is never materialised (no im2col): the input is copied once, zero padded and
// split into stride phases, so that for every r the 16 columns of a tile are 16 contiguous floats
// at a per-r offset (B[r][q] = src[off[r] + q]). Output rows are laid out with the phase-plane
// width Ws >= OW; the columns past OW are computed and dropped when the tile is copied out through
// the epilogue. 1x1 stride-1 unpadded convs read X itself and store straight into Y.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "call_scratch.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "parallel_tasks.h"
#include "scratch_sizes.h"
#include "thread_buffer.h"
#include "ukernel_table.h"
#include "winograd.h"

namespace cuvil::uk {
namespace {

enum Slot {
  kSlotPhases,
  kSlotTile,
  kSlotPlane,
  kSlotQuantIn,
  kSlotQuantOut,
  kSlotTrimmedWeights,
  kSlotTapTile,
  kNumSlots
};

float* ThreadScratch(Slot slot, size_t floats) {
  thread_local ThreadBuffer buffers[kNumSlots];
  return buffers[slot].Get(floats);
}

// Per-thread tap offsets: of a GEMM conv (read by every thread of its parallel region) and of one
// thread's depthwise planes. Kept between calls, so a conv allocates nothing once warm.
enum IndexSlot { kIndexGemmTaps, kIndexPlaneTaps, kNumIndexSlots };

int64_t* ThreadIndices(IndexSlot slot, size_t count) {
  thread_local ThreadBuffer buffers[kNumIndexSlots];
  return buffers[slot].GetIndices(count);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Whether some kernel row lands on phase row py (PhaseColUsed: some kernel column on phase
// column px).
bool PhaseRowUsed(const cuvil_uk_conv_params& p, int64_t py) {
  for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
    if (ky * p.dilation_h % p.stride_h == py) return true;
  }
  return false;
}
bool PhaseColUsed(const cuvil_uk_conv_params& p, int64_t px) {
  for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
    if (kx * p.dilation_w % p.stride_w == px) return true;
  }
  return false;
}

// The index of phase (py, px)'s plane within a channel, or -1 when no tap reads it: the planes
// some tap reads are stored in row-major phase order (computed, not stored, so that planning a
// conv allocates nothing).
int64_t PhaseSlot(const cuvil_uk_conv_params& p, int64_t py, int64_t px) {
  if (!PhaseRowUsed(p, py) || !PhaseColUsed(p, px)) return -1;
  int64_t rows_before = 0, cols_before = 0, cols = 0;
  for (int64_t r = 0; r < py; ++r) rows_before += PhaseRowUsed(p, r) ? 1 : 0;
  for (int64_t c = 0; c < p.stride_w; ++c) {
    const int64_t used = PhaseColUsed(p, c) ? 1 : 0;
    cols += used;
    if (c < px) cols_before += used;
  }
  return rows_before * cols + cols_before;
}

// Stride-phase planes of one channel: plane (py, px) row i column j holds the zero-padded input
// at padded coordinates (i * SH + py, j * SW + px).
// Only the planes some tap reads are stored (a 1x1 stride-2 conv keeps one of four).
//
// When the planes would be much wider than the output (pads and dilation large against the map:
// DeepLab's ASPP pads a 14x14 map by 12 on each side), most computed columns would be dropped;
// such a conv instead stores B itself (im2col): one row of OH*OW floats per reduction row, so
// every computed column is an output.
struct Phases {
  int64_t hs, ws;   // rows and columns of one phase plane (im2col: OH and OW)
  int64_t channel;  // floats per channel (every stored phase plane, or KH*KW rows of ldb)
  int64_t slack;    // zero floats after the last channel (reads past the last valid column)
  bool direct;      // 1x1, stride 1, no padding: read X itself
  bool im2col;      // B stored row by row (ldb floats apart)
  int64_t ldb;
};

// im2col or phase planes: whichever costs less in multiply-adds, counting the GEMM's tiles (a
// 7x7 map padded to 9x9 is one 64-column tile either way) and the fill: a float written costs
// about kFillFloatCost, a row copy call about kFillCallCost (im2col copies KH*KW short rows per
// input row: LeNet's 5x5 conv over an 8x8 output made 1200 calls of 8 floats per image, 8.6 us
// against 1 us of multiplies). Inception-v3's 1x7 convs (17 columns padded to 23: 7 tiles
// against 5) took 1.19x the time of its 7x1 convs as im2col, 1.34x as phase planes. B stays
// under kMaxIm2colFloats per image.
constexpr int64_t kFillFloatCost = 4;
constexpr int64_t kFillCallCost = 600;
constexpr int64_t kMaxIm2colFloats = int64_t{16} << 20;

// `gemm`: for ConvGemm, which may take im2col (the depthwise planes never do).
Phases PlanPhases(const cuvil_uk_conv_params& p, int64_t nr, bool gemm) {
  Phases ph;
  ph.im2col = false;
  ph.ldb = 0;
  ph.direct = p.kernel_h == 1 && p.kernel_w == 1 && p.stride_h == 1 && p.stride_w == 1 &&
              p.pad_top == 0 && p.pad_left == 0 && p.out_height == p.height &&
              p.out_width == p.width;
  if (ph.direct) {
    ph.hs = p.height;
    ph.ws = p.width;
    ph.channel = p.height * p.width;
    ph.slack = 0;
    return ph;
  }
  int64_t hpad = (p.out_height - 1) * p.stride_h + (p.kernel_h - 1) * p.dilation_h + 1;
  int64_t wpad = (p.out_width - 1) * p.stride_w + (p.kernel_w - 1) * p.dilation_w + 1;
  ph.hs = CeilDiv(hpad, p.stride_h);
  ph.ws = CeilDiv(wpad, p.stride_w);
  int64_t rows = 0, cols = 0;
  for (int64_t py = 0; py < p.stride_h; ++py) rows += PhaseRowUsed(p, py) ? 1 : 0;
  for (int64_t px = 0; px < p.stride_w; ++px) cols += PhaseColUsed(p, px) ? 1 : 0;
  ph.channel = rows * cols * ph.hs * ph.ws;
  ph.slack = ph.ws + 2 * nr;
  const int64_t pixels = p.out_height * p.out_width;
  const int64_t ldb = CeilDiv(pixels, 16) * 16;  // rows 64-byte aligned
  const int64_t taps = p.kernel_h * p.kernel_w;
  // Multiply-adds per GEMM column: every reduction row times every output channel.
  const int64_t column = p.channels / p.groups * taps * p.out_channels;
  const int64_t phase_cost =
      CeilDiv(p.out_height * ph.ws, nr) * nr * column +
      p.channels * (ph.channel * kFillFloatCost + rows * cols * ph.hs * kFillCallCost);
  const int64_t im2col_cost =
      CeilDiv(pixels, nr) * nr * column +
      p.channels * taps * (ldb * kFillFloatCost + p.out_height * kFillCallCost);
  if (gemm && im2col_cost < phase_cost && p.channels * taps * ldb <= kMaxIm2colFloats) {
    ph.im2col = true;
    ph.ldb = ldb;
    ph.hs = p.out_height;
    ph.ws = p.out_width;
    ph.channel = p.kernel_h * p.kernel_w * ldb;
    ph.slack = 2 * nr;
  }
  return ph;
}

// Floor of a / b for b > 0 (a may be negative).
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// Fills the KH*KW im2col rows of one input channel `x` ([H][W]) into `dst`: row (ky, kx) column
// oy * OW + ox holds the zero-padded input at (oy * SH - PT + ky * DH, ox * SW - PL + kx * DW).
void FillIm2col(const Table& t, const cuvil_uk_conv_params& p, const Phases& ph, const float* x,
                float* dst) {
  const int64_t pixels = p.out_height * p.out_width;
  for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
    for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
      float* row = dst + (ky * p.kernel_w + kx) * ph.ldb;
      // Output columns ox whose input column ox * SW - PL + kx * DW lies in [0, W).
      const int64_t shift = kx * p.dilation_w - p.pad_left;
      const int64_t j0 =
          std::clamp<int64_t>(FloorDiv(-shift + p.stride_w - 1, p.stride_w), 0, p.out_width);
      const int64_t j1 = std::clamp<int64_t>(FloorDiv(p.width - shift + p.stride_w - 1, p.stride_w),
                                             j0, p.out_width);
      for (int64_t oy = 0; oy < p.out_height; ++oy) {
        const int64_t iy = oy * p.stride_h - p.pad_top + ky * p.dilation_h;
        float* out = row + oy * p.out_width;
        if (iy < 0 || iy >= p.height || j0 >= j1) {
          t.pad_row(out, p.out_width, x, 0, 0, 1);
        } else {
          t.pad_row(out, p.out_width, x + iy * p.width + j0 * p.stride_w + shift, j0, j1,
                    p.stride_w);
        }
      }
      std::memset(row + pixels, 0, static_cast<size_t>(ph.ldb - pixels) * sizeof(float));
    }
  }
}

// Fills the phase planes of one input channel `x` ([H][W]) into `dst`.
void FillPhases(const Table& t, const cuvil_uk_conv_params& p, const Phases& ph, const float* x,
                float* dst) {
  for (int64_t py = 0; py < p.stride_h; ++py) {
    for (int64_t px = 0; px < p.stride_w; ++px) {
      const int64_t slot = PhaseSlot(p, py, px);
      if (slot < 0) continue;
      float* plane = dst + slot * ph.hs * ph.ws;
      // Columns j whose input column j * SW + px - PL lies in [0, W).
      int64_t j0 =
          std::clamp<int64_t>(CeilDiv(std::max<int64_t>(p.pad_left - px, 0), p.stride_w), 0, ph.ws);
      int64_t j1 = std::clamp<int64_t>(CeilDiv(p.width + p.pad_left - px, p.stride_w), j0, ph.ws);
      for (int64_t i = 0; i < ph.hs; ++i) {
        int64_t iy = i * p.stride_h + py - p.pad_top;
        if (iy < 0 || iy >= p.height || j0 >= j1) {
          t.pad_row(plane + i * ph.ws, ph.ws, x, 0, 0, 1);
        } else {
          const float* src = x + iy * p.width + (j0 * p.stride_w + px - p.pad_left);
          t.pad_row(plane + i * ph.ws, ph.ws, src, j0, j1, p.stride_w);
        }
      }
    }
  }
}

// off[r] = the offset of reduction row r = (c, ky, kx) inside one image group's phase buffer,
// for r < cg * KH * KW.
void TapOffsets(const cuvil_uk_conv_params& p, const Phases& ph, int64_t cg, int64_t* off) {
  const int64_t taps = p.kernel_h * p.kernel_w;
  if (ph.im2col) {
    for (int64_t r = 0; r < cg * taps; ++r) off[r] = (r / taps) * ph.channel + (r % taps) * ph.ldb;
    return;
  }
  for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
    for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
      const int64_t dy = ky * p.dilation_h, dx = kx * p.dilation_w;
      const int64_t tap = PhaseSlot(p, dy % p.stride_h, dx % p.stride_w) * ph.hs * ph.ws +
                          (dy / p.stride_h) * ph.ws + dx / p.stride_w;
      for (int64_t c = 0; c < cg; ++c) off[c * taps + ky * p.kernel_w + kx] = c * ph.channel + tap;
    }
  }
}

// A depthwise multiply-add costs about this many GEMM ones (one load per FMA and no register
// reuse: ~5-10 vs ~40 GMAC/s on a Zen 3 core with AVX2), so that a depthwise layer splits over the
// threads at about the same run time as a GEMM does.
constexpr int64_t kDepthwiseCostScale = 8;

Epilogue MakeEpilogue(const cuvil_uk_conv_params& p, float alpha, float beta) {
  return Epilogue{nullptr, nullptr, p.activation, alpha, beta};
}

// Reduction rows per pass: the B tile (KC x NR floats, 16 KB) stays in L1 across the M panels.
int64_t ReductionBlock(int64_t nr) { return std::max<int64_t>(128, 4096 / nr); }
// Panels of kMR rows and output columns per task.
constexpr int64_t kPanelsPerTask = 16;
constexpr int64_t kColumnsPerTask = 192;

// How ConvGemm splits one conv into tasks: blocks of whole tiles (16 or 32 output columns) and of
// kMR-row panels of output channels.
struct GemmTasks {
  int64_t tiles, panels;  // per (image, group)
  int64_t tiles_per_task, panels_per_task;
  int64_t q_blocks, m_blocks;
  int64_t tasks;
};

// The split for `batch` images of `g_count` groups of `mg` output channels over `nq` flat output
// columns, at the calling thread's intra-op threads.
GemmTasks PlanGemmTasks(int64_t batch, int64_t g_count, int64_t mg, int64_t nq, int64_t tile_w) {
  GemmTasks g;
  g.tiles = CeilDiv(nq, tile_w);
  g.panels = CeilDiv(mg, kMR);
  // Even blocks (a short last block would leave a thread idle), and at least a few tasks per
  // intra-op thread while panel blocks stay tall enough to reuse each B tile.
  int64_t q_blocks = CeilDiv(g.tiles, CeilDiv(kColumnsPerTask, tile_w));
  int64_t m_blocks = CeilDiv(g.panels, kPanelsPerTask);
  const int64_t want_tasks = 4 * static_cast<int64_t>(cuvil::IntraOpThreads());
  while (batch * g_count * m_blocks * q_blocks < want_tasks && m_blocks * 4 < g.panels) ++m_blocks;
  // With several threads, more (narrower) column blocks: a thread that starts late or is slowed
  // by another process then leaves a short tail, not a whole task (7x7 and 14x14 layers have
  // few tiles, so they split by output channels above instead).
  const int64_t balance_tasks = 2 * want_tasks;
  if (cuvil::IntraOpThreads() > 1) {
    while (batch * g_count * m_blocks * q_blocks < balance_tasks && q_blocks < g.tiles) ++q_blocks;
  }
  g.tiles_per_task = CeilDiv(g.tiles, q_blocks);
  g.panels_per_task = CeilDiv(g.panels, m_blocks);
  g.q_blocks = CeilDiv(g.tiles, g.tiles_per_task);
  g.m_blocks = CeilDiv(g.panels, g.panels_per_task);
  g.tasks = batch * g_count * g.m_blocks * g.q_blocks;
  return g;
}

// The kernel rows [lo, hi] (or columns) that read some input element for some output: with a
// dilation as large as the map (DeepLab's ASPP, dilations 24 and 36 over 14x14), the outer taps
// read only padding for every output. lo > hi when none does.
struct LiveTaps {
  int64_t lo, hi;
};
LiveTaps LiveTapRange(int64_t kernel, int64_t dilation, int64_t stride, int64_t pad, int64_t in,
                      int64_t out) {
  LiveTaps live{kernel, -1};
  for (int64_t t = 0; t < kernel; ++t) {
    // The input rows this tap reads run from `first` to `last` (stride apart): dead when that
    // span misses [0, in) entirely.
    const int64_t first = t * dilation - pad, last = (out - 1) * stride + first;
    if (last < 0 || first >= in) continue;
    live.lo = std::min(live.lo, t);
    live.hi = std::max(live.hi, t);
  }
  return live;
}

// A conv whose dead outer taps are cut off: the same outputs from a smaller kernel whose pads
// shrink by the taps cut (they may turn negative: the window then starts inside the input).
// Returns false when every tap is live (or none is: the plain path handles that).
bool TrimDeadTaps(const cuvil_uk_conv_params& p, cuvil_uk_conv_params* trimmed, LiveTaps* rows,
                  LiveTaps* cols) {
  *rows = LiveTapRange(p.kernel_h, p.dilation_h, p.stride_h, p.pad_top, p.height, p.out_height);
  *cols = LiveTapRange(p.kernel_w, p.dilation_w, p.stride_w, p.pad_left, p.width, p.out_width);
  if (rows->lo > rows->hi || cols->lo > cols->hi) return false;
  if (rows->lo == 0 && rows->hi == p.kernel_h - 1 && cols->lo == 0 && cols->hi == p.kernel_w - 1) {
    return false;
  }
  *trimmed = p;
  trimmed->kernel_h = rows->hi - rows->lo + 1;
  trimmed->kernel_w = cols->hi - cols->lo + 1;
  trimmed->pad_top = p.pad_top - rows->lo * p.dilation_h;
  trimmed->pad_left = p.pad_left - cols->lo * p.dilation_w;
  return true;
}

// Copies the packed weights of the live taps into `dst`, packed as for the trimmed kernel.
void PackLiveTaps(const cuvil_uk_conv_params& p, const float* w, LiveTaps rows, LiveTaps cols,
                  float* dst) {
  const int64_t cg = p.channels / p.groups, mg = p.out_channels / p.groups;
  const int64_t panels = CeilDiv(mg, kMR);
  const int64_t kh = rows.hi - rows.lo + 1, kw = cols.hi - cols.lo + 1;
  const int64_t k_dim = cg * p.kernel_h * p.kernel_w, k_live = cg * kh * kw;
  for (int64_t gp = 0; gp < p.groups * panels; ++gp) {
    const float* src = w + gp * k_dim * kMR;
    float* out = dst + gp * k_live * kMR;
    for (int64_t c = 0; c < cg; ++c) {
      for (int64_t ky = 0; ky < kh; ++ky) {
        for (int64_t kx = 0; kx < kw; ++kx) {
          const int64_t r = (c * p.kernel_h + ky + rows.lo) * p.kernel_w + kx + cols.lo;
          std::memcpy(out + ((c * kh + ky) * kw + kx) * kMR, src + r * kMR, kMR * sizeof(float));
        }
      }
    }
  }
}

// Region bytes ConvGemm takes for any batch (see cuvil_uk_scratch_bytes): a conv that reads X in
// place takes its tap offsets only, any other runs one image at a time.
int64_t ConvGemmScratchBytes(const Table& t, const cuvil_uk_conv_params& conv) {
  cuvil_uk_conv_params trimmed;
  LiveTaps rows, cols;
  const bool trim = TrimDeadTaps(conv, &trimmed, &rows, &cols);
  const cuvil_uk_conv_params& p = trim ? trimmed : conv;
  const int64_t cg = p.channels / p.groups, mg = p.out_channels / p.groups;
  const Phases ph = PlanPhases(p, t.nr, /*gemm=*/true);
  ScratchTally s;
  if (trim) s.AddFloats(p.groups * CeilDiv(mg, kMR) * cg * p.kernel_h * p.kernel_w * kMR);
  s.AddIndices(cg * p.kernel_h * p.kernel_w);
  if (!ph.direct) {  // the image's phase planes and its tasks' tiles
    s.AddFloats(p.channels * ph.channel + ph.slack);
    const GemmTasks g = PlanGemmTasks(1, p.groups, mg, p.out_height * ph.ws, t.nr);
    if (!ph.im2col) s.AddFloats(g.panels_per_task * kMR * g.tiles_per_task * t.nr);
  }
  return s.bytes();
}

void ConvGemm(const Table& t, const cuvil_uk_conv_params& p, const float* x, const float* w,
              const float* bias, const float* residual, float* y, int64_t batch, float alpha,
              float beta) {
  const int64_t g_count = p.groups, cg = p.channels / g_count, mg = p.out_channels / g_count;
  const int64_t k_dim = cg * p.kernel_h * p.kernel_w;
  const int64_t tile_w = t.nr;
  // Equal passes (147 = 74 + 73, not 128 + 19): a short last pass pays the tile reload for little.
  const int64_t k_block =
      CeilDiv(k_dim, std::max<int64_t>(1, CeilDiv(k_dim, ReductionBlock(tile_w))));
  const Phases ph = PlanPhases(p, tile_w, /*gemm=*/true);
  const int64_t in_image = p.channels * p.height * p.width;
  const int64_t out_plane = p.out_height * p.out_width;
  if (!ph.direct && batch > 1) {
    // One image at a time: its phase planes are still in cache when the GEMM reads them (a whole
    // batch of planes is not), and each image has enough tasks for every thread.
    const int64_t out_image = p.out_channels * out_plane;
    for (int64_t n = 0; n < batch; ++n) {
      ConvGemm(t, p, x + n * in_image, w, bias,
               residual != nullptr ? residual + n * out_image : nullptr, y + n * out_image, 1,
               alpha, beta);
    }
    return;
  }
  int64_t* off = ThreadIndices(kIndexGemmTaps, static_cast<size_t>(k_dim));
  TapOffsets(p, ph, cg, off);

  // The B source of every image (phase planes, or X itself). The planes are filled inside the
  // GEMM's parallel region (below), one input channel per fill item.
  const float* src = x;
  int64_t src_image = in_image;
  int64_t fills = 0;
  float* phases = nullptr;
  if (!ph.direct) {
    src_image = p.channels * ph.channel + ph.slack;
    phases = ThreadScratch(kSlotPhases, static_cast<size_t>(batch * src_image));
    fills = batch * p.channels;
    src = phases;
  }
  auto fill = [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      int64_t n = i / p.channels, c = i % p.channels;
      const float* x_plane = x + (n * p.channels + c) * p.height * p.width;
      float* dst = phases + n * src_image + c * ph.channel;
      if (ph.im2col) {
        FillIm2col(t, p, ph, x_plane, dst);
      } else {
        FillPhases(t, p, ph, x_plane, dst);
      }
      if (c == p.channels - 1)
        std::memset(phases + (n + 1) * src_image - ph.slack, 0, ph.slack * sizeof(float));
    }
  };

  // Flat output columns per (image, group): OH rows of Ws (direct and im2col: exactly OH * OW).
  const int64_t nq = p.out_height * ph.ws;
  const GemmTasks split = PlanGemmTasks(batch, g_count, mg, nq, tile_w);
  const int64_t tiles = split.tiles, panels = split.panels;
  const int64_t tiles_per_task = split.tiles_per_task, panels_per_task = split.panels_per_task;
  const int64_t q_blocks = split.q_blocks, m_blocks = split.m_blocks, tasks = split.tasks;
  const int64_t task_cost = panels_per_task * kMR * tiles_per_task * tile_w * k_dim;
  const Epilogue base_ep = MakeEpilogue(p, alpha, beta);
  // Every computed column is an output (X read in place, or im2col): tiles store through the
  // epilogue straight into Y.
  const bool out_direct = ph.direct || ph.im2col;

  ParallelFillTasks(fills, ph.channel, fill, tasks, task_cost, [&](auto& next) {
    const int64_t tile_ld = tiles_per_task * tile_w;
    float* tile_buf =
        out_direct ? nullptr
                   : ThreadScratch(kSlotTile, static_cast<size_t>(panels_per_task * kMR * tile_ld));
    for (int64_t task = next(); task >= 0; task = next()) {
      int64_t qb = task % q_blocks, rest = task / q_blocks;
      int64_t mb = rest % m_blocks;
      rest /= m_blocks;
      int64_t g = rest % g_count, n = rest / g_count;
      int64_t t0 = qb * tiles_per_task, t1 = std::min(tiles, t0 + tiles_per_task);
      int64_t p0 = mb * panels_per_task, p1 = std::min(panels, p0 + panels_per_task);
      int64_t q0 = t0 * tile_w, q1 = std::min(nq, t1 * tile_w);
      int64_t m0 = p0 * kMR, m1 = std::min(mg, p1 * kMR);
      const float* b_img =
          src + n * src_image + g * cg * (ph.direct ? p.height * p.width : ph.channel);
      // Output channel index of this task's first row (over all groups).
      int64_t row0 = g * mg + m0;
      float* c_base;
      int64_t ldc;
      if (out_direct) {
        c_base = y + (n * p.out_channels + row0) * out_plane + q0;
        ldc = out_plane;
      } else {
        c_base = tile_buf;
        ldc = tile_ld;
      }
      for (int64_t kp = 0; kp < k_dim; kp += k_block) {
        int64_t kc = std::min(k_block, k_dim - kp);
        bool last = kp + kc == k_dim;
        for (int64_t tq = t0; tq < t1; ++tq) {
          int64_t q = tq * tile_w, nr = std::min(tile_w, nq - q);
          for (int64_t pp = p0; pp < p1; ++pp) {
            int64_t m = pp * kMR, mr = std::min(kMR, mg - m);
            const float* a = w + ((g * panels + pp) * k_dim + kp) * kMR;
            float* c = c_base + (m - m0) * ldc + (q - q0);
            Epilogue ep = base_ep;
            const Epilogue* epp = nullptr;
            if (out_direct && last) {
              ep.bias = bias != nullptr ? bias + g * mg + m : nullptr;
              ep.residual = residual != nullptr
                                ? residual + (n * p.out_channels + g * mg + m) * out_plane + q
                                : nullptr;
              epp = &ep;
            }
            t.gemm_tile(kc, a, b_img + q, off + kp, c, ldc, mr, nr, kp > 0, epp);
          }
        }
      }
      if (out_direct) continue;
      // Copy out the valid columns of each output row through the epilogue.
      for (int64_t m = m0; m < m1; ++m) {
        int64_t ch = g * mg + m;
        float b = bias != nullptr ? bias[ch] : 0.0f;
        const float* row = tile_buf + (m - m0) * tile_ld;
        for (int64_t q = q0; q < q1;) {
          int64_t oy = q / ph.ws, ox = q % ph.ws;
          int64_t seg_end = std::min(q1, (oy + 1) * ph.ws);
          if (ox < p.out_width) {
            int64_t len = std::min(seg_end, oy * ph.ws + p.out_width) - q;
            int64_t out_idx = (n * p.out_channels + ch) * out_plane + oy * p.out_width + ox;
            t.epilogue_row(y + out_idx, row + (q - q0), len, b,
                           residual != nullptr ? residual + out_idx : nullptr, base_ep);
          }
          q = seg_end;
        }
      }
    }
  });
}

// --- Live taps only (CUVIL_UK_CONV_TAP_MAJOR) --------------------------------------------------
// A dilation wide against the map (DeepLab's ASPP: 3x3 at dilation 12 over 14x14) leaves most
// taps of most outputs on padding, which the GEMM path multiplies anyway (9 taps for every
// output, 1.6 of them live on average). Here each tap is one GEMM over the rectangle of outputs
// it reads input for (the centre tap all 196, a corner tap 2x2), from an im2col of that
// rectangle, accumulated into the task's output rows; the weights are packed tap-major, so each
// tap's are one contiguous run of A rows, read once per column tile, and nothing is repacked per
// call.

// Outputs [lo, hi) of one dimension for which tap `t` reads input (input index o * stride +
// t * dilation - pad inside [0, in)).
void TapOutputs(int64_t t, int64_t dilation, int64_t stride, int64_t pad, int64_t in, int64_t out,
                int64_t* lo, int64_t* hi) {
  const int64_t shift = t * dilation - pad;
  const int64_t first = shift >= 0 ? 0 : CeilDiv(-shift, stride);
  const int64_t last = in - 1 - shift < 0 ? -1 : (in - 1 - shift) / stride;
  *lo = std::min(first, out);
  *hi = std::max(*lo, std::min(last + 1, out));
}

// The output rectangle of tap (ky, kx): rows [r0, r1), columns [c0, c1).
struct TapRect {
  int64_t r0, r1, c0, c1;
  int64_t rows() const { return r1 - r0; }
  int64_t cols() const { return c1 - c0; }
  int64_t size() const { return rows() * cols(); }
};
TapRect RectOf(const cuvil_uk_conv_params& p, int64_t ky, int64_t kx) {
  TapRect r;
  TapOutputs(ky, p.dilation_h, p.stride_h, p.pad_top, p.height, p.out_height, &r.r0, &r.r1);
  TapOutputs(kx, p.dilation_w, p.stride_w, p.pad_left, p.width, p.out_width, &r.c0, &r.c1);
  return r;
}

// How ConvLiveTaps splits one image's output channels into tasks of whole panels.
int64_t LiveTapPanelsPerTask(int64_t panels) {
  const int64_t blocks =
      std::min<int64_t>(panels, 4 * static_cast<int64_t>(cuvil::IntraOpThreads()));
  return CeilDiv(panels, std::max<int64_t>(blocks, 1));
}

// Whether tap (ky, kx)'s rectangle is read from X in place: its rows as wide as the input and
// stride 1 (consecutive outputs are consecutive inputs, rows included), as ASPP's centre tap.
bool ReadsInPlace(const cuvil_uk_conv_params& p, const TapRect& r) {
  return p.stride_w == 1 && r.cols() == p.width && (p.stride_h == 1 || r.rows() <= 1);
}

// Floats of one image's im2col over every tap's rectangle not read in place.
int64_t LiveTapColumns(const cuvil_uk_conv_params& p) {
  int64_t sum = 0;
  for (int64_t ky = 0; ky < p.kernel_h; ++ky) {
    for (int64_t kx = 0; kx < p.kernel_w; ++kx) {
      const TapRect r = RectOf(p, ky, kx);
      if (!ReadsInPlace(p, r)) sum += r.size();
    }
  }
  return sum * (p.channels / p.groups);
}

int64_t ConvLiveTapsScratchBytes(const Table& /*t*/, const cuvil_uk_conv_params& p) {
  const int64_t cg = p.channels / p.groups, mg = p.out_channels / p.groups;
  const int64_t rows = LiveTapPanelsPerTask(CeilDiv(mg, kMR)) * kMR;
  ScratchTally s;
  s.AddFloats(LiveTapColumns(p));
  s.AddIndices(cg * p.kernel_h * p.kernel_w);
  s.AddFloats(rows * p.out_height * p.out_width);  // a task's output rows
  s.AddFloats(rows * p.out_height * p.out_width);  // and a tap's part
  return s.bytes();
}

void ConvLiveTaps(const Table& t, const cuvil_uk_conv_params& p, const float* x, const float* w,
                  const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                  float beta) {
  const int64_t g_count = p.groups, cg = p.channels / g_count, mg = p.out_channels / g_count;
  const int64_t taps = p.kernel_h * p.kernel_w, k_dim = cg * taps, panels = CeilDiv(mg, kMR);
  const int64_t tile_w = t.nr, k_block = ReductionBlock(tile_w);
  const int64_t in_plane = p.height * p.width, out_plane = p.out_height * p.out_width;
  const int64_t panels_per_task = LiveTapPanelsPerTask(panels);
  const int64_t m_blocks = CeilDiv(panels, panels_per_task);
  const Epilogue ep = MakeEpilogue(p, alpha, beta);
  float* cols = ThreadScratch(kSlotPhases, static_cast<size_t>(LiveTapColumns(p)));
  // Row k of tap `tap`'s B: channel k of its rectangle, at off[tap * cg + k] from the tap's
  // source, its im2col block in `cols` or (read in place) the group's first channel of the image.
  int64_t* off = ThreadIndices(kIndexGemmTaps, static_cast<size_t>(k_dim));
  for (int64_t tap = 0, base = 0; tap < taps; ++tap) {
    const int64_t ky = tap / p.kernel_w, kx = tap % p.kernel_w;
    const TapRect r = RectOf(p, ky, kx);
    if (ReadsInPlace(p, r)) {
      const int64_t first = (r.r0 * p.stride_h - p.pad_top + ky * p.dilation_h) * p.width +
                            r.c0 * p.stride_w - p.pad_left + kx * p.dilation_w;
      for (int64_t k = 0; k < cg; ++k) off[tap * cg + k] = k * in_plane + first;
      continue;
    }
    for (int64_t k = 0; k < cg; ++k) off[tap * cg + k] = base + k * r.size();
    base += cg * r.size();
  }
  for (int64_t n = 0; n < batch; ++n) {
    for (int64_t g = 0; g < g_count; ++g) {
      auto fill = [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const int64_t tap = i / cg, c = i % cg, ky = tap / p.kernel_w, kx = tap % p.kernel_w;
          const TapRect r = RectOf(p, ky, kx);
          if (ReadsInPlace(p, r)) continue;
          const float* plane = x + (n * p.channels + g * cg + c) * in_plane;
          float* dst = cols + off[i];
          const int64_t ix0 = r.c0 * p.stride_w - p.pad_left + kx * p.dilation_w;
          for (int64_t row = 0; row < r.rows(); ++row) {
            const int64_t iy = (r.r0 + row) * p.stride_h - p.pad_top + ky * p.dilation_h;
            const float* src = plane + iy * p.width + ix0;
            if (p.stride_w == 1) {
              std::memcpy(dst + row * r.cols(), src, static_cast<size_t>(r.cols()) * sizeof(float));
            } else {
              for (int64_t j = 0; j < r.cols(); ++j) dst[row * r.cols() + j] = src[j * p.stride_w];
            }
          }
        }
      };
      const int64_t task_cost = panels_per_task * kMR * out_plane * cg;
      ParallelFillTasks(
          k_dim, out_plane * kFillFloatCost / taps + 1, fill, m_blocks, task_cost, [&](auto& next) {
            const int64_t rows = panels_per_task * kMR;
            float* acc = ThreadScratch(kSlotTile, static_cast<size_t>(rows * out_plane));
            float* part = ThreadScratch(kSlotTapTile, static_cast<size_t>(rows * out_plane));
            for (int64_t mb = next(); mb >= 0; mb = next()) {
              const int64_t p0 = mb * panels_per_task, p1 = std::min(panels, p0 + panels_per_task);
              const int64_t m0 = p0 * kMR, m1 = std::min(mg, p1 * kMR);
              std::memset(acc, 0, static_cast<size_t>((m1 - m0) * out_plane) * sizeof(float));
              for (int64_t tap = 0; tap < taps; ++tap) {
                const TapRect r = RectOf(p, tap / p.kernel_w, tap % p.kernel_w);
                const int64_t size = r.size();
                if (size == 0) continue;
                // Rows as wide as the output are contiguous in it: the GEMM adds into the task's
                // output rows directly. A narrower rectangle goes through `part`, added row by row.
                const bool direct = r.cols() == p.out_width;
                const float* b_src =
                    ReadsInPlace(p, r) ? x + (n * p.channels + g * cg) * in_plane : cols;
                float* c_base = direct ? acc + r.r0 * p.out_width : part;
                const int64_t ldc = direct ? out_plane : size;
                for (int64_t kp = 0; kp < cg; kp += k_block) {
                  const int64_t kc = std::min(k_block, cg - kp);
                  for (int64_t q = 0; q < size; q += tile_w) {
                    const int64_t nr = std::min(tile_w, size - q);
                    for (int64_t pp = p0; pp < p1; ++pp) {
                      const int64_t m = pp * kMR, mr = std::min(kMR, mg - m);
                      const float* a = w + ((g * panels + pp) * k_dim + tap * cg + kp) * kMR;
                      t.gemm_tile(kc, a, b_src + q, off + tap * cg + kp,
                                  c_base + (m - m0) * ldc + q, ldc, mr, nr, direct || kp > 0,
                                  nullptr);
                    }
                  }
                }
                if (direct) continue;
                for (int64_t m = m0; m < m1; ++m) {
                  const float* src = part + (m - m0) * size;
                  float* dst = acc + (m - m0) * out_plane + r.r0 * p.out_width + r.c0;
                  for (int64_t row = 0; row < r.rows(); ++row) {
                    for (int64_t e = 0; e < r.cols(); ++e) {
                      dst[row * p.out_width + e] += src[row * r.cols() + e];
                    }
                  }
                }
              }
              for (int64_t m = m0; m < m1; ++m) {
                const int64_t ch = g * mg + m;
                const int64_t at = (n * p.out_channels + ch) * out_plane;
                t.epilogue_row(y + at, acc + (m - m0) * out_plane, out_plane,
                               bias != nullptr ? bias[ch] : 0.0f,
                               residual != nullptr ? residual + at : nullptr, ep);
              }
            }
          });
    }
  }
}

// One (image, channel) plane of a depthwise conv at a time: the tier's plane kernel reads it as it
// is; without one (or for geometry it does not take) the plane is padded into per-thread phase
// planes and every output row is one vectorised pass over the taps. Thread-compatible: one per
// task loop.
class DepthwisePlanes {
 public:
  DepthwisePlanes(const Table& t, const cuvil_uk_conv_params& p, const Epilogue& ep)
      : t_(t), ep_(ep), one_(p) {
    one_.channels = one_.out_channels = one_.groups = 1;
  }

  // The conv's geometry for one plane (one channel, one group).
  const cuvil_uk_conv_params& plane() const { return one_; }

  // Region bytes Run takes at most for the planes of `p` (see cuvil_uk_scratch_bytes).
  static int64_t ScratchBytes(const Table& t, const cuvil_uk_conv_params& p) {
    cuvil_uk_conv_params one = p;
    one.channels = one.out_channels = one.groups = 1;
    const Phases pp = PaddedPhases(t, one);
    ScratchTally s;
    s.AddIndices(one.kernel_h * one.kernel_w);
    s.AddFloats(pp.channel + pp.slack);
    if (t.depthwise_plane_scratch_floats != nullptr) {
      s.AddFloats(t.depthwise_plane_scratch_floats(one));
    }
    return s.bytes();
  }

  // y = act(depthwise(x, w) + b + res) for one plane; res may be null.
  void Run(const float* x, const float* w, float b, const float* res, float* y) {
    const int64_t taps = one_.kernel_h * one_.kernel_w;
    if (t_.depthwise_plane != nullptr && t_.depthwise_plane(one_, x, w, b, res, y, ep_)) return;
    if (planes_ == nullptr) {
      pp_ = PaddedPhases(t_, one_);
      off_ = ThreadIndices(kIndexPlaneTaps, static_cast<size_t>(taps));
      TapOffsets(one_, pp_, 1, off_);
      planes_ = ThreadScratch(kSlotPlane, static_cast<size_t>(pp_.channel + pp_.slack));
      std::memset(planes_ + pp_.channel, 0, pp_.slack * sizeof(float));
    }
    FillPhases(t_, one_, pp_, x, planes_);
    for (int64_t oy = 0; oy < one_.out_height; ++oy) {
      const int64_t at = oy * one_.out_width;
      t_.depthwise_row(y + at, planes_ + oy * pp_.ws, off_, w, taps, one_.out_width, b,
                       res != nullptr ? res + at : nullptr, ep_);
    }
  }

 private:
  // The phase planes of plane `one`: always a padded copy (a 1x1 plane too), so there is one code
  // path.
  static Phases PaddedPhases(const Table& t, const cuvil_uk_conv_params& one) {
    Phases pp = PlanPhases(one, t.nr, /*gemm=*/false);
    pp.direct = false;
    pp.slack = pp.ws + 2 * t.nr;
    return pp;
  }

  const Table& t_;
  const Epilogue& ep_;
  cuvil_uk_conv_params one_;
  float* planes_ = nullptr;
  Phases pp_{};
  int64_t* off_ = nullptr;
};

void ConvDepthwise(const Table& t, const cuvil_uk_conv_params& p, const float* x, const float* w,
                   const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                   float beta) {
  const int64_t taps = p.kernel_h * p.kernel_w;
  const int64_t in_plane = p.height * p.width, out_plane = p.out_height * p.out_width;
  const Epilogue ep = MakeEpilogue(p, alpha, beta);
  ParallelTasks(batch * p.channels, out_plane * taps * kDepthwiseCostScale, [&](auto& next) {
    DepthwisePlanes planes(t, p, ep);
    for (int64_t i = next(); i >= 0; i = next()) {
      const int64_t c = i % p.channels;
      planes.Run(x + i * in_plane, w + c * taps, bias != nullptr ? bias[c] : 0.0f,
                 residual != nullptr ? residual + i * out_plane : nullptr, y + i * out_plane);
    }
  });
}

}  // namespace

void QDepthwise2d(const Table& t, const cuvil_uk_conv_params& p, const void* x, bool x_signed,
                  float x_scale, int32_t x_zero, const float* w, const float* bias, void* y,
                  bool y_signed, float y_scale, int32_t y_zero, int64_t batch, float alpha,
                  float beta) {
  if (batch <= 0) return;
  const int64_t taps = p.kernel_h * p.kernel_w;
  const int64_t in_plane = p.height * p.width, out_plane = p.out_height * p.out_width;
  const Epilogue ep = MakeEpilogue(p, alpha, beta);
  const QuantizedPlane q{x_signed, x_scale, x_zero, y_signed, y_scale, y_zero};
  // The tier's 8-bit plane kernel converts in registers; otherwise each plane is widened and
  // narrowed in per-thread scratch. Either way only the 8-bit tensors travel through memory.
  ParallelTasks(batch * p.channels, out_plane * taps * kDepthwiseCostScale, [&](auto& next) {
    DepthwisePlanes planes(t, p, ep);
    float* in = nullptr;
    float* out = nullptr;
    for (int64_t i = next(); i >= 0; i = next()) {
      const int64_t c = i % p.channels;
      const float b = bias != nullptr ? bias[c] : 0.0f;
      const void* xi = static_cast<const int8_t*>(x) + i * in_plane;
      void* yi = static_cast<int8_t*>(y) + i * out_plane;
      if (t.qdepthwise_plane != nullptr &&
          t.qdepthwise_plane(planes.plane(), xi, w + c * taps, b, yi, q, ep)) {
        continue;
      }
      if (in == nullptr) {
        in = ThreadScratch(kSlotQuantIn, static_cast<size_t>(in_plane));
        out = ThreadScratch(kSlotQuantOut, static_cast<size_t>(out_plane));
      }
      t.dequantize_row(xi, x_signed, in_plane, x_scale, x_zero, in);
      planes.Run(in, w + c * taps, b, nullptr, out);
      t.quantize_row(out, out_plane, y_scale, y_zero, y_signed, yi);
    }
  });
}

TierList<Table> SupportedTables() {
  TierList<Table> out;
#if defined(__x86_64__)
  __builtin_cpu_init();
  const Table* avx512 = Avx512Table();
  if (avx512 != nullptr && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("fma")) {
    out.push_back(avx512);
  }
  const Table* avx2 = Avx2Table();
  if (avx2 != nullptr && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    out.push_back(avx2);
  }
#endif  // Other CPUs (AArch64 AOT libraries) run the generic tier.
  out.push_back(&GenericTable());
  return out;
}

const Table& ActiveTable() {
  static const Table* table = [] {
    const TierList<Table> tables = SupportedTables();
    // A forced tier that this CPU cannot run falls back to the best one it can.
#if defined(CUVIL_AOT_BARE_METAL)
    const char* forced = nullptr;  // no environment on a microcontroller
#else
    const char* forced = std::getenv("CUVIL_UK_TIER");
#endif
    if (forced != nullptr && *forced != '\0') {
      std::string_view want = forced;
      if (want == "avx2") want = "avx2_fma";
      for (const Table* t : tables) {
        if (want == t->name) return t;
      }
    }
    return tables.front();
  }();
  return *table;
}

int64_t Conv2dScratchBytes(const Table& t, const cuvil_uk_conv_params& p, int64_t batch) {
  if (batch <= 0) return batch < 0 ? -1 : 0;
  if ((p.flags & CUVIL_UK_CONV_WINOGRAD) != 0) return WinogradScratchBytes(t, p, batch);
  if ((p.flags & CUVIL_UK_CONV_DEPTHWISE) != 0) return DepthwisePlanes::ScratchBytes(t, p);
  if ((p.flags & CUVIL_UK_CONV_TAP_MAJOR) != 0) return ConvLiveTapsScratchBytes(t, p);
  return ConvGemmScratchBytes(t, p);
}

int64_t QDepthwise2dScratchBytes(const Table& t, const cuvil_uk_conv_params& p) {
  ScratchTally s;
  s.AddFloats(p.height * p.width);  // the plane widened, and its output before narrowing
  s.AddFloats(p.out_height * p.out_width);
  s.AddSized(DepthwisePlanes::ScratchBytes(t, p));
  return s.bytes();
}

void Conv2d(const Table& t, const cuvil_uk_conv_params& p, const float* x, const float* w,
            const float* bias, const float* residual, float* y, int64_t batch, float alpha,
            float beta) {
  // An empty output (a zero batch, or a map a shape-generic model's small input shrinks to
  // nothing, as a server's load probe sends) has nothing to compute; the drivers' task plans
  // would divide by its zero tiles.
  if (batch <= 0 || p.out_height <= 0 || p.out_width <= 0 || p.out_channels <= 0) return;
  if ((p.flags & CUVIL_UK_CONV_WINOGRAD) != 0) {
    ConvWinograd(t, p, x, w, bias, residual, y, batch, alpha, beta);
  } else if ((p.flags & CUVIL_UK_CONV_DEPTHWISE) != 0) {
    ConvDepthwise(t, p, x, w, bias, residual, y, batch, alpha, beta);
  } else if ((p.flags & CUVIL_UK_CONV_TAP_MAJOR) != 0) {
    ConvLiveTaps(t, p, x, w, bias, residual, y, batch, alpha, beta);
  } else {
    cuvil_uk_conv_params trimmed;
    LiveTaps rows, cols;
    if (TrimDeadTaps(p, &trimmed, &rows, &cols)) {
      // Weights of the live taps only (for ASPP's 1x1 remainder a 1/9 copy, far cheaper than
      // the padded planes and the 9x multiplies it saves).
      const int64_t mg = p.out_channels / p.groups;
      float* live =
          ThreadScratch(kSlotTrimmedWeights,
                        static_cast<size_t>(p.groups * CeilDiv(mg, kMR) * (p.channels / p.groups) *
                                            trimmed.kernel_h * trimmed.kernel_w * kMR));
      PackLiveTaps(p, w, rows, cols, live);
      ConvGemm(t, trimmed, x, live, bias, residual, y, batch, alpha, beta);
    } else {
      ConvGemm(t, p, x, w, bias, residual, y, batch, alpha, beta);
    }
  }
}

}  // namespace cuvil::uk

extern "C" {

void cuvil_uk_conv2d(const cuvil_uk_conv_params* p, const float* x, const float* w,
                     const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                     float beta) {
  cuvil::uk::MicrokernelScratchScope scratch;
  cuvil::uk::Conv2d(cuvil::uk::ActiveTable(), *p, x, w, bias, residual, y, batch, alpha, beta);
}

#if !defined(CUVIL_AOT_BARE_METAL)  // qdepthwise_direct.cc has a microcontroller's.
void cuvil_uk_qdepthwise2d(const cuvil_uk_conv_params* p, const void* x, int32_t x_signed,
                           float x_scale, int32_t x_zero, const float* w, const float* bias,
                           void* y, int32_t y_signed, float y_scale, int32_t y_zero, int64_t batch,
                           float alpha, float beta) {
  cuvil::uk::MicrokernelScratchScope scratch;
  cuvil::uk::QDepthwise2d(cuvil::uk::ActiveTable(), *p, x, x_signed != 0, x_scale, x_zero, w, bias,
                          y, y_signed != 0, y_scale, y_zero, batch, alpha, beta);
}
#endif

int64_t cuvil_uk_packed_conv_weights_size(int64_t groups, int64_t mg, int64_t k) {
  int64_t panels = (mg + CUVIL_UK_MR - 1) / CUVIL_UK_MR;
  int64_t out = 0;
  if (__builtin_mul_overflow(groups, panels, &out) || __builtin_mul_overflow(out, k, &out) ||
      __builtin_mul_overflow(out, CUVIL_UK_MR, &out)) {
    return -1;
  }
  return out;
}

void cuvil_uk_pack_conv_weights(const float* w, int64_t groups, int64_t mg, int64_t k,
                                float* packed) {
  const int64_t panels = (mg + CUVIL_UK_MR - 1) / CUVIL_UK_MR;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t pp = 0; pp < panels; ++pp) {
      float* dst = packed + (g * panels + pp) * k * CUVIL_UK_MR;
      for (int64_t r = 0; r < k; ++r) {
        for (int64_t i = 0; i < CUVIL_UK_MR; ++i) {
          int64_t m = pp * CUVIL_UK_MR + i;
          dst[r * CUVIL_UK_MR + i] = m < mg ? w[(g * mg + m) * k + r] : 0.0f;
        }
      }
    }
  }
}

void cuvil_uk_pack_conv_weights_tap_major(const float* w, int64_t groups, int64_t mg, int64_t cg,
                                          int64_t taps, float* packed) {
  const int64_t panels = (mg + CUVIL_UK_MR - 1) / CUVIL_UK_MR, k = cg * taps;
  for (int64_t g = 0; g < groups; ++g) {
    for (int64_t pp = 0; pp < panels; ++pp) {
      float* dst = packed + (g * panels + pp) * k * CUVIL_UK_MR;
      for (int64_t tap = 0; tap < taps; ++tap) {
        for (int64_t c = 0; c < cg; ++c) {
          for (int64_t i = 0; i < CUVIL_UK_MR; ++i) {
            const int64_t m = pp * CUVIL_UK_MR + i;
            dst[(tap * cg + c) * CUVIL_UK_MR + i] =
                m < mg ? w[((g * mg + m) * cg + c) * taps + tap] : 0.0f;
          }
        }
      }
    }
  }
}

const char* cuvil_uk_tier() { return cuvil::uk::ActiveTable().name; }

}  // extern "C"
