// Private: the per-CPU-tier bodies of the microkernels (one table per tier, chosen once).
#ifndef CUVIL_RUNTIME_UKERNELS_UKERNEL_TABLE_H_
#define CUVIL_RUNTIME_UKERNELS_UKERNEL_TABLE_H_

#include <cstdint>
#include <type_traits>
#include <vector>

#include "cuvil/runtime/parallel.h"
#include "cuvil/runtime/ukernels.h"

namespace cuvil::uk {

// The tiers of one kernel family that a CPU can run, best first. A fixed array, so that choosing
// a tier on a library's first call allocates nothing. Thread-compatible value type.
template <typename T>
class TierList {
 public:
  void push_back(const T* t) {
    if (count_ < kMaxTiers) items_[count_++] = t;
  }
  const T* const* begin() const { return items_; }
  const T* const* end() const { return items_ + count_; }
  const T* front() const { return items_[0]; }
  const T* back() const { return items_[count_ - 1]; }
  int size() const { return count_; }

 private:
  static constexpr int kMaxTiers = 4;
  const T* items_[kMaxTiers] = {};
  int count_ = 0;
};

// cuvil_rt_parallel_for over a callable f(begin, end) (the microkernels' lambdas). Reentrant.
template <typename F>
void ParallelFor(int64_t count, int64_t cost, F&& f) {
  cuvil_rt_parallel_for(
      count, cost,
      [](void* ctx, int64_t begin, int64_t end) {
        (*static_cast<std::remove_reference_t<F>*>(ctx))(begin, end);
      },
      &f);
}

// Rows of the GEMM tile (output channels); the packed weight panels have this height on every
// tier. The tile's width (output positions) is per tier: Table::nr.
inline constexpr int64_t kMR = 6;

// What a tile or row adds before storing: bias (one value per row), residual (same layout as the
// destination), then the activation. Thread-compatible (plain data).
struct Epilogue {
  const float* bias;      // indexed by row; may be null
  const float* residual;  // row r at residual + r * ld; may be null
  int64_t activation;     // cuvil_uk_activation
  float alpha, beta;
};

// Sigmoid and SiLU: the activations that need exp (each tier computes it in its own registers).
inline bool IsExpActivation(int64_t activation) {
  return activation == CUVIL_UK_ACT_SIGMOID || activation == CUVIL_UK_ACT_SILU;
}

// The 8-bit sides of a quantized depthwise plane: x and y hold uint8, or int8 when signed.
struct QuantizedPlane {
  bool x_signed;
  float x_scale;
  int32_t x_zero;
  bool y_signed;
  float y_scale;
  int32_t y_zero;
};

// Thread-safe: tables are immutable.
struct Table {
  const char* name;
  int64_t nr;  // widest tile gemm_tile computes
  // c[r][j] (+)= sum_k a[k * kMR + r] * b[off[k] + j] for r < mr <= kMR, j < nr <= Table::nr. With
  // `accumulate` the tile is added to c; with a non-null `ep` the epilogue is applied (bias row 0
  // is ep->bias[0], residual rows ldc apart). Reads of b past nr are masked.
  void (*gemm_tile)(int64_t kc, const float* a, const float* b, const int64_t* off, float* c,
                    int64_t ldc, int64_t mr, int64_t nr, bool accumulate, const Epilogue* ep);
  // dst[i] = act(src[i] + bias + residual[i]) for i < n (residual may be null).
  void (*epilogue_row)(float* dst, const float* src, int64_t n, float bias, const float* residual,
                       const Epilogue& ep);
  // dst[i] = act(bias + sum_t wt[t] * src[off[t] + i] + residual[i]) for i < n.
  void (*depthwise_row)(float* dst, const float* src, const int64_t* off, const float* wt,
                        int64_t taps, int64_t n, float bias, const float* residual,
                        const Epilogue& ep);
  // dst[j] = src[(j - j0) * stride] for j0 <= j < j1, else 0, for j < n (0 <= j0 <= j1 <= n):
  // one row of a zero-padded, stride-phase copy of the input.
  void (*pad_row)(float* dst, int64_t n, const float* src, int64_t j0, int64_t j1, int64_t stride);
  // One depthwise channel read straight from the unpadded input x ([H][W] of p; the weights wt are
  // [KH][KW]): y ([OH][OW]) = act(bias + conv + residual). False, before touching anything, for
  // geometry it does not handle (the driver then pads a copy and uses depthwise_row). May be null.
  bool (*depthwise_plane)(const cuvil_uk_conv_params& p, const float* x, const float* wt,
                          float bias, const float* residual, float* y, const Epilogue& ep);
  // out[i] = (x[i] - zero) * scale for i < n; x holds uint8, or int8 when is_signed.
  void (*dequantize_row)(const void* x, bool is_signed, int64_t n, float scale, int32_t zero,
                         float* out);
  // out[i] = saturate(round_half_even(v[i] / scale) + zero) as uint8, or int8 when is_signed (NaN
  // gives the lowest value).
  void (*quantize_row)(const float* v, int64_t n, float scale, int32_t zero, bool is_signed,
                       void* out);
  // depthwise_plane between 8-bit planes, dequantising x and quantising y in registers with
  // exactly dequantize_row's and quantize_row's arithmetic (no residual). False, before touching
  // anything, for geometry or an activation it does not handle. May be null.
  bool (*qdepthwise_plane)(const cuvil_uk_conv_params& p, const void* x, const float* wt,
                           float bias, void* y, const QuantizedPlane& q, const Epilogue& ep);
  // Floats of per-thread scratch depthwise_plane may take for plane p (an upper bound). Null when
  // it takes none.
  int64_t (*depthwise_plane_scratch_floats)(const cuvil_uk_conv_params& p);
  // dst[i] = a[i] if a[i] is NaN or b[i] <= a[i], else b[i], for i < n (ONNX Max: a NaN in
  // either operand gives NaN). dst may alias a or b.
  void (*max_row)(float* dst, const float* a, const float* b, int64_t n);
  // dst[j] = the max of src[2 j + k] over k < kw (taken in order of k, as max_row does: a NaN
  // tap gives NaN) for j < n, kw >= 1; reads src[0 .. 2 (n - 1) + kw - 1] only. The columns of a
  // stride-2 max pooling row (3x3 stride-2 pools: ResNet, SqueezeNet, GoogLeNet, DenseNet).
  void (*max_stride2_row)(float* dst, const float* src, int64_t n, int64_t kw);
};

const Table& GenericTable();
// The portable pad_row (memset/memcpy), shared by the tiers that have no faster one.
void PadRowPortable(float* dst, int64_t n, const float* src, int64_t j0, int64_t j1,
                    int64_t stride);
// The portable max_row, shared by the tiers that have no faster one.
void MaxRowPortable(float* dst, const float* a, const float* b, int64_t n);
// The portable max_stride2_row, shared by the tiers that have no faster one.
void MaxStride2RowPortable(float* dst, const float* src, int64_t n, int64_t kw);
// Null when the file was built without AVX2 support.
const Table* Avx2Table();
// Null when the file was built without AVX-512 (F, BW, DQ, VL) support.
const Table* Avx512Table();

// The tiers this CPU can run, best first (always ends with the generic one).
TierList<Table> SupportedTables();

// The table cuvil_uk_conv2d uses: the best supported tier, or a lower one named by the
// CUVIL_UK_TIER environment variable (avx512, avx2 or generic). Chosen once per process.
const Table& ActiveTable();

// cuvil_uk_conv2d on a given table (tests compare the tiers with it). Reentrant.
void Conv2d(const Table& t, const cuvil_uk_conv_params& p, const float* x, const float* w,
            const float* bias, const float* residual, float* y, int64_t batch, float alpha,
            float beta);
// cuvil_uk_qdepthwise2d on a given table (tests compare the tiers with it). Reentrant.
void QDepthwise2d(const Table& t, const cuvil_uk_conv_params& p, const void* x, bool x_signed,
                  float x_scale, int32_t x_zero, const float* w, const float* bias, void* y,
                  bool y_signed, float y_scale, int32_t y_zero, int64_t batch, float alpha,
                  float beta);

// The quantized GEMM tile (qgemm.cc). Thread-safe: tables are immutable.
struct QTable {
  const char* name;
  int64_t nr;  // widest tile (output positions)
  // c[r * ldc + j] = sum_kk sum_t a[(kk * CUVIL_UK_QMR + r) * 4 + t] * b[(kk * ldb + j) * 4 + t]
  // for r < CUVIL_UK_QMR and j < nr: a holds kq quads of one packed int8 weight panel, b uint8
  // activations in quads (ldb quads per k-quad row). nr is a multiple of 16 up to QTable::nr; b
  // must hold nr columns.
  void (*tile)(int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, int32_t* c, int64_t ldc,
               int64_t nr);
  // The epilogue of n accumulators of one output channel (cuvil_uk_qconv2d's formula), into y and
  // reading residual, both offset to the row's first element; the same values on every tier.
  void (*store)(const cuvil_uk_qconv_params& p, const int32_t* acc, int64_t n, int32_t comp,
                float mult, float bias, const float* residual, void* y, float lo, float hi);
  // Optional (null: tile, then store per row): both in one, the epilogue applied to the
  // accumulators in registers, for the tile's n <= nr leading columns of each of its `rows`
  // channels (see QEpilogue for where they go). Writes exactly what tile + store would.
  void (*tile_store)(int64_t kq, const int8_t* a, const uint8_t* b, int64_t ldb, int64_t nr,
                     int64_t n, int64_t rows, const struct QEpilogue& e);
  // Optional (null: a scalar loop): dst[i] = src[2 i] ^ flip for i < n, reading no byte past
  // src[2 (n - 1)]; the stride-2 im2col rows (a ResNet stem's) spend most of their time here.
  void (*gather_even)(const uint8_t* src, int64_t n, uint8_t flip, uint8_t* dst);
};

// Where tile_store's results go. Row r is channel r of the panel (comp, mult and bias start at
// the panel's first channel). Column q of the block (the tile's columns are q0, q0 + 1, ...) is
// output position (q / wr) * ow + q % wr of the block, written only when q % wr < ow (columns
// past a row's end belong to the padded copy); position i of row r is y + r * channel_stride + i
// elements (residual likewise).
struct QEpilogue {
  const cuvil_uk_qconv_params* params;
  const int32_t* comp;
  const float* mult;
  const float* bias;
  const float* residual;  // Null, or at the block's first output of row 0.
  void* y;                // The block's first output of row 0.
  int64_t channel_stride;
  int64_t q0, wr, ow;
  float lo, hi;
};

const QTable& QGenericTable();
// Null when this build has no such tier (not x86-64).
const QTable* QAvx2Table();
const QTable* QVnniTable();
// The quantized tiers this CPU can run, best first (always ends with the generic one).
TierList<QTable> SupportedQTables();
// The tier cuvil_uk_qconv2d uses: the best supported one, limited by CUVIL_UK_TIER as
// ActiveTable is (avx2: no VNNI; generic: generic). Chosen once per process.
const QTable& ActiveQTable();
// cuvil_uk_qconv2d on a given table (tests compare the tiers with it). Reentrant.
void QConv2d(const QTable& t, const cuvil_uk_qconv_params& p, const void* x, const int8_t* w,
             const int32_t* comp, const float* mult, const float* bias, const float* residual,
             void* y, int64_t batch, float lo, float hi);

// One call of a quantized matrix product tier (qmatmul.cc): rows [0, rows) (at most 8) of x
// against the weight panels [panel_begin, panel_end), into y; x and y start at the block's first
// row, w, comp, mult and bias at column 0. Plain data; thread-compatible.
struct QMatMulBlock {
  const cuvil_uk_qmatmul_params* params;
  const uint8_t* x;
  const int8_t* w;
  const int32_t* comp;
  const float* mult;
  const float* bias;
  void* y;
  int64_t rows, panel_begin, panel_end;
  float lo, hi;
};

// The quantized matrix product tiers. Thread-safe: tables are immutable.
struct QMatMulTable {
  const char* name;
  void (*block)(const QMatMulBlock& b);  // The same values on every tier.
};

const QMatMulTable& QMatMulGenericTable();
// Null when this build has no such tier (not x86-64).
const QMatMulTable* QMatMulAvx2Table();
const QMatMulTable* QMatMulVnniTable();
// The tiers this CPU can run (those of SupportedQTables), best first, ending with the generic one.
TierList<QMatMulTable> SupportedQMatMulTables();
// The tier cuvil_uk_qmatmul uses: the one named as ActiveQTable(). Chosen once per process.
const QMatMulTable& ActiveQMatMulTable();
// cuvil_uk_qmatmul on a given table (tests compare the tiers with it). Reentrant.
void QMatMul(const QMatMulTable& t, const cuvil_uk_qmatmul_params& p, const void* x,
             const int8_t* w, const int32_t* comp, const float* mult, const float* bias, void* y,
             int64_t rows, float lo, float hi);

// The 4-bit block-quantized products of one column group (matmul_nbits.cc). Thread-safe: tables
// are immutable.
struct NbitsTable {
  const char* name;
  // out[r][j] = sum_b (scale[b][j] * sum_{k < block} a[r * lda + b * block + k] * q(k, j) +
  //                    offset[b][j] * sums[r * blocks + b])
  // for r < rows <= kNbitsRows and j < 16, where q(k, j) is nibble k % 2 of
  // q4[(b * block + k) / 2 * 16 + j] (one packed group, cuvil_uk_nbits_pack), scale and offset
  // the group's [blocks][16] values and sums the block sums of `a`.
  void (*group)(const float* a, int64_t lda, int64_t rows, const uint8_t* q4, const float* scale,
                const float* offset, const float* sums, int64_t blocks, int64_t block, float* out);
};
// Rows of `a` one NbitsTable::group call reads together (each widened weight serves them all).
inline constexpr int64_t kNbitsRows = 4;

const NbitsTable& NbitsGenericTable();
// Null when this build has no such tier (not x86-64).
const NbitsTable* NbitsAvx2Table();
const NbitsTable* NbitsAvx512Table();
// The 4-bit tiers this CPU can run, best first (always ends with the generic one).
TierList<NbitsTable> SupportedNbitsTables();
// The tier cuvil_uk_matmul_nbits uses: the best supported one, limited by CUVIL_UK_TIER as
// ActiveTable is. Chosen once per process.
const NbitsTable& ActiveNbitsTable();
// cuvil_uk_matmul_nbits on a given table (tests compare the tiers with it). Reentrant.
void MatMulNbits(const NbitsTable& t, const float* a, int64_t rows, int64_t k_dim,
                 const uint8_t* q4_packed, const float* scale_packed, const float* offset_packed,
                 const float* bias, int64_t n_dim, int64_t block, float* y);

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_UKERNEL_TABLE_H_
