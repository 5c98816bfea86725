// Shape inference for the signal ops: the window generators HannWindow, HammingWindow and
// BlackmanWindow, DFT, STFT and MelWeightMatrix.
//
// Canonical forms seen by code generation: windows have attr "size" (the folded size input,
// >= 0) and "periodic", the output type from "output_datatype" (default float32). DFT has "axis"
// non-negative and "length" (the transform length, dft_length folded); STFT has "frame_step" and
// "frame_length" folded, its window (if any) left as input 2.
#include "infer_context.h"

namespace cuvil::ir {
namespace {

absl::Status Window(InferContext& c) {
  if (auto s = c.ExpectInputs(0, 1); !s.ok()) return s;
  Node& n = c.node();
  if (c.has_input(0)) {
    auto size = c.StaticInts(0, "size");
    if (!size.ok()) return size.status();
    if (size->size() != 1) return c.Error("size must hold one value");
    n.attrs["size"] = (*size)[0];
    c.TruncateInputs(0);
  }
  int64_t size = n.attr_int("size", -1);
  if (size < 0 || size > (int64_t{1} << 32)) return c.Error("size is out of range");
  auto dtype = DTypeFromOnnx(static_cast<int32_t>(n.attr_int("output_datatype", 1)));
  if (!dtype.ok()) return c.Error(std::string(dtype.status().message()));
  c.SetOutput(0, *dtype, {SymDim::Const(size)});
  return absl::OkStatus();
}

// An optional scalar operand folded into attribute `attr`; `fallback` when the input is omitted.
absl::StatusOr<int64_t> ScalarOperand(InferContext& c, size_t i, const char* role,
                                      int64_t fallback) {
  if (!c.has_input(i)) return fallback;
  auto v = c.StaticInts(i, role);
  if (!v.ok()) return v.status();
  if (v->size() != 1) return c.Error(std::string(role) + " must hold one value");
  return (*v)[0];
}

absl::Status Dft(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  Node& n = c.node();
  const SymShape& x = c.in_shape(0);
  int rank = c.in_rank(0);
  if (!IsFloat(c.in_dtype(0)) || rank < 3) return c.Error("input must be float [..., n, 1 or 2]");
  if (!(x.back() == SymDim::Const(1)) && !(x.back() == SymDim::Const(2))) {
    return c.Error("the last dimension must be 1 (real) or 2 (complex)");
  }
  auto axis = c.Axis(n.attr_int("axis", 1), rank);
  if (!axis.ok()) return axis.status();
  if (*axis == 0 || *axis == rank - 1) return c.Error("axis must be a signal axis");
  if (!x[*axis].IsStatic()) return c.Error("the transformed axis must be static");
  auto length = ScalarOperand(c, 1, "dft_length", n.attr_int("length", x[*axis].coef()));
  if (!length.ok()) return length.status();
  if (*length < 1 || *length > (int64_t{1} << 24)) return c.Error("dft_length is out of range");
  c.TruncateInputs(1);
  n.attrs["axis"] = int64_t{*axis};
  n.attrs["length"] = *length;
  bool onesided = n.attr_int("onesided", 0) != 0;
  if (onesided && n.attr_int("inverse", 0) != 0) return c.Error("onesided inverse is unsupported");
  SymShape out = x;
  out[*axis] = SymDim::Const(onesided ? *length / 2 + 1 : *length);
  out.back() = SymDim::Const(2);
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Stft(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 4); !s.ok()) return s;
  Node& n = c.node();
  const SymShape& x = c.in_shape(0);
  if (!IsFloat(c.in_dtype(0)) || x.size() != 3 || !x[1].IsStatic() ||
      (!(x[2] == SymDim::Const(1)) && !(x[2] == SymDim::Const(2)))) {
    return c.Error("signal must be float [batch, length, 1 or 2] with a static length");
  }
  auto step = ScalarOperand(c, 1, "frame_step", n.attr_int("frame_step", 0));
  if (!step.ok()) return step.status();
  int64_t fallback_length = n.attr_int("frame_length", 0);
  if (c.has_input(2)) {
    if (c.in_rank(2) != 1 || !c.in_shape(2)[0].IsStatic() || c.in_dtype(2) != c.in_dtype(0)) {
      return c.Error("window must be a static 1-D tensor of the signal's type");
    }
    fallback_length = c.in_shape(2)[0].coef();
  }
  auto length = ScalarOperand(c, 3, "frame_length", fallback_length);
  if (!length.ok()) return length.status();
  if (*step < 1 || *length < 1 || *length > x[1].coef()) {
    return c.Error("frame_step and frame_length must be in [1, signal length]");
  }
  if (c.has_input(2) && c.in_shape(2)[0].coef() != *length) {
    return c.Error("window length differs from frame_length");
  }
  if (c.num_inputs() > 3) c.TruncateInputs(3);
  n.attrs["frame_step"] = *step;
  n.attrs["frame_length"] = *length;
  bool onesided = n.attr_int("onesided", 1) != 0;
  n.attrs["onesided"] = int64_t{onesided ? 1 : 0};
  int64_t frames = (x[1].coef() - *length) / *step + 1;
  c.SetOutput(0, c.in_dtype(0),
              {x[0], SymDim::Const(frames), SymDim::Const(onesided ? *length / 2 + 1 : *length),
               SymDim::Const(2)});
  return absl::OkStatus();
}

// MelWeightMatrix: num_mel_bins and dft_length (which give the shape) become attrs
// "num_mel_bins" and "dft_length"; sample_rate and the two edge frequencies stay run-time inputs
// 2..4.
absl::Status MelWeightMatrix(InferContext& c) {
  if (auto s = c.ExpectInputs(5, 5); !s.ok()) return s;
  Node& n = c.node();
  for (size_t i = 0; i < 5; ++i) {
    if (!c.has_input(i)) return c.Error(absl::StrCat("input ", i, " is missing"));
    bool integer = i < 3;
    if (integer ? !IsInteger(c.in_dtype(i)) : !IsFloat(c.in_dtype(i))) {
      return c.Error(absl::StrCat("input ", i, " '", c.input(i)->name, "' must be ",
                                  integer ? "an integer" : "a floating-point", " scalar"));
    }
    if (SymNumElements(c.in_shape(i)) != SymDim::Const(1)) {
      return c.Error(absl::StrCat("input ", i, " '", c.input(i)->name, "' must hold one value"));
    }
  }
  auto mel_bins = ScalarOperand(c, 0, "num_mel_bins", 0);
  if (!mel_bins.ok()) return mel_bins.status();
  auto dft_length = ScalarOperand(c, 1, "dft_length", 0);
  if (!dft_length.ok()) return dft_length.status();
  if (*mel_bins < 0 || *mel_bins > (int64_t{1} << 20))
    return c.Error("num_mel_bins is out of range");
  if (*dft_length < 1 || *dft_length > (int64_t{1} << 24))
    return c.Error("dft_length is out of range");
  auto dtype = DTypeFromOnnx(static_cast<int32_t>(n.attr_int("output_datatype", 1)));
  if (!dtype.ok()) return c.Error(std::string(dtype.status().message()));
  if (!IsFloat(*dtype)) return c.Error("output_datatype must be a floating-point type");
  n.attrs["num_mel_bins"] = *mel_bins;
  n.attrs["dft_length"] = *dft_length;
  c.SetOutput(0, *dtype, {SymDim::Const(*dft_length / 2 + 1), SymDim::Const(*mel_bins)});
  return absl::OkStatus();
}

}  // namespace

void RegisterSignalShapes(OpTable& r) {
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"})
    r.DefineShape(op, Window).Batch(BatchClass::kMixes).Attributes({"size"});
  r.DefineShape("DFT", Dft).Batch(BatchClass::kMixes).Attributes({"length"});
  r.DefineShape("STFT", Stft).Batch(BatchClass::kMixes).Attributes({"frame_length", "frame_step"});
  r.DefineShape("MelWeightMatrix", MelWeightMatrix)
      .Batch(BatchClass::kMixes)
      .Attributes({"dft_length", "num_mel_bins"});
}

}  // namespace cuvil::ir
