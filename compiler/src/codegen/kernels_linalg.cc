// Code generation for Gemm and MatMul: a row-streaming loop nest whose innermost loop runs over
// contiguous output and B columns, so LLVM vectorises it with FMA.
#include "codegen/kernel_context.h"
#include "codegen/lower.h"
#include "internal_attrs.h"

namespace cuvil::codegen {
namespace {

struct MatrixView {
  llvm::Value* base;
  llvm::Value* offset;      // Element offset of this matrix.
  llvm::Value* row_stride;  // Elements between consecutive rows.
  llvm::Value* col_stride;  // Elements between consecutive columns.
};

// Columns of the output handled per pass: a block of every output row (32 rows x 256 floats =
// 32 KiB) stays in L1 while each row of B is streamed from memory exactly once.
constexpr int64_t kColumnBlock = 256;

// out[m, n] = sum_k a[m, k] * b[k, n] for one matrix; out rows are contiguous with stride n_dim.
// Loop order n-block, k, m, n: B is read once per call however many rows M has, so a batched
// execution of a weight-bound layer costs little more than a batch of one.
void EmitMatrixProduct(KernelContext& k, DType d, const MatrixView& a, const MatrixView& b,
                       llvm::Value* out, llvm::Value* out_offset, llvm::Value* m_dim,
                       llvm::Value* n_dim, llvm::Value* k_dim) {
  auto& bl = k.b();
  k.Memset0(k.ElemPtr(d, out, out_offset), bl.CreateMul(m_dim, n_dim), d);
  llvm::Value* blocks =
      bl.CreateUDiv(bl.CreateAdd(n_dim, k.I64(kColumnBlock - 1)), k.I64(kColumnBlock));
  k.For(k.I64(0), blocks, [&](llvm::Value* block) {
    llvm::Value* n_begin = bl.CreateMul(block, k.I64(kColumnBlock));
    llvm::Value* n_end = k.Min(DType::kInt64, bl.CreateAdd(n_begin, k.I64(kColumnBlock)), n_dim);
    k.For(k.I64(0), k_dim, [&](llvm::Value* kk) {
      llvm::Value* b_row = bl.CreateAdd(b.offset, bl.CreateMul(kk, b.row_stride));
      k.For(k.I64(0), m_dim, [&](llvm::Value* m) {
        llvm::Value* a_idx = bl.CreateAdd(
            a.offset, bl.CreateAdd(bl.CreateMul(m, a.row_stride), bl.CreateMul(kk, a.col_stride)));
        llvm::Value* av = k.Load(d, a.base, a_idx);
        llvm::Value* row = bl.CreateAdd(out_offset, bl.CreateMul(m, n_dim));
        k.For(n_begin, n_end, [&](llvm::Value* n) {
          llvm::Value* bv = k.Load(d, b.base, bl.CreateAdd(b_row, bl.CreateMul(n, b.col_stride)));
          llvm::Value* o = bl.CreateAdd(row, n);
          k.Store(d, out, o, k.Add(d, k.Load(d, out, o), k.Mul(d, av, bv)));
        });
      });
    });
  });
}

// Register-blocked product with a panel-packed B (see shape_linalg.cc): for each panel of two
// target-width vectors of columns and each block of rows, rows x 2 vector accumulators stay in
// registers over the whole K loop, B is streamed sequentially once per panel (L1/L2-resident for
// the other row blocks) and every output element is written once.
//
// Tile shape per target: it has to keep at least 2 FMA units x 4 cycles latency = 8 independent
// accumulators in flight and leave registers for the two B vectors and a broadcast of A.
//   AVX2     16 ymm: 16-column panels x 6 rows = 12 accumulators.
//   AVX-512  32 zmm: 32-column panels x 12 rows = 24 accumulators; 2 B loads and 12 broadcasts
//            feed 24 FMAs, within the two loads per cycle the core sustains.
// Thread-compatible value type.
struct TileShape {
  int lanes;  // floats per vector; a panel is 2 vectors wide
  int rows;   // rows per full register block

  int64_t panel() const { return 2 * lanes; }
};

// The tile for packed panels `panel` columns wide (two vectors of panel / 2 lanes): 12 rows for
// AVX-512's 32 registers, 6 below (AVX2; NEON and WebAssembly SIMD at 4 lanes; scalar floats at
// 1 lane, 12 accumulators in a Cortex-M7's 32 single-precision registers).
TileShape TileFor(int64_t panel) {
  if (panel >= 32) return {16, 12};
  return {static_cast<int>(std::max<int64_t>(panel / 2, 1)), 6};
}

// Parallel cost units of the packed product: one vector FMA (`lanes` multiply-adds), about half a
// cycle. Counting scalar multiply-adds would make a ~2 us AVX-512 product look worth a thread
// hand-off, which costs ~20 us here (mlp at batch 8 ran slower on 2 threads than on 1).
//
// Rows of FMAs that streaming one packed weight panel costs about as much as (see
// EmitPackedProduct).
constexpr int64_t kStreamRows = 8;

// The panel width that constant packing (shape_linalg.cc) and run-time packing use on this target.
int64_t TargetPanel() { return 2 * TargetVectorBits() / 32; }

// What the tile applies to its accumulators before storing them (see fuse_patterns.h).
// Thread-compatible value type.
struct Epilogue {
  llvm::Value* bias = nullptr;  // float32, zero padded to whole panels; indexed by column
  std::string activation;       // "", attr::kEpilogueRelu or attr::kEpilogueGelu
};

Epilogue EpilogueOf(KernelContext& k) {
  Epilogue e;
  if (k.node().has_attr(attr::kFusedBias)) e.bias = k.in(2);
  e.activation = k.node().attr_string(attr::kFusedActivation, "");
  return e;
}

llvm::Value* ApplyEpilogue(KernelContext& k, const Epilogue& e, llvm::Value* v,
                           llvm::Value* bias_col) {
  auto& b = k.b();
  if (e.bias != nullptr) {
    v = b.CreateFAdd(v,
                     b.CreateAlignedLoad(v->getType(), k.ElemPtr(DType::kFloat32, e.bias, bias_col),
                                         llvm::Align(4)));
  }
  if (e.activation == attr::kEpilogueRelu) {
    llvm::Value* zero = llvm::Constant::getNullValue(v->getType());
    v = b.CreateSelect(b.CreateFCmpOLT(v, zero), zero, v);
  } else if (e.activation == attr::kEpilogueGelu) {
    v = k.FastGelu(v);
  }
  return v;
}

// The module's function computing one register block (created on first use, shared by every
// kernel): void tile(ptr a, i64 lda, ptr panel, i64 k_dim, ptr acc) stores
// acc[2r + j] = sum_k a[r * lda + k] * panel[k][j * lanes .. (j + 1) * lanes) for r < rows.
// A function of its own keeps the K loop's register allocation free of whatever the calling
// kernel keeps live (epilogue constants, loop bounds), which otherwise spills accumulators.
// With few rows the K loop is split over several accumulator sets (k, k+1, ... summed at the end)
// so that a short tile still has enough independent FMA chains to cover their latency.
llvm::Function* TileFunction(KernelContext& k, int lanes, int rows) {
  std::string name = "cuvil_tile_" + std::to_string(lanes) + "x" + std::to_string(rows) +
                     (BatchInvariantKernels() ? "_invariant" : "");
  if (llvm::Function* f = k.module().getFunction(name)) return f;
  llvm::LLVMContext& c = k.llvm_context();
  llvm::Type* ptr = llvm::PointerType::getUnqual(c);
  llvm::Type* i64 = llvm::Type::getInt64Ty(c);
  auto* fn_ty = llvm::FunctionType::get(llvm::Type::getVoidTy(c), {ptr, i64, ptr, i64, ptr}, false);
  llvm::Function* fn =
      llvm::Function::Create(fn_ty, llvm::Function::InternalLinkage, name, &k.module());
  fn->copyAttributesFrom(k.function());
  fn->addFnAttr(llvm::Attribute::NoInline);
  KernelContext t(k.module(), fn, k.node(), KernelContext::Outlined{});
  auto& b = t.b();
  llvm::Value *a = fn->getArg(0), *lda = fn->getArg(1), *panel = fn->getArg(2),
              *k_dim = fn->getArg(3), *out = fn->getArg(4);
  auto* vec = llvm::FixedVectorType::get(b.getFloatTy(), lanes);
  const int chains = rows * 2;
  // Few-row tiles split K into 2 or 4 interleaved partial sums to hide the FMA latency; that
  // makes a row's rounding depend on the tile the batch puts it in, so batch-invariant kernels
  // sum K in one chain in every tile.
  const int sets = BatchInvariantKernels() || chains >= 8 ? 1 : 8 / chains;  // 1, 2 or 4
  std::vector<llvm::Value*> acc;
  for (int i = 0; i < chains * sets; ++i) {
    acc.push_back(t.Scratch(vec));
    b.CreateStore(llvm::Constant::getNullValue(vec), acc.back());
  }
  std::vector<llvm::Value*> a_rows;
  for (int r = 0; r < rows; ++r)
    a_rows.push_back(t.ElemPtr(DType::kFloat32, a, b.CreateMul(t.I64(r), lda)));
  auto step = [&](llvm::Value* kk, int set) {
    llvm::Value* base = b.CreateMul(kk, t.I64(2 * lanes));
    llvm::Value* bv[2];
    for (int j = 0; j < 2; ++j) {
      bv[j] = b.CreateAlignedLoad(
          vec, t.ElemPtr(DType::kFloat32, panel, b.CreateAdd(base, t.I64(j * lanes))),
          llvm::Align(4));
    }
    for (int r = 0; r < rows; ++r) {
      llvm::Value* av = b.CreateVectorSplat(lanes, t.Load(DType::kFloat32, a_rows[r], kk));
      for (int j = 0; j < 2; ++j) {
        llvm::Value* slot = acc[set * chains + r * 2 + j];
        llvm::Value* next = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vec},
                                              {av, bv[j], b.CreateLoad(vec, slot)});
        b.CreateStore(next, slot);
      }
    }
  };
  llvm::Value* k_main = t.I64(0);
  if (sets > 1) {
    llvm::Value* groups = b.CreateUDiv(k_dim, t.I64(sets));
    k_main = b.CreateMul(groups, t.I64(sets));
    t.ForNoUnroll(t.I64(0), groups, [&](llvm::Value* i) {
      for (int s = 0; s < sets; ++s) step(b.CreateAdd(b.CreateMul(i, t.I64(sets)), t.I64(s)), s);
    });
  }
  t.ForNoUnroll(k_main, k_dim, [&](llvm::Value* kk) { step(kk, 0); });
  for (int i = 0; i < chains; ++i) {
    llvm::Value* v = b.CreateLoad(vec, acc[i]);
    for (int s = 1; s < sets; ++s) v = b.CreateFAdd(v, b.CreateLoad(vec, acc[s * chains + i]));
    b.CreateAlignedStore(v, b.CreateConstInBoundsGEP1_64(vec, out, i), llvm::Align(4));
  }
  b.CreateRetVoid();
  return fn;
}

// out[m0 .. m0 + rows, out_col .. out_col + n_valid) = A rows x one packed panel (+ epilogue).
void EmitPackedTile(KernelContext& k, const TileShape& t, int rows, llvm::Value* a,
                    llvm::Value* lda, llvm::Value* m0, llvm::Value* panel, llvm::Value* k_dim,
                    llvm::Value* out, llvm::Value* out_col, llvm::Value* n_dim,
                    llvm::Value* n_valid, const Epilogue& epi) {
  auto& b = k.b();
  const int lanes = t.lanes;
  const int64_t width = t.panel();
  auto* vec = llvm::FixedVectorType::get(b.getFloatTy(), lanes);
  llvm::Value* acc = k.Scratch(vec, rows * 2);
  b.CreateCall(TileFunction(k, lanes, rows),
               {k.ElemPtr(DType::kFloat32, a, b.CreateMul(m0, lda)), lda, panel, k_dim, acc});
  // Partial panel (N not a multiple of the panel): lanes at or past n_valid are not stored.
  llvm::Value* full = b.CreateICmpEQ(n_valid, k.I64(width));
  llvm::Value* valid32 = b.CreateTrunc(n_valid, b.getInt32Ty());
  for (int r = 0; r < rows; ++r) {
    llvm::Value* row = b.CreateAdd(b.CreateMul(b.CreateAdd(m0, k.I64(r)), n_dim), out_col);
    llvm::Value* v[2];
    for (int j = 0; j < 2; ++j) {
      v[j] = b.CreateAlignedLoad(vec, b.CreateConstInBoundsGEP1_64(vec, acc, r * 2 + j),
                                 llvm::Align(4));
      v[j] = ApplyEpilogue(k, epi, v[j], b.CreateAdd(out_col, k.I64(j * lanes)));
    }
    k.If(
        full,
        [&] {
          for (int j = 0; j < 2; ++j) {
            b.CreateAlignedStore(
                v[j], k.ElemPtr(DType::kFloat32, out, b.CreateAdd(row, k.I64(j * lanes))),
                llvm::Align(4));
          }
        },
        [&] {
          for (int j = 0; j < 2; ++j) {
            std::vector<llvm::Constant*> lane_ids;
            for (int l = 0; l < lanes; ++l) lane_ids.push_back(b.getInt32(j * lanes + l));
            llvm::Value* mask = b.CreateICmpSLT(llvm::ConstantVector::get(lane_ids),
                                                b.CreateVectorSplat(lanes, valid32));
            b.CreateMaskedStore(v[j],
                                k.ElemPtr(DType::kFloat32, out, b.CreateAdd(row, k.I64(j * lanes))),
                                llvm::Align(4), mask);
          }
        });
  }
}

// Every row of [0, m_dim) times one panel: full register blocks, then the remainder (fewer rows
// than a block) as at most one tile each of 8, 4, 2 and 1 rows (its binary digits).
void EmitPanelRows(KernelContext& k, const TileShape& t, llvm::Value* a, llvm::Value* lda,
                   llvm::Value* panel, llvm::Value* col, llvm::Value* out, llvm::Value* m_dim,
                   llvm::Value* n_dim, llvm::Value* k_dim, const Epilogue& epi) {
  auto& b = k.b();
  llvm::Value* n_valid = k.Min(DType::kInt64, k.I64(t.panel()), b.CreateSub(n_dim, col));
  llvm::Value* blocks = b.CreateUDiv(m_dim, k.I64(t.rows));
  k.For(k.I64(0), blocks, [&](llvm::Value* mb) {
    EmitPackedTile(k, t, t.rows, a, lda, b.CreateMul(mb, k.I64(t.rows)), panel, k_dim, out, col,
                   n_dim, n_valid, epi);
  });
  llvm::Value* done = b.CreateMul(blocks, k.I64(t.rows));
  llvm::Value* rest = b.CreateSub(m_dim, done);
  int64_t above = 0;  // Bits of `rest` covered by the larger tiles already emitted.
  for (int size = 8; size >= 1; size /= 2) {
    if (size >= t.rows) continue;
    llvm::Value* m0 = b.CreateAdd(done, b.CreateAnd(rest, k.I64(above)));
    k.If(b.CreateICmpNE(b.CreateAnd(rest, k.I64(size)), k.I64(0)), [&] {
      EmitPackedTile(k, t, size, a, lda, m0, panel, k_dim, out, col, n_dim, n_valid, epi);
    });
    above |= size;
  }
}

// out[M, N] = a[M, K] (rows `lda` apart, contiguous columns) x B packed in panels of
// `panel_width` columns. Column panels are independent: with `parallel` they are split across the
// execution's intra-op threads.
void EmitPackedProduct(KernelContext& k, int64_t panel_width, llvm::Value* a, llvm::Value* lda,
                       llvm::Value* packed, llvm::Value* out, llvm::Value* m_dim,
                       llvm::Value* n_dim, llvm::Value* k_dim, const Epilogue& epilogue = {},
                       bool parallel = true) {
  auto& b = k.b();
  const TileShape t = TileFor(panel_width);
  const int64_t width = t.panel();
  llvm::Value* panels = b.CreateUDiv(b.CreateAdd(n_dim, k.I64(width - 1)), k.I64(width));
  auto body = [t, width](KernelContext& o, llvm::Value* a, llvm::Value* lda, llvm::Value* packed,
                         llvm::Value* out, llvm::Value* m_dim, llvm::Value* n_dim,
                         llvm::Value* k_dim, const Epilogue& epi, llvm::Value* begin,
                         llvm::Value* end) {
    auto& ob = o.b();
    o.For(begin, end, [&](llvm::Value* p) {
      llvm::Value* panel =
          o.ElemPtr(DType::kFloat32, packed, ob.CreateMul(p, ob.CreateMul(k_dim, o.I64(width))));
      EmitPanelRows(o, t, a, lda, panel, ob.CreateMul(p, o.I64(width)), out, m_dim, n_dim, k_dim,
                    epi);
    });
  };
  if (!parallel) {
    body(k, a, lda, packed, out, m_dim, n_dim, k_dim, epilogue, k.I64(0), panels);
    return;
  }
  // Cost in vector FMAs (see TargetPanel), what the hand-off threshold is weighed against. A
  // panel also streams its k_dim x width weights, which costs about as much as eight rows of
  // FMAs: a few-row product (a classifier at batch 1) is bound by that read, which two cores
  // share out faster than one.
  llvm::Value* rows =
      b.CreateSelect(b.CreateICmpSLT(m_dim, k.I64(kStreamRows)), k.I64(kStreamRows), m_dim);
  llvm::Value* panel_cost = b.CreateMul(b.CreateMul(rows, k_dim), k.I64(width / t.lanes));
  std::vector<llvm::Value*> captures = {a, lda, packed, out, m_dim, n_dim, k_dim};
  if (epilogue.bias != nullptr) captures.push_back(epilogue.bias);
  std::string activation = epilogue.activation;
  k.ParallelFor(
      panels, panel_cost, captures,
      [activation, body](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
        Epilogue epi{v.size() > 7 ? v[7] : nullptr, activation};
        body(o, v[0], v[1], v[2], v[3], v[4], v[5], v[6], epi, begin, end);
      });
}

absl::Status Gemm(KernelContext& k) {
  DType d = k.out_dtype(0);
  const ir::Node& node = k.node();
  bool trans_a = node.attr_int("transA", 0) != 0;
  bool trans_b = node.attr_int("transB", 0) != 0;
  double alpha = node.attr_float("alpha", 1.0f), beta = node.attr_float("beta", 1.0f);
  Idx a_dims = k.Dims(k.in_shape(0));
  llvm::Value* m_dim = trans_a ? a_dims[1] : a_dims[0];
  llvm::Value* k_dim = trans_a ? a_dims[0] : a_dims[1];
  llvm::Value* n_dim;
  if (node.has_attr(attr::kPackedN)) {
    n_dim = k.I64(node.attr_int(attr::kPackedN, 0));
    EmitPackedProduct(k, node.attr_int(attr::kPackedPanel, 16), k.in(0), k_dim, k.in(1), k.out(0),
                      m_dim, n_dim, k_dim, EpilogueOf(k));
    // A fused bias (alpha 1, no C of its own) is complete; an unfused C is added below.
    if (node.has_attr(attr::kFusedBias)) return absl::OkStatus();
  } else {
    Idx b_dims = k.Dims(k.in_shape(1));
    n_dim = trans_b ? b_dims[0] : b_dims[1];
    llvm::Value* one = k.I64(1);
    MatrixView a{k.in(0), k.I64(0), trans_a ? one : a_dims[1], trans_a ? a_dims[1] : one};
    MatrixView b{k.in(1), k.I64(0), trans_b ? one : b_dims[1], trans_b ? b_dims[1] : one};
    EmitMatrixProduct(k, d, a, b, k.out(0), k.I64(0), m_dim, n_dim, k_dim);
  }
  bool has_c = k.has_input(2) && beta != 0;
  if (alpha == 1.0 && !has_c) return absl::OkStatus();
  const SymShape& out_shape = k.out_shape(0);
  Idx c_strides = has_c ? k.BroadcastStrides(k.in_shape(2), out_shape) : Idx{};
  auto& bl = k.b();
  k.ForNest(k.Dims(out_shape), [&](const Idx& idx) {
    llvm::Value* o = bl.CreateAdd(bl.CreateMul(idx[0], n_dim), idx[1]);
    llvm::Value* v = k.Load(d, k.out(0), o);
    if (alpha != 1.0) v = k.Mul(d, v, k.Const(d, alpha));
    if (has_c) {
      llvm::Value* cv = k.Load(d, k.in(2), k.Offset(idx, c_strides));
      if (beta != 1.0) cv = k.Mul(d, cv, k.Const(d, beta));
      v = k.Add(d, v, cv);
    }
    k.Store(d, k.out(0), o, v);
  });
  return absl::OkStatus();
}

absl::Status MatMul(KernelContext& k) {
  DType d = k.out_dtype(0);
  if (k.node().has_attr(attr::kPackedN)) {
    // B is a packed constant matrix: every leading dim of A folds into M.
    llvm::Value* k_dim = k.I64(k.node().attr_int(attr::kPackedK, 0));
    llvm::Value* m_dim = k.b().CreateUDiv(k.NumElements(k.in_shape(0)), k_dim);
    EmitPackedProduct(k, k.node().attr_int(attr::kPackedPanel, 16), k.in(0), k_dim, k.in(1),
                      k.out(0), m_dim, k.I64(k.node().attr_int(attr::kPackedN, 0)), k_dim,
                      EpilogueOf(k));
    return absl::OkStatus();
  }
  SymShape a = k.in_shape(0), b = k.in_shape(1);
  if (a.size() == 1) a.insert(a.begin(), SymDim::Const(1));
  if (b.size() == 1) b.push_back(SymDim::Const(1));
  SymShape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  SymShape out_batch = a_batch.size() >= b_batch.size() ? a_batch : b_batch;
  for (size_t i = 0; i < out_batch.size(); ++i) {
    // Broadcast: a 1 in either operand takes the other's extent.
    size_t ai = i + a_batch.size() - out_batch.size(), bi = i + b_batch.size() - out_batch.size();
    if (i >= out_batch.size() - a_batch.size() && !(a_batch[ai] == SymDim::Const(1)))
      out_batch[i] = a_batch[ai];
    if (i >= out_batch.size() - b_batch.size() && !(b_batch[bi] == SymDim::Const(1)))
      out_batch[i] = b_batch[bi];
  }
  llvm::Value* m_dim = k.Dim(a[a.size() - 2]);
  llvm::Value* k_dim = k.Dim(a.back());
  llvm::Value* n_dim = k.Dim(b.back());
  auto& bl = k.b();
  llvm::Value* a_mat = bl.CreateMul(m_dim, k_dim);
  llvm::Value* b_mat = bl.CreateMul(k_dim, n_dim);
  llvm::Value* o_mat = bl.CreateMul(m_dim, n_dim);
  Idx a_strides = k.BroadcastStrides(a_batch, out_batch);
  Idx b_strides = k.BroadcastStrides(b_batch, out_batch);
  Idx o_strides = k.Strides(out_batch);
  const SymDim& m_sym = a[a.size() - 2];
  bool pack_at_run_time = d == DType::kFloat32 && k.in_shape(0).size() >= 2 &&
                          k.in_shape(1).size() >= 2 && !(m_sym.IsStatic() && m_sym.coef() < 4);
  if (pack_at_run_time) {
    // Neither operand is a packed constant (attention's Q K^T and P V): pack each B matrix into
    // panels in a scratch buffer and reuse the register-blocked tile. Packing reads B once; the
    // tile then reads it M / rows times from L1/L2 instead of streaming the output.
    const int64_t width = TargetPanel();
    llvm::Value* panels = bl.CreateUDiv(bl.CreateAdd(n_dim, k.I64(width - 1)), k.I64(width));
    llvm::Value* packed_elems = bl.CreateMul(bl.CreateMul(panels, k_dim), k.I64(width));
    // At most 4 * (n + width - 1) * k bytes.
    const std::vector<SymDim> packed_bound = {SymMul(SymMul(b.back(), a.back()), SymDim::Const(4)),
                                              SymMul(a.back(), SymDim::Const(4 * (width - 1)))};
    // Packs matrix `idx` of the batch and multiplies it; `packed` is zeroed once so the padding
    // columns of the last panel stay zero for every matrix.
    auto one_matrix = [&, width](KernelContext& o, llvm::Value* a_in, llvm::Value* b_in,
                                 llvm::Value* out, llvm::Value* packed, llvm::Value* m_dim,
                                 llvm::Value* n_dim, llvm::Value* k_dim, llvm::Value* panels,
                                 const Idx& idx, const Idx& a_strides, const Idx& b_strides,
                                 const Idx& o_strides, bool parallel) {
      auto& ob = o.b();
      llvm::Value* b_off = ob.CreateMul(o.Offset(idx, b_strides), ob.CreateMul(k_dim, n_dim));
      o.For(o.I64(0), panels, [&](llvm::Value* p) {
        llvm::Value* col0 = ob.CreateMul(p, o.I64(width));
        llvm::Value* valid = o.Min(DType::kInt64, o.I64(width), ob.CreateSub(n_dim, col0));
        o.For(o.I64(0), k_dim, [&](llvm::Value* kk) {
          llvm::Value* src = ob.CreateAdd(b_off, ob.CreateAdd(ob.CreateMul(kk, n_dim), col0));
          llvm::Value* dst = ob.CreateMul(ob.CreateAdd(ob.CreateMul(p, k_dim), kk), o.I64(width));
          o.For(o.I64(0), valid, [&](llvm::Value* j) {
            o.Store(d, packed, ob.CreateAdd(dst, j), o.Load(d, b_in, ob.CreateAdd(src, j)));
          });
        });
      });
      llvm::Value* a_ptr =
          o.ElemPtr(d, a_in, ob.CreateMul(o.Offset(idx, a_strides), ob.CreateMul(m_dim, k_dim)));
      llvm::Value* o_ptr =
          o.ElemPtr(d, out, ob.CreateMul(o.Offset(idx, o_strides), ob.CreateMul(m_dim, n_dim)));
      EmitPackedProduct(o, width, a_ptr, k_dim, packed, o_ptr, m_dim, n_dim, k_dim, {}, parallel);
    };
    bool several = false;
    for (const SymDim& dim : out_batch) several |= !(dim == SymDim::Const(1));
    if (!several) {
      // One matrix: its column panels are what the threads split.
      llvm::Value* packed = k.AllocHeap(bl.CreateMul(packed_elems, k.I64(4)), packed_bound);
      k.Memset0(packed, packed_elems, d);
      Idx zeros(out_batch.size(), k.I64(0));
      one_matrix(k, k.in(0), k.in(1), k.out(0), packed, m_dim, n_dim, k_dim, panels, zeros,
                 a_strides, b_strides, o_strides, /*parallel=*/true);
      k.FreeHeap(packed);
      return absl::OkStatus();
    }
    // Several matrices (heads x batch): threads take whole matrices, each with its own buffer.
    Idx batch_dims = k.Dims(out_batch);
    std::vector<llvm::Value*> captures = {k.in(0), k.in(1), k.out(0), m_dim,
                                          n_dim,   k_dim,   panels,   packed_elems};
    for (const Idx* group : {&batch_dims, &a_strides, &b_strides, &o_strides}) {
      captures.insert(captures.end(), group->begin(), group->end());
    }
    const size_t rank = out_batch.size();
    llvm::Value* cost = bl.CreateUDiv(bl.CreateMul(o_mat, k_dim), k.I64(width / 2));
    k.ParallelFor(k.NumElements(out_batch), cost, captures,
                  [&, rank](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
                    auto& ob = o.b();
                    auto group = [&](size_t g) {
                      return Idx(v.begin() + 8 + g * rank, v.begin() + 8 + (g + 1) * rank);
                    };
                    Idx dims = group(0), as = group(1), bs = group(2), os = group(3);
                    llvm::Value* packed = o.AllocHeap(ob.CreateMul(v[7], o.I64(4)), packed_bound);
                    o.Memset0(packed, v[7], d);
                    o.For(begin, end, [&](llvm::Value* flat) {
                      // Row-major multi-index of matrix `flat` within the batch dims.
                      Idx idx(rank);
                      llvm::Value* rest = flat;
                      for (size_t i = rank; i-- > 0;) {
                        idx[i] = ob.CreateURem(rest, dims[i]);
                        rest = ob.CreateUDiv(rest, dims[i]);
                      }
                      one_matrix(o, v[0], v[1], v[2], packed, v[3], v[4], v[5], v[6], idx, as, bs,
                                 os,
                                 /*parallel=*/false);
                    });
                    o.FreeHeap(packed);
                  });
    return absl::OkStatus();
  }
  k.ForNest(k.Dims(out_batch), [&](const Idx& idx) {
    MatrixView av{k.in(0), bl.CreateMul(k.Offset(idx, a_strides), a_mat), k_dim, k.I64(1)};
    MatrixView bv{k.in(1), bl.CreateMul(k.Offset(idx, b_strides), b_mat), n_dim, k.I64(1)};
    EmitMatrixProduct(k, d, av, bv, k.out(0), bl.CreateMul(k.Offset(idx, o_strides), o_mat), m_dim,
                      n_dim, k_dim);
  });
  return absl::OkStatus();
}

// Det: Gaussian elimination with partial pivoting in double, on a stack copy of each matrix.
absl::Status Det(KernelContext& k) {
  DType d = k.in_dtype(0);
  const SymShape& x = k.in_shape(0);
  int64_t m = x.back().coef();
  auto& b = k.b();
  llvm::Type* f64 = b.getDoubleTy();
  auto f = [&](double v) { return llvm::ConstantFP::get(f64, v); };
  llvm::Value* a = k.Scratch(f64, m * m);
  llvm::Value* det = k.Scratch(f64);
  llvm::Value* pivot = k.Scratch(k.I64Ty());
  auto at = [&](llvm::Value* r, llvm::Value* c) {
    return b.CreateGEP(f64, a, b.CreateAdd(b.CreateMul(r, k.I64(m)), c));
  };
  k.For(k.I64(0), k.NumElements(SymShape(x.begin(), x.end() - 2)), [&](llvm::Value* mat) {
    llvm::Value* base = b.CreateMul(mat, k.I64(m * m));
    k.For(k.I64(0), k.I64(m * m), [&](llvm::Value* i) {
      llvm::Value* v = k.Convert(k.Load(d, k.in(0), b.CreateAdd(base, i)), d, DType::kFloat64);
      b.CreateStore(v, b.CreateGEP(f64, a, i));
    });
    b.CreateStore(f(1), det);
    k.For(k.I64(0), k.I64(m), [&](llvm::Value* col) {
      // The row (at or below col) with the largest magnitude in this column.
      b.CreateStore(col, pivot);
      k.For(b.CreateAdd(col, k.I64(1)), k.I64(m), [&](llvm::Value* r) {
        llvm::Value* best = b.CreateLoad(f64, at(b.CreateLoad(k.I64Ty(), pivot), col));
        llvm::Value* cand = b.CreateLoad(f64, at(r, col));
        llvm::Value* larger = b.CreateFCmpOGT(k.Intrinsic(llvm::Intrinsic::fabs, cand),
                                              k.Intrinsic(llvm::Intrinsic::fabs, best));
        b.CreateStore(b.CreateSelect(larger, r, b.CreateLoad(k.I64Ty(), pivot)), pivot);
      });
      llvm::Value* p = b.CreateLoad(k.I64Ty(), pivot);
      k.If(b.CreateICmpNE(p, col), [&] {
        k.For(k.I64(0), k.I64(m), [&](llvm::Value* c) {
          llvm::Value* u = b.CreateLoad(f64, at(col, c));
          llvm::Value* v = b.CreateLoad(f64, at(p, c));
          b.CreateStore(v, at(col, c));
          b.CreateStore(u, at(p, c));
        });
        b.CreateStore(b.CreateFNeg(b.CreateLoad(f64, det)), det);
      });
      llvm::Value* diag = b.CreateLoad(f64, at(col, col));
      b.CreateStore(b.CreateFMul(b.CreateLoad(f64, det), diag), det);
      k.If(b.CreateFCmpONE(diag, f(0)), [&] {
        k.For(b.CreateAdd(col, k.I64(1)), k.I64(m), [&](llvm::Value* r) {
          llvm::Value* factor = b.CreateFDiv(b.CreateLoad(f64, at(r, col)), diag);
          k.For(col, k.I64(m), [&](llvm::Value* c) {
            llvm::Value* v = b.CreateFSub(b.CreateLoad(f64, at(r, c)),
                                          b.CreateFMul(factor, b.CreateLoad(f64, at(col, c))));
            b.CreateStore(v, at(r, c));
          });
        });
      });
    });
    k.Store(d, k.out(0), mat, k.Convert(b.CreateLoad(f64, det), DType::kFloat64, d));
  });
  return absl::OkStatus();
}

}  // namespace

void RegisterLinalgKernels(OpTable& r) {
  r.DefineEmitter("Gemm", Gemm);
  r.DefineEmitter("Det", Det);
  r.DefineEmitter("MatMul", MatMul);
}

}  // namespace cuvil::codegen
