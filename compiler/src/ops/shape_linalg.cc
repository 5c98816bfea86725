// Shape inference for Gemm and MatMul. Gemm weights stored transposed (PyTorch's Linear layout)
// are transposed once at compile time so the generated inner loop streams contiguous rows.
#include <cstring>

#include "op_registry.h"

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

absl::Status Gemm(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 3); !s.ok()) return s;
  if (c.in_rank(0) != 2 || c.in_rank(1) != 2) return c.Error("A and B must be 2-D");
  if (c.in_dtype(0) != c.in_dtype(1)) return c.Error("A and B dtypes differ");
  Node& n = c.node();
  bool trans_a = n.attr_int("transA", 0) != 0;
  if (n.attr_int("transB", 0) != 0 && c.input(1)->is_constant()) {
    Value* packed = c.graph().NewValue(c.input(1)->name + ".packed");
    c.graph().MakeConstant(packed, Transpose2D(*c.input(1)->constant));
    n.inputs[1] = packed;
    n.attrs["transB"] = int64_t{0};
  }
  bool trans_b = n.attr_int("transB", 0) != 0;
  const SymShape& a = c.in_shape(0);
  const SymShape& b = c.in_shape(1);
  SymDim m = trans_a ? a[1] : a[0], ka = trans_a ? a[0] : a[1];
  SymDim kb = trans_b ? b[1] : b[0], nn = trans_b ? b[0] : b[1];
  if (!(ka == kb)) {
    return c.Error(absl::StrCat("inner dimensions differ: ", SymShapeToString(a), " x ", SymShapeToString(b)));
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
  SymShape a = c.in_shape(0), b = c.in_shape(1);
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

}  // namespace

void RegisterLinalgShapes(OpRegistry& r) {
  r.Register("Gemm", Gemm);
  r.Register("MatMul", MatMul);
}

}  // namespace cuvil::ir
