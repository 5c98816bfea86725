// Winograd F(2x2, 3x3) convolution for 3x3 stride-1 undilated ungrouped layers.
//
// Every 2x2 output tile comes from a 4x4 input patch d: Y = A^T [sum_c (G g G^T) . (B^T d B)] A.
// The 16 elementwise products summed over input channels are 16 GEMMs
//   M[t][m][q] = sum_c U[t][m][c] * V[t][c][q]   (t < 16, q over the 2x2 tiles)
// run on the tier's GEMM tile (B[c][q] = V + c * ldv + q), so a 3x3 layer does 16 / 36 of the
// direct multiply count. The weight transform U is done once at compile time
// (cuvil_uk_pack_winograd_weights). The tile rows of all images are cut into chunks (V and M of
// a chunk fit about the L2 cache); one task runs the input transform, the 16 GEMMs and the output
// transform with the epilogue of one chunk for one range of output channels, start to end on one
// thread, so threads never wait for each other inside a layer. The transforms need only adds: every
// row is split into even and odd columns first, so tile i's four columns are E[i], O[i], E[i + 1],
// O[i + 1] and each step is a contiguous vector loop.
#include "winograd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "call_scratch.h"
#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"
#include "parallel_tasks.h"
#include "thread_buffer.h"

namespace cuvil::uk {
namespace {

constexpr int64_t kTaps = 16;  // 4x4 transformed positions

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

enum Slot { kSlotV, kSlotM, kSlotRows, kNumSlots };

float* Scratch(Slot slot, size_t floats) {
  thread_local ThreadBuffer buffers[kNumSlots];
  return buffers[slot].Get(floats);
}

// The calling thread's per-channel offsets of a chunk's GEMM (kept between calls).
int64_t* ChannelOffsets(size_t count) {
  thread_local ThreadBuffer buffer;
  return buffer.GetIndices(count);
}

// Geometry of one layer's tiling.
struct Tiling {
  int64_t tx, ty;     // tiles per output row / column
  int64_t phase_w;    // length of an even or odd row: tx + 1
  int64_t per_image;  // tx * ty
};

Tiling PlanTiling(const cuvil_uk_conv_params& p) {
  Tiling t;
  t.tx = CeilDiv(p.out_width, 2);
  t.ty = CeilDiv(p.out_height, 2);
  t.phase_w = t.tx + 1;
  t.per_image = t.tx * t.ty;
  return t;
}

// Even (px = 0) or odd (px = 1) columns of padded input row iy (zero outside the input).
void PhaseRow(const Table& tb, const cuvil_uk_conv_params& p, const Tiling& tl, const float* x,
              int64_t iy, int64_t px, float* dst) {
  const int64_t n = tl.phase_w;
  if (iy < 0 || iy >= p.height) {
    std::memset(dst, 0, n * sizeof(float));
    return;
  }
  // Padded column 2j + px is input column 2j + px - PL.
  const int64_t j0 = std::clamp<int64_t>(CeilDiv(std::max<int64_t>(p.pad_left - px, 0), 2), 0, n);
  const int64_t j1 = std::clamp<int64_t>(CeilDiv(p.width + p.pad_left - px, 2), j0, n);
  if (j0 >= j1) {
    std::memset(dst, 0, n * sizeof(float));
    return;
  }
  tb.pad_row(dst, n, x + iy * p.width + (2 * j0 + px - p.pad_left), j0, j1, 2);
}

// V[t][c][q0 + i] for the tx tiles of one tile row from the four input rows' even/odd columns
// (e[r], o[r]). Plain loops over i: the compiler vectorises them (portable: the AOT runtime
// builds this file for every target). Compiled per tier for AVX-512 instead, they were slower:
// the rows are short (7 to 28 tiles), too short for 16 lanes.
void InputTransformRow(const float* const* e, const float* const* o, int64_t tx, float* v,
                       int64_t t_stride) {
  // Vertical pass (B^T d) on the even and odd halves: rows k0 = d0 - d2, k1 = d1 + d2,
  // k2 = d2 - d1, k3 = d1 - d3; then the horizontal pass on columns X0..X3 of each row.
  constexpr int64_t kChunk = 64;
  float te[4][kChunk + 1], to[4][kChunk + 1];
  for (int64_t i0 = 0; i0 < tx; i0 += kChunk) {
    const int64_t n = std::min(kChunk, tx - i0);
    for (int64_t i = 0; i <= n; ++i) {
      const int64_t j = i0 + i;
      te[0][i] = e[0][j] - e[2][j];
      te[1][i] = e[1][j] + e[2][j];
      te[2][i] = e[2][j] - e[1][j];
      te[3][i] = e[1][j] - e[3][j];
      to[0][i] = o[0][j] - o[2][j];
      to[1][i] = o[1][j] + o[2][j];
      to[2][i] = o[2][j] - o[1][j];
      to[3][i] = o[1][j] - o[3][j];
    }
    for (int k = 0; k < 4; ++k) {
      float* v0 = v + (4 * k + 0) * t_stride + i0;
      float* v1 = v + (4 * k + 1) * t_stride + i0;
      float* v2 = v + (4 * k + 2) * t_stride + i0;
      float* v3 = v + (4 * k + 3) * t_stride + i0;
      const float* ek = te[k];
      const float* ok = to[k];
      for (int64_t i = 0; i < n; ++i) {
        v0[i] = ek[i] - ek[i + 1];
        v1[i] = ok[i] + ek[i + 1];
        v2[i] = ek[i + 1] - ok[i];
        v3[i] = ok[i] - ok[i + 1];
      }
    }
  }
}

// The two output rows (even and odd columns: y0e, y0o, y1e, y1o, tx each) of one tile row from
// M[t][q0 + i] (row t at m + t * t_stride).
void OutputTransformRow(const float* m, int64_t t_stride, int64_t tx, float* y0e, float* y0o,
                        float* y1e, float* y1o) {
  for (int64_t i = 0; i < tx; ++i) {
    float s0[4], s1[4];
    for (int j = 0; j < 4; ++j) {
      const float a0 = m[(0 + j) * t_stride + i], a1 = m[(4 + j) * t_stride + i];
      const float a2 = m[(8 + j) * t_stride + i], a3 = m[(12 + j) * t_stride + i];
      s0[j] = a0 + a1 + a2;
      s1[j] = a1 - a2 - a3;
    }
    y0e[i] = s0[0] + s0[1] + s0[2];
    y0o[i] = s0[1] - s0[2] - s0[3];
    y1e[i] = s1[0] + s1[1] + s1[2];
    y1o[i] = s1[1] - s1[2] - s1[3];
  }
}

// dst[2i] = e[i], dst[2i + 1] = o[i] for 2i (+ 1) < n.
void Interleave(const float* e, const float* o, int64_t n, float* dst) {
  int64_t i = 0;
  for (; 2 * i + 1 < n; ++i) {
    dst[2 * i] = e[i];
    dst[2 * i + 1] = o[i];
  }
  if (2 * i < n) dst[2 * i] = e[i];
}

// Panels of kMR output channels and tiles per GEMM pass, reduction rows per pass.
constexpr int64_t kPanelsPerTask = 8;
constexpr int64_t kTilesPerTask = 8;
constexpr int64_t kReduction = 256;
// Floats of V and M per chunk (about the L2 cache), and tiles per chunk at least (small late
// layers combine images to fill the GEMM tiles).
constexpr int64_t kChunkFloats = 128 * 1024;
constexpr int64_t kMinChunkTiles = 64;
// Floats of M at most (when one panel fits): a task's output channels go through the GEMMs and
// the output transform in blocks this size, so that M, which holds every tap of every channel
// of a block, does not grow with the layer's channels (resnet18's 14x14 layers took 800 KB).
constexpr int64_t kBlockFloats = 48 * 1024;

}  // namespace

bool WinogradEligible(const cuvil_uk_conv_params& p) {
  return p.kernel_h == 3 && p.kernel_w == 3 && p.stride_h == 1 && p.stride_w == 1 &&
         p.dilation_h == 1 && p.dilation_w == 1 && p.groups == 1 && p.out_height >= 1 &&
         p.out_width >= 1 && p.pad_top >= 0 && p.pad_left >= 0;
}

namespace {

// The most tile rows (over all images) a chunk of `rows_total` rows takes: V and M of a chunk take
// about kChunkFloats, but at least kMinChunkTiles tiles so that the GEMM tiles stay full. Never
// decreases as rows_total grows.
int64_t MaxChunkRows(const cuvil_uk_conv_params& p, const Tiling& tl, int64_t rows_total) {
  const int64_t per_row = kTaps * (p.channels + p.out_channels) * tl.tx;
  return std::clamp<int64_t>(
      std::max(kChunkFloats / std::max<int64_t>(per_row, 1), CeilDiv(kMinChunkTiles, tl.tx)), 1,
      rows_total);
}

// Panels of output channels per M block of a chunk with `ld` tile columns (at least one).
int64_t BlockPanels(int64_t ld) {
  return std::max<int64_t>(1, kBlockFloats / (kTaps * kMR * std::max<int64_t>(ld, 1)));
}

// Tile rows per chunk: at most MaxChunkRows, in equal chunks (a short last one would pay a
// parallel hand-off for little work).
int64_t RowsPerChunk(const cuvil_uk_conv_params& p, const Tiling& tl, int64_t rows_total) {
  return CeilDiv(rows_total, CeilDiv(rows_total, MaxChunkRows(p, tl, rows_total)));
}

}  // namespace

int64_t WinogradScratchBytes(const Table& tb, const cuvil_uk_conv_params& p, int64_t batch) {
  const Tiling tl = PlanTiling(p);
  int64_t rows_total = 0;
  if (batch < 1 || __builtin_mul_overflow(batch, tl.ty, &rows_total)) return -1;
  // MaxChunkRows, not RowsPerChunk: the size then never shrinks as the batch grows, so an arena
  // sized for a batch serves every smaller one. ConvWinograd asks exactly these sizes on every
  // thread for every chunk (a narrow last chunk included), so this bounds each thread's blocks.
  const int64_t ld = MaxChunkRows(p, tl, rows_total) * tl.tx;
  ScratchTally s;
  s.AddIndices(p.channels);
  s.AddFloats(kTaps * p.channels * ld);
  // M of one block: at most kBlockFloats, or one panel of the widest chunk when that is more;
  // never more than every channel of the widest chunk.
  s.AddFloats(std::min(kTaps * p.out_channels * ld, std::max(kBlockFloats, kTaps * kMR * ld)));
  // The rows slot serves the input rows, then the output rows: one block of the larger.
  s.AddFloats(std::max(8 * tl.phase_w, 6 * tl.tx + 2));
  return s.bytes();
}

void ConvWinograd(const Table& tb, const cuvil_uk_conv_params& p, const float* x, const float* u,
                  const float* bias, const float* residual, float* y, int64_t batch, float alpha,
                  float beta) {
  const Tiling tl = PlanTiling(p);
  const int64_t c_dim = p.channels, m_dim = p.out_channels;
  const int64_t panels = CeilDiv(m_dim, kMR);
  const int64_t in_plane = p.height * p.width, out_plane = p.out_height * p.out_width;
  const Epilogue base_ep{nullptr, nullptr, p.activation, alpha, beta};
  const int64_t k_block = CeilDiv(c_dim, CeilDiv(c_dim, kReduction));
  const int64_t rows_total = batch * tl.ty;
  // Threads worth using: IntraOpThreads, fewer when the layer is too small to share.
  const int64_t total_cost = kTaps * m_dim * c_dim * rows_total * tl.tx;
  const int64_t threads = std::min<int64_t>(cuvil::IntraOpThreads(),
                                            std::max<int64_t>(1, total_cost / kMinWorkPerThread));
  int64_t rows_per_chunk = RowsPerChunk(p, tl, rows_total);
  int64_t chunks = CeilDiv(rows_total, rows_per_chunk);
  if (threads > 1 && chunks % threads != 0 && chunks < 4 * threads) {
    // Smaller chunks, a multiple of the threads in number, so that each thread takes whole ones
    // (never larger: the scratch is sized for RowsPerChunk).
    rows_per_chunk = CeilDiv(rows_total, CeilDiv(chunks, threads) * threads);
    chunks = CeilDiv(rows_total, rows_per_chunk);
  }

  // Every chunk asks its thread's buffers for the sizes WinogradScratchBytes counts (those of the
  // widest chunk the batch could have), whatever its own width: a buffer then never grows within
  // a call, so a scratch region of that size always holds a thread's blocks.
  const int64_t ld_most = MaxChunkRows(p, tl, rows_total) * tl.tx;
  const size_t v_floats = static_cast<size_t>(kTaps * c_dim * ld_most);
  const size_t m_floats = static_cast<size_t>(
      std::min(kTaps * m_dim * ld_most, std::max(kBlockFloats, kTaps * kMR * ld_most)));
  const size_t rows_floats = static_cast<size_t>(std::max(8 * tl.phase_w, 6 * tl.tx + 2));

  // V[t][c][q] of the chunk starting at tile row r0, for every input channel, in the calling
  // thread's scratch.
  auto transform_input = [&](int64_t r0) {
    const int64_t rows = std::min(rows_per_chunk, rows_total - r0);
    const int64_t ld = rows * tl.tx;  // tile columns of this chunk
    float* v = Scratch(kSlotV, v_floats);
    float* rows_buf = Scratch(kSlotRows, rows_floats);
    for (int64_t row = r0; row < r0 + rows; ++row) {
      const int64_t img = row / tl.ty, ty = row % tl.ty;
      for (int64_t c = 0; c < c_dim; ++c) {
        const float* xc = x + (img * c_dim + c) * in_plane;
        const float* e[4];
        const float* o[4];
        for (int r = 0; r < 4; ++r) {
          const int64_t iy = 2 * ty + r - p.pad_top;
          float* er = rows_buf + (2 * r) * tl.phase_w;
          float* orow = rows_buf + (2 * r + 1) * tl.phase_w;
          PhaseRow(tb, p, tl, xc, iy, 0, er);
          PhaseRow(tb, p, tl, xc, iy, 1, orow);
          e[r] = er;
          o[r] = orow;
        }
        InputTransformRow(e, o, tl.tx, v + c * ld + (row - r0) * tl.tx, c_dim * ld);
      }
    }
  };

  // The GEMMs and the output transform of output channel panels [p_begin, p_end) of the chunk
  // starting at tile row r0, in blocks of BlockPanels, from the V transform_input(r0) left in
  // the calling thread's scratch.
  auto run_block = [&](int64_t r0, int64_t p_begin, int64_t p_end) {
    const int64_t rows = std::min(rows_per_chunk, rows_total - r0);
    const int64_t q_dim = rows * tl.tx;
    const int64_t ld = q_dim;
    int64_t* off = ChannelOffsets(static_cast<size_t>(c_dim));
    for (int64_t c = 0; c < c_dim; ++c) off[c] = c * ld;
    const float* v = Scratch(kSlotV, v_floats);
    float* rows_buf = Scratch(kSlotRows, rows_floats);
    const int64_t block_panels = BlockPanels(ld);
    for (int64_t p0 = p_begin; p0 < p_end; p0 += block_panels) {
      const int64_t p1 = std::min(p_end, p0 + block_panels);
      const int64_t m0 = p0 * kMR, m1 = std::min(m_dim, p1 * kMR), m_count = m1 - m0;
      // M[t][m - m0][q] for this block's output channels.
      // (The most any chunk's block takes: every chunk asks the same, so that a narrow chunk, whose
      // blocks hold more panels, never makes a thread's buffer grow into a second region block.)
      float* mm = Scratch(kSlotM, m_floats);

      // Blocks of tiles outermost, so that a block's V columns stay in L1 across the panels.
      const int64_t n_tiles = CeilDiv(q_dim, tb.nr);
      for (int64_t t = 0; t < kTaps; ++t) {
        const float* vt = v + t * c_dim * ld;
        float* mt = mm + t * m_count * ld;
        for (int64_t tq0 = 0; tq0 < n_tiles; tq0 += kTilesPerTask) {
          const int64_t tq1 = std::min(n_tiles, tq0 + kTilesPerTask);
          for (int64_t pb = p0; pb < p1; pb += kPanelsPerTask) {
            const int64_t pe = std::min(p1, pb + kPanelsPerTask);
            for (int64_t kp = 0; kp < c_dim; kp += k_block) {
              const int64_t kc = std::min(k_block, c_dim - kp);
              for (int64_t tq = tq0; tq < tq1; ++tq) {
                const int64_t q = tq * tb.nr, nr = std::min(tb.nr, q_dim - q);
                for (int64_t pp = pb; pp < pe; ++pp) {
                  const int64_t m = pp * kMR, mr = std::min(kMR, m_dim - m);
                  const float* a = u + ((t * panels + pp) * c_dim + kp) * kMR;
                  tb.gemm_tile(kc, a, vt + q, off + kp, mt + (m - m0) * ld + q, ld, mr, nr, kp > 0,
                               nullptr);
                }
              }
            }
          }
        }
      }

      float* y0e = rows_buf;
      float* y0o = rows_buf + tl.tx;
      float* y1e = rows_buf + 2 * tl.tx;
      float* y1o = rows_buf + 3 * tl.tx;
      float* line = rows_buf + 4 * tl.tx;
      for (int64_t row = r0; row < r0 + rows; ++row) {
        const int64_t img = row / tl.ty, ty = row % tl.ty;
        for (int64_t m = m0; m < m1; ++m) {
          const float b = bias != nullptr ? bias[m] : 0.0f;
          const int64_t out_base = (img * m_dim + m) * out_plane;
          OutputTransformRow(mm + (m - m0) * ld + (row - r0) * tl.tx, m_count * ld, tl.tx, y0e, y0o,
                             y1e, y1o);
          for (int r = 0; r < 2; ++r) {
            const int64_t oy = 2 * ty + r;
            if (oy >= p.out_height) break;
            Interleave(r == 0 ? y0e : y1e, r == 0 ? y0o : y1o, p.out_width, line);
            const int64_t idx = out_base + oy * p.out_width;
            tb.epilogue_row(y + idx, line, p.out_width, b,
                            residual != nullptr ? residual + idx : nullptr, base_ep);
          }
        }
      }
    }
  };

  // Tasks are (chunk, block of output channels), claimed one at a time in chunk-major order; a
  // thread transforms a chunk's input when it takes its first task of that chunk. So no thread
  // ever waits for another, and one that is slow to start or shares its core with another
  // process leaves less work, not an idle partner. A chunk is one block unless there are fewer
  // chunks than threads: on resnet18 at 2 threads, cutting each chunk into 2 or 4 blocks was 2-3%
  // slower (the threads sharing a chunk each transform its input).
  const int64_t m_blocks =
      chunks < threads ? std::min(CeilDiv(panels, kPanelsPerTask), CeilDiv(threads, chunks)) : 1;
  const int64_t tasks = chunks * m_blocks;
  ParallelTasks(tasks, CeilDiv(total_cost, tasks), [&](auto& next) {
    int64_t transformed = -1;  // the chunk whose V this thread holds
    for (int64_t i = next(); i >= 0; i = next()) {
      const int64_t chunk = i / m_blocks, b = i % m_blocks;
      if (chunk != transformed) {
        transform_input(chunk * rows_per_chunk);
        transformed = chunk;
      }
      run_block(chunk * rows_per_chunk, panels * b / m_blocks, panels * (b + 1) / m_blocks);
    }
  });
}

}  // namespace cuvil::uk

extern "C" {

int64_t cuvil_uk_winograd_weights_size(int64_t m, int64_t c) {
  const int64_t panels = (m + CUVIL_UK_MR - 1) / CUVIL_UK_MR;
  int64_t out = 0;
  if (m < 0 || c < 0 || __builtin_mul_overflow(panels, c, &out) ||
      __builtin_mul_overflow(out, CUVIL_UK_MR * cuvil::uk::kTaps, &out)) {
    return -1;
  }
  return out;
}

void cuvil_uk_pack_winograd_weights(const float* w, int64_t m, int64_t c, float* packed) {
  using cuvil::uk::kTaps;
  constexpr int64_t kMr = CUVIL_UK_MR;
  const int64_t panels = (m + kMr - 1) / kMr;
  // U = G g G^T in double with G = [[1, 0, 0], [1/2, 1/2, 1/2], [1/2, -1/2, 1/2], [0, 0, 1]].
  // Rows 0 and 3 of G pick one row, so only the two half-sum rows take arithmetic: half the
  // multiplies of the full product, with the same operations (and so the same bits) where it has
  // any (finite weights; a zero weight's sign may differ).
  auto half_sums = [](double a, double b, double c, double* plus, double* minus) {
    *plus = 0.5 * a + 0.5 * b + 0.5 * c;
    *minus = 0.5 * a - 0.5 * b + 0.5 * c;
  };
  // Panel by panel, channel by channel: each tap's [c][MR] panel is then written front to back
  // (16 sequential streams), every byte once; only the last panel's missing lanes are zeroed.
  for (int64_t pp = 0; pp < panels; ++pp) {
    for (int64_t ci = 0; ci < c; ++ci) {
      float out[kTaps][kMr] = {};
      for (int64_t lane = 0; lane < kMr && pp * kMr + lane < m; ++lane) {
        const float* g = w + ((pp * kMr + lane) * c + ci) * 9;
        double gt[4][3];  // G g
        for (int j = 0; j < 3; ++j) {
          gt[0][j] = g[j];
          half_sums(g[j], g[3 + j], g[6 + j], &gt[1][j], &gt[2][j]);
          gt[3][j] = g[6 + j];
        }
        for (int k = 0; k < 4; ++k) {
          double plus, minus;
          half_sums(gt[k][0], gt[k][1], gt[k][2], &plus, &minus);
          out[4 * k + 0][lane] = static_cast<float>(gt[k][0]);
          out[4 * k + 1][lane] = static_cast<float>(plus);
          out[4 * k + 2][lane] = static_cast<float>(minus);
          out[4 * k + 3][lane] = static_cast<float>(gt[k][2]);
        }
      }
      for (int64_t t = 0; t < kTaps; ++t) {
        std::memcpy(packed + ((t * panels + pp) * c + ci) * kMr, out[t], sizeof out[t]);
      }
    }
  }
}

}  // extern "C"
