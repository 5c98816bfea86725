// Code generation for Gemm and MatMul: a row-streaming loop nest whose innermost loop runs over
// contiguous output and B columns, so LLVM vectorises it with FMA.
#include "codegen/kernel_context.h"

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

// Register-blocked product with a panel-packed B (see shape_linalg.cc): for each 16-column
// panel and each block of kRowBlock rows, kRowBlock x 2 vector accumulators stay in registers
// over the whole K loop, B is streamed sequentially once per panel (L2-resident for the other
// row blocks) and every output element is written once.
constexpr int64_t kPanel = 16;
constexpr int64_t kRowBlock = 4;

// What the tile applies to its accumulators before storing them (see fuse_patterns.h).
// Thread-compatible value type.
struct Epilogue {
  llvm::Value* bias = nullptr;  // float32, zero padded to whole panels; indexed by column
  std::string activation;       // "", "Relu" or "Gelu"
};

Epilogue EpilogueOf(KernelContext& k) {
  Epilogue e;
  if (k.node().has_attr("fused_bias")) e.bias = k.in(2);
  e.activation = k.node().attr_string("fused_activation", "");
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
  if (e.activation == "Relu") {
    llvm::Value* zero = llvm::Constant::getNullValue(v->getType());
    v = b.CreateSelect(b.CreateFCmpOLT(v, zero), zero, v);
  } else if (e.activation == "Gelu") {
    v = k.FastGelu(v);
  }
  return v;
}

void EmitPackedTile(KernelContext& k, int rows, llvm::Value* a, llvm::Value* lda, llvm::Value* m0,
                    llvm::Value* panel, llvm::Value* k_dim, llvm::Value* out, llvm::Value* out_col,
                    llvm::Value* n_dim, llvm::Value* n_valid, const Epilogue& epi) {
  auto& b = k.b();
  llvm::Type* f32 = b.getFloatTy();
  auto* vec = llvm::FixedVectorType::get(f32, 8);
  std::vector<llvm::Value*> acc;
  for (int i = 0; i < rows * 2; ++i) {
    acc.push_back(k.Scratch(vec));
    b.CreateStore(llvm::Constant::getNullValue(vec), acc.back());
  }
  std::vector<llvm::Value*> a_rows;
  for (int r = 0; r < rows; ++r) a_rows.push_back(b.CreateMul(b.CreateAdd(m0, k.I64(r)), lda));
  k.For(k.I64(0), k_dim, [&](llvm::Value* kk) {
    llvm::Value* base = b.CreateMul(kk, k.I64(kPanel));
    llvm::Value* b0 =
        b.CreateAlignedLoad(vec, k.ElemPtr(DType::kFloat32, panel, base), llvm::Align(32));
    llvm::Value* b1 = b.CreateAlignedLoad(
        vec, k.ElemPtr(DType::kFloat32, panel, b.CreateAdd(base, k.I64(8))), llvm::Align(32));
    for (int r = 0; r < rows; ++r) {
      llvm::Value* av =
          b.CreateVectorSplat(8, k.Load(DType::kFloat32, a, b.CreateAdd(a_rows[r], kk)));
      for (int j = 0; j < 2; ++j) {
        llvm::Value* cur = b.CreateLoad(vec, acc[r * 2 + j]);
        llvm::Value* next =
            b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {vec}, {av, j ? b1 : b0, cur});
        b.CreateStore(next, acc[r * 2 + j]);
      }
    }
  });
  llvm::Value* full = b.CreateICmpEQ(n_valid, k.I64(kPanel));
  for (int r = 0; r < rows; ++r) {
    llvm::Value* row = b.CreateAdd(b.CreateMul(b.CreateAdd(m0, k.I64(r)), n_dim), out_col);
    llvm::Value* v0 = ApplyEpilogue(k, epi, b.CreateLoad(vec, acc[r * 2]), out_col);
    llvm::Value* v1 =
        ApplyEpilogue(k, epi, b.CreateLoad(vec, acc[r * 2 + 1]), b.CreateAdd(out_col, k.I64(8)));
    k.If(
        full,
        [&] {
          b.CreateAlignedStore(v0, k.ElemPtr(DType::kFloat32, out, row), llvm::Align(4));
          b.CreateAlignedStore(v1, k.ElemPtr(DType::kFloat32, out, b.CreateAdd(row, k.I64(8))),
                               llvm::Align(4));
        },
        [&] {
          // The last panel of an N that is not a multiple of 16: store only the real columns.
          for (int lane = 0; lane < kPanel; ++lane) {
            k.If(b.CreateICmpSLT(k.I64(lane), n_valid), [&] {
              llvm::Value* e =
                  b.CreateExtractElement(lane < 8 ? v0 : v1, static_cast<uint64_t>(lane % 8));
              k.Store(DType::kFloat32, out, b.CreateAdd(row, k.I64(lane)), e);
            });
          }
        });
  }
}

// out[M, N] = a[M, K] (rows `lda` apart, contiguous columns) x packed B. Column panels are
// independent, so they are split across the execution's intra-op threads.
void EmitPackedProduct(KernelContext& k, llvm::Value* a, llvm::Value* lda, llvm::Value* packed,
                       llvm::Value* out, llvm::Value* m_dim, llvm::Value* n_dim, llvm::Value* k_dim,
                       const Epilogue& epilogue = {}) {
  auto& b = k.b();
  llvm::Value* panels = b.CreateUDiv(b.CreateAdd(n_dim, k.I64(kPanel - 1)), k.I64(kPanel));
  llvm::Value* panel_cost = b.CreateMul(b.CreateMul(m_dim, k_dim), k.I64(kPanel));
  std::vector<llvm::Value*> captures = {a, lda, packed, out, m_dim, n_dim, k_dim};
  if (epilogue.bias != nullptr) captures.push_back(epilogue.bias);
  std::string activation = epilogue.activation;
  k.ParallelFor(
      panels, panel_cost, captures,
      [activation](KernelContext& o, const Idx& v, llvm::Value* begin, llvm::Value* end) {
        auto& ob = o.b();
        llvm::Value *a = v[0], *lda = v[1], *packed = v[2], *out = v[3], *m_dim = v[4],
                    *n_dim = v[5], *k_dim = v[6];
        Epilogue epi{v.size() > 7 ? v[7] : nullptr, activation};
        llvm::Value* full_rows =
            ob.CreateMul(ob.CreateUDiv(m_dim, o.I64(kRowBlock)), o.I64(kRowBlock));
        o.For(begin, end, [&](llvm::Value* p) {
          llvm::Value* panel = o.ElemPtr(DType::kFloat32, packed,
                                         ob.CreateMul(p, ob.CreateMul(k_dim, o.I64(kPanel))));
          llvm::Value* col = ob.CreateMul(p, o.I64(kPanel));
          llvm::Value* n_valid = o.Min(DType::kInt64, o.I64(kPanel), ob.CreateSub(n_dim, col));
          o.For(o.I64(0), ob.CreateUDiv(m_dim, o.I64(kRowBlock)), [&](llvm::Value* mb) {
            EmitPackedTile(o, kRowBlock, a, lda, ob.CreateMul(mb, o.I64(kRowBlock)), panel, k_dim,
                           out, col, n_dim, n_valid, epi);
          });
          o.For(full_rows, m_dim, [&](llvm::Value* m) {
            EmitPackedTile(o, 1, a, lda, m, panel, k_dim, out, col, n_dim, n_valid, epi);
          });
        });
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
  if (node.has_attr("packed_n")) {
    n_dim = k.I64(node.attr_int("packed_n", 0));
    EmitPackedProduct(k, k.in(0), k_dim, k.in(1), k.out(0), m_dim, n_dim, k_dim, EpilogueOf(k));
    // A fused bias (alpha 1, no C of its own) is complete; an unfused C is added below.
    if (node.has_attr("fused_bias")) return absl::OkStatus();
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
  if (k.node().has_attr("packed_n")) {
    // B is a packed constant matrix: every leading dim of A folds into M.
    llvm::Value* k_dim = k.I64(k.node().attr_int("packed_k", 0));
    llvm::Value* m_dim = k.b().CreateUDiv(k.NumElements(k.in_shape(0)), k_dim);
    EmitPackedProduct(k, k.in(0), k_dim, k.in(1), k.out(0), m_dim,
                      k.I64(k.node().attr_int("packed_n", 0)), k_dim, EpilogueOf(k));
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
                          k.in_shape(1).size() >= 2 &&
                          !(m_sym.IsStatic() && m_sym.coef < kRowBlock);
  if (pack_at_run_time) {
    // Neither operand is a packed constant (attention's Q K^T and P V): pack each B matrix into
    // 16-column panels in a scratch buffer and reuse the register-blocked tile. Packing reads B
    // once; the tile then reads it M / 4 times from L1/L2 instead of streaming the output.
    llvm::Value* panels = bl.CreateUDiv(bl.CreateAdd(n_dim, k.I64(kPanel - 1)), k.I64(kPanel));
    llvm::Value* packed_elems = bl.CreateMul(bl.CreateMul(panels, k_dim), k.I64(kPanel));
    llvm::Value* packed = k.AllocHeap(bl.CreateMul(packed_elems, k.I64(4)));
    // Padding columns of the last panel stay zero for every matrix.
    k.Memset0(packed, packed_elems, d);
    k.ForNest(k.Dims(out_batch), [&](const Idx& idx) {
      llvm::Value* b_off = bl.CreateMul(k.Offset(idx, b_strides), b_mat);
      k.For(k.I64(0), panels, [&](llvm::Value* p) {
        llvm::Value* col0 = bl.CreateMul(p, k.I64(kPanel));
        llvm::Value* valid = k.Min(DType::kInt64, k.I64(kPanel), bl.CreateSub(n_dim, col0));
        k.For(k.I64(0), k_dim, [&](llvm::Value* kk) {
          llvm::Value* src = bl.CreateAdd(b_off, bl.CreateAdd(bl.CreateMul(kk, n_dim), col0));
          llvm::Value* dst = bl.CreateMul(bl.CreateAdd(bl.CreateMul(p, k_dim), kk), k.I64(kPanel));
          k.For(k.I64(0), valid, [&](llvm::Value* j) {
            k.Store(d, packed, bl.CreateAdd(dst, j), k.Load(d, k.in(1), bl.CreateAdd(src, j)));
          });
        });
      });
      llvm::Value* a_ptr = k.ElemPtr(d, k.in(0), bl.CreateMul(k.Offset(idx, a_strides), a_mat));
      llvm::Value* o_ptr = k.ElemPtr(d, k.out(0), bl.CreateMul(k.Offset(idx, o_strides), o_mat));
      EmitPackedProduct(k, a_ptr, k_dim, packed, o_ptr, m_dim, n_dim, k_dim);
    });
    k.FreeHeap(packed);
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

}  // namespace

void RegisterLinalgKernels(KernelRegistry& r) {
  r.Register("Gemm", Gemm);
  r.Register("MatMul", MatMul);
}

}  // namespace cuvil::codegen
