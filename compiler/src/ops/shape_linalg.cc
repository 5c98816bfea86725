// Shape inference for Gemm and MatMul. Constant float32 weights (B) are packed once at compile
// time into column panels (see PanelWidth) that the register-blocked micro-kernel streams
// sequentially; PyTorch's transposed Linear layout is undone in the same step.
#include <cstring>

#include "codegen/lower.h"
#include "infer_context.h"
#include "internal_attrs.h"

namespace cuvil::ir {
namespace {

HostTensor Transpose2D(const HostTensor& t) {
  int64_t rows = t.shape()[0], cols = t.shape()[1];
  HostTensor out(t.dtype(), {cols, rows});
  size_t es = DTypeSize(t.dtype());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      std::memcpy(out.data() + (c * rows + r) * es, t.data() + (r * cols + c) * es, es);
    }
  }
  return out;
}

// Columns per packed panel: two vectors of the target's width (16 with AVX2, 32 with AVX-512).
// Packing runs on the host that runs the code, so the layout follows its vector width; the node
// records it ("packed_panel") for the code generator.
int64_t PanelWidth() { return 2 * codegen::TargetVectorBits() / 32; }

// Packs a [K, N] (or, transposed, [N, K]) float32 matrix into column panels: layout
// [ceil(N/P)][K][P] for panel width P, zero padded.
HostTensor PackPanels(const HostTensor& b, bool transposed, int64_t width) {
  int64_t rows = b.shape()[0], cols = b.shape()[1];
  int64_t k_dim = transposed ? cols : rows, n_dim = transposed ? rows : cols;
  int64_t panels = (n_dim + width - 1) / width;
  HostTensor out(DType::kFloat32, {panels, k_dim, width});
  const float* src = b.data_as<float>();
  float* dst = out.data_as<float>();
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t k = 0; k < k_dim; ++k) {
      for (int64_t j = 0; j < width; ++j) {
        int64_t n = p * width + j;
        if (n >= n_dim) continue;
        dst[(p * k_dim + k) * width + j] = transposed ? src[n * cols + k] : src[k * cols + n];
      }
    }
  }
  return out;
}

// Replaces a constant 2-D float32 B operand by its panel-packed form; records N in "packed_n".
void PackConstantB(InferContext& c, bool transposed) {
  Node& n = c.node();
  Value* b = c.input(1);
  if (n.has_attr(attr::kPackedN) || !b->is_constant() || b->type.dtype != DType::kFloat32 ||
      b->type.rank() != 2) {
    return;
  }
  Value* packed = c.graph().NewValue(b->name + ".packed");
  int64_t panel = PanelWidth();
  c.graph().MakeConstant(packed, PackPanels(*b->constant, transposed, panel));
  n.attrs[attr::kPackedPanel] = panel;
  n.inputs[1] = packed;
  n.attrs[attr::kPackedN] = transposed ? b->constant->shape()[0] : b->constant->shape()[1];
  n.attrs[attr::kPackedK] = transposed ? b->constant->shape()[1] : b->constant->shape()[0];
  n.attrs["transB"] = int64_t{0};
}

absl::Status Gemm(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  if (c.in_rank(0) != 2 || (c.in_rank(1) != 2 && !c.node().has_attr(attr::kPackedN))) {
    return c.Error("A and B must be 2-D");
  }
  if (c.in_dtype(0) != c.in_dtype(1)) return c.Error("A and B dtypes differ");
  Node& n = c.node();
  bool trans_a = n.attr_int("transA", 0) != 0;
  if (!trans_a) {
    PackConstantB(c, n.attr_int("transB", 0) != 0);
  } else if (n.attr_int("transB", 0) != 0 && c.input(1)->is_constant()) {
    Value* t = c.graph().NewValue(c.input(1)->name + ".transposed");
    c.graph().MakeConstant(t, Transpose2D(*c.input(1)->constant));
    n.inputs[1] = t;
    n.attrs["transB"] = int64_t{0};
  }
  bool trans_b = n.attr_int("transB", 0) != 0;
  const SymShape& a = c.in_shape(0);
  SymShape b = c.in_shape(1);
  if (n.has_attr(attr::kPackedN))
    b = {SymDim::Const(n.attr_int(attr::kPackedK, 0)),
         SymDim::Const(n.attr_int(attr::kPackedN, 0))};
  SymDim m = trans_a ? a[1] : a[0], ka = trans_a ? a[0] : a[1];
  SymDim kb = trans_b ? b[1] : b[0], nn = trans_b ? b[0] : b[1];
  if (!(ka == kb)) {
    return c.Error(
        absl::StrCat("inner dimensions differ: ", SymShapeToString(a), " x ", SymShapeToString(b)));
  }
  SymShape out = {m, nn};
  if (c.has_input(2)) {
    auto bc = BroadcastShapes(c.in_shape(2), out);
    if (!bc || !(*bc == out)) return c.Error("C does not broadcast to the output");
  }
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

absl::Status MatMul(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  if (c.in_dtype(0) != c.in_dtype(1)) return c.Error("A and B dtypes differ");
  if (c.in_rank(0) >= 2) PackConstantB(c, /*transposed=*/false);
  SymShape a = c.in_shape(0), b = c.in_shape(1);
  if (c.node().has_attr(attr::kPackedN)) {
    b = {SymDim::Const(c.node().attr_int(attr::kPackedK, 0)),
         SymDim::Const(c.node().attr_int(attr::kPackedN, 0))};
  }
  if (a.empty() || b.empty()) return c.Error("operands must have rank >= 1");
  bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), SymDim::Const(1));
  if (b_vec) b.push_back(SymDim::Const(1));
  if (!(a.back() == b[b.size() - 2])) {
    return c.Error(absl::StrCat("inner dimensions differ: ", SymShapeToString(c.in_shape(0)), " x ",
                                SymShapeToString(c.in_shape(1))));
  }
  SymShape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
  auto batch = BroadcastShapes(a_batch, b_batch);
  if (!batch) return c.Error("batch dimensions do not broadcast");
  SymShape out = *batch;
  if (!a_vec) out.push_back(a[a.size() - 2]);
  if (!b_vec) out.push_back(b.back());
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

// Det: [..., M, M] -> [...], M static (at most 64, so the elimination fits in stack scratch).
absl::Status Det(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  const SymShape& x = c.in_shape(0);
  if (!IsFloat(c.in_dtype(0))) return c.Error("input must be floating point");
  if (x.size() < 2 || !(x[x.size() - 1] == x[x.size() - 2]) || !x.back().IsStatic() ||
      x.back().coef() > 64) {
    return c.Error("input must be [..., M, M] with a static M <= 64");
  }
  c.SetOutput(0, c.in_dtype(0), SymShape(x.begin(), x.end() - 2));
  return absl::OkStatus();
}

// Multiply-adds per output element (OpDef::macs): A's contracted dim.
double GemmMacs(const Node& n, absl::Span<const int64_t> syms) {
  const SymShape& a = n.inputs[0]->type.shape;
  return a.size() == 2 ? DimAt(a[n.attr_int("transA", 0) ? 0 : 1], syms) : 0.0;
}

double MatMulMacs(const Node& n, absl::Span<const int64_t> syms) {
  const SymShape& a = n.inputs[0]->type.shape;
  return a.empty() ? 0.0 : DimAt(a.back(), syms);
}

}  // namespace

void RegisterLinalgShapes(OpTable& r) {
  r.DefineShape("Det", Det).Batch(BatchClass::kMixes);
  r.DefineShape("Gemm", Gemm).Batch(BatchClass::kGemm).Macs(GemmMacs);
  // "transB" 0: a constant B packed in panels (PackConstantB) is read untransposed.
  r.DefineShape("MatMul", MatMul)
      .Batch(BatchClass::kMatMul)
      .Macs(MatMulMacs)
      .Attributes({"transB"});
}

}  // namespace cuvil::ir
