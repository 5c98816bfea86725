// Code generation for LSTM, GRU and RNN (canonical form: see ops/shape_recurrent.cc).
//
// Per direction: the input projection X·W^T + bias of every time step is one product over all
// seq*batch rows (split across the intra-op threads), then a run-time loop over the time steps
// does the small product H·R^T and the gate arithmetic, whose per-row inner loops are branch-free
// so they vectorise (fast sigmoid/tanh). Rows past their sequence_lens keep their state and leave
// Y zero; the reverse direction walks each row from its own last valid step.
#include <algorithm>

#include "codegen/kernel_context.h"
#include "cuvil/format/compiled_model.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

constexpr DType kF32 = DType::kFloat32;

// Output columns per pass of a product: one block of every row stays in L1 while each row of
// the right operand is streamed once.
constexpr int64_t kColumnBlock = 256;

// One activation function with its resolved alpha/beta.
struct Activation {
  std::string name;
  float alpha = 0;
  float beta = 0;
};

// What every time step needs, fixed for one direction.
struct Direction {
  int index = 0;
  bool reverse = false;
  std::vector<Activation> acts;  // f, g (, h) for this direction.
};

llvm::Value* SplatLike(KernelContext& k, llvm::Value* like, float v) {
  llvm::Value* c = k.F32(v);
  if (auto* vt = llvm::dyn_cast<llvm::VectorType>(like->getType())) {
    return k.b().CreateVectorSplat(vt->getElementCount(), c);
  }
  return c;
}

// Applies `a` to the float32 value `v` (spec formulas; select-based so loops vectorise, except
// Softplus, which needs a logarithm).
llvm::Value* Activate(KernelContext& k, const Activation& a, llvm::Value* v) {
  auto& b = k.b();
  auto c = [&](float x) { return SplatLike(k, v, x); };
  const std::string& n = a.name;
  if (n == "Sigmoid") return k.FastSigmoid(v);
  if (n == "Tanh") return k.FastTanh(v);
  if (n == "Relu") return b.CreateSelect(b.CreateFCmpOGT(v, c(0)), v, c(0));
  if (n == "Affine") return b.CreateFAdd(b.CreateFMul(c(a.alpha), v), c(a.beta));
  if (n == "LeakyRelu") {
    return b.CreateSelect(b.CreateFCmpOGE(v, c(0)), v, b.CreateFMul(c(a.alpha), v));
  }
  if (n == "ThresholdedRelu") return b.CreateSelect(b.CreateFCmpOGE(v, c(a.alpha)), v, c(0));
  if (n == "ScaledTanh") return b.CreateFMul(c(a.alpha), k.FastTanh(b.CreateFMul(c(a.beta), v)));
  if (n == "HardSigmoid") {
    llvm::Value* x = b.CreateFAdd(b.CreateFMul(c(a.alpha), v), c(a.beta));
    x = b.CreateSelect(b.CreateFCmpOLT(x, c(0)), c(0), x);
    return b.CreateSelect(b.CreateFCmpOGT(x, c(1)), c(1), x);
  }
  if (n == "Elu") {
    llvm::Value* neg = b.CreateFMul(c(a.alpha), b.CreateFSub(k.FastExp(v), c(1)));
    return b.CreateSelect(b.CreateFCmpOGE(v, c(0)), v, neg);
  }
  if (n == "Softsign") {
    llvm::Value* abs = k.Intrinsic(llvm::Intrinsic::fabs, v);
    return b.CreateFDiv(v, b.CreateFAdd(c(1), abs));
  }
  // Softplus: log(1 + e^x), which equals x to float precision above 20 (and e^x overflows
  // later).
  llvm::Value* soft = k.Intrinsic(llvm::Intrinsic::log, b.CreateFAdd(c(1), k.FastExp(v)));
  return b.CreateSelect(b.CreateFCmpOGT(v, c(20)), v, soft);
}

// out[r, c] += sum_kk a[r * a_stride + kk] * bt[kk * bt_stride + c] for r in [r0, r1) and
// c in [c0, c1). Loop order column block, kk, r, c: the innermost loop runs over contiguous
// columns of both `out` and `bt`, so it vectorises (independent FMAs across columns).
void EmitAccumulate(KernelContext& k, llvm::Value* a, llvm::Value* a_stride, llvm::Value* r0,
                    llvm::Value* r1, int64_t k_dim, llvm::Value* bt, int64_t bt_stride,
                    llvm::Value* out, int64_t out_stride, llvm::Value* c0, llvm::Value* c1) {
  auto& b = k.b();
  llvm::Value* blocks =
      b.CreateUDiv(b.CreateAdd(b.CreateSub(c1, c0), k.I64(kColumnBlock - 1)), k.I64(kColumnBlock));
  k.For(k.I64(0), blocks, [&](llvm::Value* blk) {
    llvm::Value* cb = b.CreateAdd(c0, b.CreateMul(blk, k.I64(kColumnBlock)));
    llvm::Value* ce = k.Min(DType::kInt64, b.CreateAdd(cb, k.I64(kColumnBlock)), c1);
    k.For(k.I64(0), k.I64(k_dim), [&](llvm::Value* kk) {
      llvm::Value* bt_row = b.CreateMul(kk, k.I64(bt_stride));
      k.For(r0, r1, [&](llvm::Value* r) {
        llvm::Value* av = k.Load(kF32, a, b.CreateAdd(b.CreateMul(r, a_stride), kk));
        llvm::Value* out_row = b.CreateMul(r, k.I64(out_stride));
        k.For(cb, ce, [&](llvm::Value* col) {
          llvm::Value* bv = k.Load(kF32, bt, b.CreateAdd(bt_row, col));
          llvm::Value* o = b.CreateAdd(out_row, col);
          k.Store(kF32, out, o,
                  b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {k.F32Ty()},
                                    {av, bv, k.Load(kF32, out, o)}));
        });
      });
    });
  });
}

// Register tile: kTileRows (or 1) rows x kTileCols columns accumulate in vector registers over
// the whole K loop; the weights are read straight from the row-major [K, ldb] transposed
// matrix (16 contiguous floats per kk), so no packing is needed.
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileCols = 16;
// Rows whose A block (rows x K) stays in L2 while every column panel of the weights passes over
// it; each panel (K x 16 floats) stays in L1 across the block's row tiles.
constexpr int64_t kRowChunk = 64;

// out[m + r, col + c] = init + sum_kk a[(m + r) * lda + kk] * bt[kk * ldb + col + c] for
// r < rows, c < 16; init is bias[col + c], or 0 when `bias` is null.
void EmitTile(KernelContext& k, int rows, llvm::Value* a, llvm::Value* lda, llvm::Value* m,
              int64_t k_dim, llvm::Value* bt, int64_t ldb, llvm::Value* col, llvm::Value* out,
              int64_t ldo, llvm::Value* bias) {
  auto& b = k.b();
  auto* vec = llvm::FixedVectorType::get(k.F32Ty(), 8);
  auto load_vec = [&](llvm::Value* base, llvm::Value* idx) {
    return b.CreateAlignedLoad(vec, k.ElemPtr(kF32, base, idx), llvm::Align(4));
  };
  std::vector<llvm::Value*> acc;
  for (int i = 0; i < rows * 2; ++i) {
    acc.push_back(k.Scratch(vec));
    llvm::Value* init = llvm::Constant::getNullValue(vec);
    if (bias != nullptr) init = load_vec(bias, b.CreateAdd(col, k.I64(8 * (i % 2))));
    b.CreateStore(init, acc.back());
  }
  std::vector<llvm::Value*> a_rows;
  for (int r = 0; r < rows; ++r) a_rows.push_back(b.CreateMul(b.CreateAdd(m, k.I64(r)), lda));
  k.For(k.I64(0), k.I64(k_dim), [&](llvm::Value* kk) {
    llvm::Value* base = b.CreateAdd(b.CreateMul(kk, k.I64(ldb)), col);
    llvm::Value* b0 = load_vec(bt, base);
    llvm::Value* b1 = load_vec(bt, b.CreateAdd(base, k.I64(8)));
    for (int r = 0; r < rows; ++r) {
      llvm::Value* av = b.CreateVectorSplat(8, k.Load(kF32, a, b.CreateAdd(a_rows[r], kk)));
      for (int j = 0; j < 2; ++j) {
        llvm::Value* cur = b.CreateLoad(vec, acc[r * 2 + j]);
        b.CreateStore(b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vec}, {av, j ? b1 : b0, cur}),
                      acc[r * 2 + j]);
      }
    }
  });
  for (int r = 0; r < rows; ++r) {
    llvm::Value* row = b.CreateAdd(b.CreateMul(b.CreateAdd(m, k.I64(r)), k.I64(ldo)), col);
    for (int j = 0; j < 2; ++j) {
      b.CreateAlignedStore(b.CreateLoad(vec, acc[r * 2 + j]),
                           k.ElemPtr(kF32, out, b.CreateAdd(row, k.I64(8 * j))), llvm::Align(4));
    }
  }
}

// out[r, c] = init + sum_kk a[r * lda + kk] * bt[kk * ldb + c] for r in [m0, m1) and c in
// [c0, c1) (init: bias[c] or 0). Whole 16-column panels use register tiles, the rest
// EmitAccumulate.
void EmitProduct(KernelContext& k, llvm::Value* a, llvm::Value* lda, llvm::Value* m0,
                 llvm::Value* m1, int64_t k_dim, llvm::Value* bt, int64_t ldb, llvm::Value* out,
                 int64_t ldo, llvm::Value* c0, llvm::Value* c1, llvm::Value* bias) {
  auto& b = k.b();
  // Columns [from, c1) of rows [m0, m1) through EmitAccumulate, after their init.
  auto accumulate = [&](llvm::Value* from) {
    k.For(m0, m1, [&](llvm::Value* r) {
      llvm::Value* row = b.CreateMul(r, k.I64(ldo));
      k.For(from, c1, [&](llvm::Value* c) {
        llvm::Value* init = bias != nullptr ? k.Load(kF32, bias, c) : k.F32(0);
        k.Store(kF32, out, b.CreateAdd(row, c), init);
      });
    });
    EmitAccumulate(k, a, lda, m0, m1, k_dim, bt, ldb, out, ldo, from, c1);
  };
  llvm::Value* panels = b.CreateUDiv(b.CreateSub(c1, c0), k.I64(kTileCols));
  auto tiles = [&] {
    llvm::Value* chunks =
        b.CreateUDiv(b.CreateAdd(b.CreateSub(m1, m0), k.I64(kRowChunk - 1)), k.I64(kRowChunk));
    k.For(k.I64(0), chunks, [&](llvm::Value* ch) {
      llvm::Value* cs = b.CreateAdd(m0, b.CreateMul(ch, k.I64(kRowChunk)));
      llvm::Value* ce = k.Min(DType::kInt64, b.CreateAdd(cs, k.I64(kRowChunk)), m1);
      llvm::Value* full = b.CreateUDiv(b.CreateSub(ce, cs), k.I64(kTileRows));
      llvm::Value* rest = b.CreateAdd(cs, b.CreateMul(full, k.I64(kTileRows)));
      k.For(k.I64(0), panels, [&](llvm::Value* p) {
        llvm::Value* col = b.CreateAdd(c0, b.CreateMul(p, k.I64(kTileCols)));
        k.For(k.I64(0), full, [&](llvm::Value* t) {
          llvm::Value* m = b.CreateAdd(cs, b.CreateMul(t, k.I64(kTileRows)));
          EmitTile(k, kTileRows, a, lda, m, k_dim, bt, ldb, col, out, ldo, bias);
        });
        k.For(rest, ce, [&](llvm::Value* m) {
          EmitTile(k, 1, a, lda, m, k_dim, bt, ldb, col, out, ldo, bias);
        });
      });
    });
    llvm::Value* tail = b.CreateAdd(c0, b.CreateMul(panels, k.I64(kTileCols)));
    k.If(b.CreateICmpSLT(tail, c1), [&] { accumulate(tail); });
  };
  // A one-row tile is a chain of dependent FMAs; below a full tile of rows (or a panel of
  // columns) the streaming loop, with independent FMAs across columns, is faster.
  llvm::Value* small = b.CreateOr(b.CreateICmpSLT(b.CreateSub(m1, m0), k.I64(kTileRows)),
                                  b.CreateICmpEQ(panels, k.I64(0)));
  k.If(small, [&] { accumulate(c0); }, tiles);
}

// The per-step product out[:, :cols] = a[rows, K] x bt[K, :cols], its column panels split
// across the intra-op threads (the weights dominate; every thread streams its own share).
void EmitStepProduct(KernelContext& k, llvm::Value* a, llvm::Value* rows, int64_t k_dim,
                     llvm::Value* bt, int64_t ldb, llvm::Value* out, int64_t ldo, int64_t cols) {
  int64_t units = (cols + kTileCols - 1) / kTileCols;
  llvm::Value* cost = k.b().CreateMul(rows, k.I64(k_dim * kTileCols));
  k.ParallelFor(k.I64(units), cost, {a, rows, bt, out},
                [=](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
                  auto& ob = o.b();
                  llvm::Value* c0 = ob.CreateMul(begin, o.I64(kTileCols));
                  llvm::Value* c1 =
                      o.Min(DType::kInt64, ob.CreateMul(end, o.I64(kTileCols)), o.I64(cols));
                  EmitProduct(o, v[0], o.I64(k_dim), o.I64(0), v[1], k_dim, v[2], ldb, v[3], ldo,
                              c0, c1, nullptr);
                });
}

// dst[c * rows + r] = src[r * cols + c]: one direction's W or R as [cols, rows].
void EmitTranspose(KernelContext& k, llvm::Value* src, llvm::Value* dst, int64_t rows,
                   int64_t cols) {
  auto& b = k.b();
  k.For(k.I64(0), k.I64(rows), [&](llvm::Value* r) {
    k.For(k.I64(0), k.I64(cols), [&](llvm::Value* c) {
      llvm::Value* v = k.Load(kF32, src, b.CreateAdd(b.CreateMul(r, k.I64(cols)), c));
      k.Store(kF32, dst, b.CreateAdd(b.CreateMul(c, k.I64(rows)), r), v);
    });
  });
}

class RecurrentEmitter {
 public:
  explicit RecurrentEmitter(KernelContext& k) : k_(k), b_(k.b()) {}

  absl::Status Emit();

 private:
  llvm::Value* I64(int64_t v) { return k_.I64(v); }
  // Clips a gate's pre-activation when the node has `clip`.
  llvm::Value* Clip(llvm::Value* v);
  // Element index of (n, j) in a state tensor (initial_h/c, Y_h, Y_c) of direction d.
  llvm::Value* StateIndex(int d, llvm::Value* n, llvm::Value* j);
  // Element index of (t, n, j) of direction d in Y.
  llvm::Value* YIndex(int d, llvm::Value* t, llvm::Value* n, llvm::Value* j);
  // Row of the projection (X's row order) holding time t of batch row n.
  llvm::Value* ProjRow(llvm::Value* t, llvm::Value* n);
  // The valid length of batch row n (seq when sequence_lens is absent).
  llvm::Value* Length(llvm::Value* n);

  void EmitDirection(const Direction& dir);
  // The gate arithmetic of one active row n at time t (state already holds step t-1).
  void EmitRnnRow(const Direction& dir, llvm::Value* n, llvm::Value* t);
  void EmitLstmRow(const Direction& dir, llvm::Value* n, llvm::Value* t);
  // GRU runs in two passes around the product (r ⊙ H)·Rh^T unless linear_before_reset.
  void EmitGruResetPass(const Direction& dir, llvm::Value* n, llvm::Value* t);
  void EmitGruRow(const Direction& dir, llvm::Value* n, llvm::Value* t);
  llvm::Value* Gate(llvm::Value* proj_row, llvm::Value* n, int gate, llvm::Value* j);

  KernelContext& k_;
  llvm::IRBuilder<>& b_;
  std::string op_;
  int gates_ = 1;
  int64_t hidden_ = 0, input_ = 0, gh_ = 0, dirs_ = 1;
  int layout_ = 0;
  bool has_clip_ = false, input_forget_ = false, linear_before_reset_ = false;
  float clip_ = 0;
  llvm::Value* seq_ = nullptr;
  llvm::Value* batch_ = nullptr;
  // Scratch: the projection [seq*batch, G*H]; transposed W and R of one direction; the combined
  // bias [G*H]; the state h (and c) [batch, H]; the per-step product [batch, G*H]; GRU's
  // r ⊙ H_{t-1} [batch, H] and its product with Rh^T [batch, H].
  llvm::Value* proj_ = nullptr;
  llvm::Value* wt_ = nullptr;
  llvm::Value* rt_ = nullptr;
  llvm::Value* bias_ = nullptr;
  llvm::Value* rbh_ = nullptr;  // GRU linear_before_reset: Rbh, applied inside r ⊙ (...).
  llvm::Value* h_ = nullptr;
  llvm::Value* c_ = nullptr;
  llvm::Value* rec_ = nullptr;
  llvm::Value* reset_h_ = nullptr;
  llvm::Value* rec_h_ = nullptr;
};

llvm::Value* RecurrentEmitter::Clip(llvm::Value* v) {
  if (!has_clip_) return v;
  v = b_.CreateSelect(b_.CreateFCmpOLT(v, k_.F32(-clip_)), k_.F32(-clip_), v);
  return b_.CreateSelect(b_.CreateFCmpOGT(v, k_.F32(clip_)), k_.F32(clip_), v);
}

llvm::Value* RecurrentEmitter::StateIndex(int d, llvm::Value* n, llvm::Value* j) {
  llvm::Value* row = layout_ == 0 ? b_.CreateAdd(b_.CreateMul(I64(d), batch_), n)
                                  : b_.CreateAdd(b_.CreateMul(n, I64(dirs_)), I64(d));
  return b_.CreateAdd(b_.CreateMul(row, I64(hidden_)), j);
}

llvm::Value* RecurrentEmitter::YIndex(int d, llvm::Value* t, llvm::Value* n, llvm::Value* j) {
  llvm::Value* row =
      layout_ == 0
          ? b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(t, I64(dirs_)), I64(d)), batch_), n)
          : b_.CreateAdd(b_.CreateMul(b_.CreateAdd(b_.CreateMul(n, seq_), t), I64(dirs_)), I64(d));
  return b_.CreateAdd(b_.CreateMul(row, I64(hidden_)), j);
}

llvm::Value* RecurrentEmitter::ProjRow(llvm::Value* t, llvm::Value* n) {
  return layout_ == 0 ? b_.CreateAdd(b_.CreateMul(t, batch_), n)
                      : b_.CreateAdd(b_.CreateMul(n, seq_), t);
}

llvm::Value* RecurrentEmitter::Length(llvm::Value* n) {
  if (!k_.has_input(4)) return seq_;
  DType d = k_.in_dtype(4);
  llvm::Value* len = k_.Convert(k_.Load(d, k_.in(4), n), d, DType::kInt64);
  // Out-of-range lengths fail the kernel (checked up front); clamping keeps the accesses in
  // bounds meanwhile.
  len = k_.Max(DType::kInt64, len, I64(0));
  return k_.Min(DType::kInt64, len, seq_);
}

// Pre-activation of gate `gate` at column j: projection (with bias) + recurrent product.
llvm::Value* RecurrentEmitter::Gate(llvm::Value* proj_row, llvm::Value* n, int gate,
                                    llvm::Value* j) {
  llvm::Value* col = b_.CreateAdd(I64(gate * hidden_), j);
  llvm::Value* p = k_.Load(kF32, proj_, b_.CreateAdd(b_.CreateMul(proj_row, I64(gh_)), col));
  llvm::Value* r = k_.Load(kF32, rec_, b_.CreateAdd(b_.CreateMul(n, I64(gh_)), col));
  return b_.CreateFAdd(p, r);
}

void RecurrentEmitter::EmitRnnRow(const Direction& dir, llvm::Value* n, llvm::Value* t) {
  llvm::Value* prow = ProjRow(t, n);
  k_.For(I64(0), I64(hidden_), [&](llvm::Value* j) {
    llvm::Value* h = Activate(k_, dir.acts[0], Clip(Gate(prow, n, 0, j)));
    k_.Store(kF32, h_, b_.CreateAdd(b_.CreateMul(n, I64(hidden_)), j), h);
    if (k_.has_output(0)) k_.Store(kF32, k_.out(0), YIndex(dir.index, t, n, j), h);
  });
}

void RecurrentEmitter::EmitLstmRow(const Direction& dir, llvm::Value* n, llvm::Value* t) {
  llvm::Value* prow = ProjRow(t, n);
  llvm::Value* p_base = k_.has_input(7) ? I64(dir.index * 3 * hidden_) : nullptr;
  auto peephole = [&](int which, llvm::Value* j, llvm::Value* state) -> llvm::Value* {
    if (p_base == nullptr) return k_.F32(0);
    llvm::Value* p =
        k_.Load(kF32, k_.in(7), b_.CreateAdd(p_base, b_.CreateAdd(I64(which * hidden_), j)));
    return b_.CreateFMul(p, state);
  };
  k_.For(I64(0), I64(hidden_), [&](llvm::Value* j) {
    llvm::Value* s = b_.CreateAdd(b_.CreateMul(n, I64(hidden_)), j);
    llvm::Value* c_prev = k_.Load(kF32, c_, s);
    // Gate blocks are i, o, f, c; peepholes i, o, f.
    llvm::Value* i =
        Activate(k_, dir.acts[0], Clip(b_.CreateFAdd(Gate(prow, n, 0, j), peephole(0, j, c_prev))));
    llvm::Value* f;
    if (input_forget_) {
      f = b_.CreateFSub(k_.F32(1), i);
    } else {
      f = Activate(k_, dir.acts[0],
                   Clip(b_.CreateFAdd(Gate(prow, n, 2, j), peephole(2, j, c_prev))));
    }
    llvm::Value* g = Activate(k_, dir.acts[1], Clip(Gate(prow, n, 3, j)));
    llvm::Value* c = b_.CreateFAdd(b_.CreateFMul(f, c_prev), b_.CreateFMul(i, g));
    llvm::Value* o =
        Activate(k_, dir.acts[0], Clip(b_.CreateFAdd(Gate(prow, n, 1, j), peephole(1, j, c))));
    llvm::Value* h = b_.CreateFMul(o, Activate(k_, dir.acts[2], c));
    k_.Store(kF32, c_, s, c);
    k_.Store(kF32, h_, s, h);
    if (k_.has_output(0)) k_.Store(kF32, k_.out(0), YIndex(dir.index, t, n, j), h);
  });
}

void RecurrentEmitter::EmitGruResetPass(const Direction& dir, llvm::Value* n, llvm::Value* t) {
  llvm::Value* prow = ProjRow(t, n);
  k_.For(I64(0), I64(hidden_), [&](llvm::Value* j) {
    llvm::Value* s = b_.CreateAdd(b_.CreateMul(n, I64(hidden_)), j);
    llvm::Value* r = Activate(k_, dir.acts[0], Clip(Gate(prow, n, 1, j)));
    k_.Store(kF32, reset_h_, s, b_.CreateFMul(r, k_.Load(kF32, h_, s)));
  });
}

void RecurrentEmitter::EmitGruRow(const Direction& dir, llvm::Value* n, llvm::Value* t) {
  llvm::Value* prow = ProjRow(t, n);
  k_.For(I64(0), I64(hidden_), [&](llvm::Value* j) {
    llvm::Value* s = b_.CreateAdd(b_.CreateMul(n, I64(hidden_)), j);
    llvm::Value* h_prev = k_.Load(kF32, h_, s);
    llvm::Value* z = Activate(k_, dir.acts[0], Clip(Gate(prow, n, 0, j)));
    llvm::Value* xh = k_.Load(
        kF32, proj_, b_.CreateAdd(b_.CreateMul(prow, I64(gh_)), b_.CreateAdd(I64(2 * hidden_), j)));
    llvm::Value* pre;
    if (linear_before_reset_) {
      // r ⊙ (H_{t-1}·Rh^T + Rbh): the product covers all three blocks.
      llvm::Value* r = Activate(k_, dir.acts[0], Clip(Gate(prow, n, 1, j)));
      llvm::Value* hr = k_.Load(
          kF32, rec_, b_.CreateAdd(b_.CreateMul(n, I64(gh_)), b_.CreateAdd(I64(2 * hidden_), j)));
      if (rbh_ != nullptr) hr = b_.CreateFAdd(hr, k_.Load(kF32, rbh_, j));
      pre = b_.CreateFAdd(xh, b_.CreateFMul(r, hr));
    } else {
      pre = b_.CreateFAdd(xh, k_.Load(kF32, rec_h_, s));
    }
    llvm::Value* hh = Activate(k_, dir.acts[1], Clip(pre));
    // (1 - z) ⊙ hh + z ⊙ H_{t-1}
    llvm::Value* h = b_.CreateFAdd(hh, b_.CreateFMul(z, b_.CreateFSub(h_prev, hh)));
    k_.Store(kF32, h_, s, h);
    if (k_.has_output(0)) k_.Store(kF32, k_.out(0), YIndex(dir.index, t, n, j), h);
  });
}

void RecurrentEmitter::EmitDirection(const Direction& dir) {
  int d = dir.index;
  // This direction's transposed weights: folded at compile time for constants, else here.
  if (k_.node().has_attr(attr::kWTransposed)) {
    wt_ = k_.ElemPtr(kF32, k_.in(1), I64(d * input_ * gh_));
  } else {
    EmitTranspose(k_, k_.ElemPtr(kF32, k_.in(1), I64(d * gh_ * input_)), wt_, gh_, input_);
  }
  if (k_.node().has_attr(attr::kRTransposed)) {
    rt_ = k_.ElemPtr(kF32, k_.in(2), I64(d * hidden_ * gh_));
  } else {
    EmitTranspose(k_, k_.ElemPtr(kF32, k_.in(2), I64(d * gh_ * hidden_)), rt_, gh_, hidden_);
  }

  // Combined bias Wb + Rb, except GRU's Rbh under linear_before_reset (applied inside r ⊙ ...).
  bool split_rbh = op_ == "GRU" && linear_before_reset_;
  rbh_ = nullptr;
  if (k_.has_input(3)) {
    llvm::Value* wb = k_.ElemPtr(kF32, k_.in(3), I64(d * 2 * gh_));
    llvm::Value* rb = k_.ElemPtr(kF32, k_.in(3), I64(d * 2 * gh_ + gh_));
    k_.For(I64(0), I64(gh_), [&](llvm::Value* g) {
      llvm::Value* v = k_.Load(kF32, wb, g);
      llvm::Value* with_r = b_.CreateFAdd(v, k_.Load(kF32, rb, g));
      if (split_rbh) with_r = b_.CreateSelect(b_.CreateICmpSGE(g, I64(2 * hidden_)), v, with_r);
      k_.Store(kF32, bias_, g, with_r);
    });
    if (split_rbh) rbh_ = k_.ElemPtr(kF32, rb, I64(2 * hidden_));
  } else {
    k_.Memset0(bias_, I64(gh_), kF32);
  }

  // Input projection of every (time, batch) row, in X's row order, split across threads.
  llvm::Value* rows = b_.CreateMul(seq_, batch_);
  k_.ParallelFor(rows, I64(input_ * gh_), {k_.in(0), wt_, bias_, proj_},
                 [this](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
                   EmitProduct(o, v[0], o.I64(input_), begin, end, input_, v[1], gh_, v[3], gh_,
                               o.I64(0), o.I64(gh_), v[2]);
                 });

  // Initial state.
  k_.For(I64(0), batch_, [&](llvm::Value* n) {
    k_.For(I64(0), I64(hidden_), [&](llvm::Value* j) {
      llvm::Value* s = b_.CreateAdd(b_.CreateMul(n, I64(hidden_)), j);
      llvm::Value* src = StateIndex(d, n, j);
      k_.Store(kF32, h_, s, k_.has_input(5) ? k_.Load(kF32, k_.in(5), src) : k_.F32(0));
      if (op_ == "LSTM") {
        k_.Store(kF32, c_, s, k_.has_input(6) ? k_.Load(kF32, k_.in(6), src) : k_.F32(0));
      }
    });
  });

  // GRU without linear_before_reset multiplies Rh by r ⊙ H, so the first product stops at z, r.
  int64_t rec_cols = op_ == "GRU" && !linear_before_reset_ ? 2 * hidden_ : gh_;
  // Time index of step s for row n: s forward, len-1-s in reverse (active only while s < len).
  auto for_active_rows = [&](llvm::Value* s,
                             const std::function<void(llvm::Value*, llvm::Value*)>& body) {
    k_.For(I64(0), batch_, [&](llvm::Value* n) {
      llvm::Value* len = Length(n);
      k_.If(b_.CreateICmpSLT(s, len), [&] {
        llvm::Value* t = dir.reverse ? b_.CreateSub(b_.CreateSub(len, I64(1)), s) : s;
        body(n, t);
      });
    });
  };
  k_.For(I64(0), seq_, [&](llvm::Value* s) {
    EmitStepProduct(k_, h_, batch_, hidden_, rt_, gh_, rec_, gh_, rec_cols);
    if (op_ == "RNN") {
      for_active_rows(s, [&](llvm::Value* n, llvm::Value* t) { EmitRnnRow(dir, n, t); });
    } else if (op_ == "LSTM") {
      for_active_rows(s, [&](llvm::Value* n, llvm::Value* t) { EmitLstmRow(dir, n, t); });
    } else {
      if (!linear_before_reset_) {
        for_active_rows(s, [&](llvm::Value* n, llvm::Value* t) { EmitGruResetPass(dir, n, t); });
        EmitStepProduct(k_, reset_h_, batch_, hidden_, k_.ElemPtr(kF32, rt_, I64(2 * hidden_)), gh_,
                        rec_h_, hidden_, hidden_);
      }
      for_active_rows(s, [&](llvm::Value* n, llvm::Value* t) { EmitGruRow(dir, n, t); });
    }
  });

  // Final states: rows stopped at their last valid step; a row of length 0 gets zeros, not its
  // initial state (as ONNX Runtime does).
  k_.For(I64(0), batch_, [&](llvm::Value* n) {
    llvm::Value* empty = b_.CreateICmpEQ(Length(n), I64(0));
    k_.For(I64(0), I64(hidden_), [&](llvm::Value* j) {
      llvm::Value* s = b_.CreateAdd(b_.CreateMul(n, I64(hidden_)), j);
      llvm::Value* dst = StateIndex(d, n, j);
      auto final_value = [&](llvm::Value* state) {
        return b_.CreateSelect(empty, k_.F32(0), k_.Load(kF32, state, s));
      };
      if (k_.has_output(1)) k_.Store(kF32, k_.out(1), dst, final_value(h_));
      if (k_.has_output(2) && op_ == "LSTM") k_.Store(kF32, k_.out(2), dst, final_value(c_));
    });
  });
}

absl::Status RecurrentEmitter::Emit() {
  const ir::Node& node = k_.node();
  op_ = node.op_type;
  gates_ = op_ == "LSTM" ? 4 : op_ == "GRU" ? 3 : 1;
  hidden_ = node.attr_int("hidden_size", 0);
  gh_ = gates_ * hidden_;
  layout_ = static_cast<int>(node.attr_int("layout", 0));
  std::string direction = node.attr_string("direction", "forward");
  dirs_ = direction == "bidirectional" ? 2 : 1;
  input_ = k_.in_shape(0)[2].coef();
  has_clip_ = node.has_attr("clip");
  clip_ = node.attr_float("clip", 0);
  input_forget_ = node.attr_int("input_forget", 0) != 0;
  linear_before_reset_ = node.attr_int("linear_before_reset", 0) != 0;
  auto names_it = node.attrs.find("rnn_activations");
  if (hidden_ <= 0 || names_it == node.attrs.end()) {
    return k_.Error("recurrent op was not canonicalised by shape inference");
  }
  const auto& names = std::get<std::vector<std::string>>(names_it->second);
  std::vector<float> alphas = node.attr_floats("rnn_alpha"), betas = node.attr_floats("rnn_beta");
  size_t per_dir = names.size() / dirs_;
  if (alphas.size() != names.size() || betas.size() != names.size()) {
    return k_.Error("activation parameters do not match the activations");
  }
  const SymShape& x = k_.in_shape(0);
  seq_ = k_.Dim(layout_ == 0 ? x[0] : x[1]);
  batch_ = k_.Dim(layout_ == 0 ? x[1] : x[0]);

  // sequence_lens outside [0, seq] is the request's error.
  if (k_.has_input(4)) {
    DType d = k_.in_dtype(4);
    k_.For(I64(0), batch_, [&](llvm::Value* n) {
      llvm::Value* len = k_.Convert(k_.Load(d, k_.in(4), n), d, DType::kInt64);
      k_.FailIf(b_.CreateOr(b_.CreateICmpSLT(len, I64(0)), b_.CreateICmpSGT(len, seq_)),
                kEntryIndexOutOfBounds);
    });
  }

  // One heap block for all scratch (sizes scale with batch and seq).
  llvm::Value* state = b_.CreateMul(batch_, I64(hidden_));
  llvm::Value* wide = b_.CreateMul(batch_, I64(gh_));
  std::vector<llvm::Value*> sizes = {
      b_.CreateMul(b_.CreateMul(seq_, batch_), I64(gh_)),  // proj
      I64(input_ * gh_),                                   // wt
      I64(hidden_ * gh_),                                  // rt
      I64(gh_),                                            // bias
      state,                                               // h
      state,                                               // c
      wide,                                                // rec
      state,                                               // reset_h
      state,                                               // rec_h
  };
  // Each piece starts on a 64-byte boundary.
  std::vector<llvm::Value*> offsets;
  llvm::Value* total = I64(0);
  for (llvm::Value* n : sizes) {
    offsets.push_back(total);
    llvm::Value* rounded = b_.CreateAnd(b_.CreateAdd(n, I64(15)), I64(~int64_t{15}));
    total = b_.CreateAdd(total, rounded);
  }
  // The same pieces in dims (4 bytes per float, up to 15 floats of rounding each).
  const SymDim seq_dim = layout_ == 0 ? x[0] : x[1], batch_dim = layout_ == 0 ? x[1] : x[0];
  const std::vector<SymDim> bound = {
      SymMul(SymMul(seq_dim, batch_dim), SymDim::Const(4 * gh_)),
      SymDim::Const(4 * (input_ * gh_ + hidden_ * gh_ + gh_ + 15 * int64_t{9})),
      SymMul(batch_dim, SymDim::Const(4 * (4 * hidden_ + gh_)))};
  llvm::Value* block = k_.AllocHeap(b_.CreateMul(total, I64(4)), bound);
  std::vector<llvm::Value*> ptrs;
  for (llvm::Value* off : offsets) ptrs.push_back(k_.ElemPtr(kF32, block, off));
  proj_ = ptrs[0], wt_ = ptrs[1], rt_ = ptrs[2], bias_ = ptrs[3], h_ = ptrs[4], c_ = ptrs[5];
  rec_ = ptrs[6], reset_h_ = ptrs[7], rec_h_ = ptrs[8];
  // GRU's r ⊙ H of rows already past their length is never written, yet it feeds the product.
  k_.Memset0(reset_h_, state, kF32);

  // Positions past a row's length stay zero in Y.
  if (k_.has_output(0)) k_.Memset0(k_.out(0), k_.NumElements(k_.out_shape(0)), kF32);
  for (int d = 0; d < dirs_; ++d) {
    Direction dir;
    dir.index = d;
    dir.reverse = direction == "reverse" || d == 1;
    for (size_t a = 0; a < per_dir; ++a) {
      size_t i = d * per_dir + a;
      dir.acts.push_back({names[i], alphas[i], betas[i]});
    }
    EmitDirection(dir);
  }
  k_.FreeHeap(block);
  return absl::OkStatus();
}

absl::Status EmitRecurrent(KernelContext& k) { return RecurrentEmitter(k).Emit(); }

}  // namespace

void RegisterRecurrentKernels(OpTable& r) {
  r.DefineEmitter("LSTM", EmitRecurrent);
  r.DefineEmitter("GRU", EmitRecurrent);
  r.DefineEmitter("RNN", EmitRecurrent);
}

}  // namespace cuvil::codegen
