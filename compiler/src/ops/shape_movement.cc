// Shape inference for data movement ops: Transpose, Concat, Split, Slice, Gather, Tile, Expand,
// Pad, DepthToSpace, SpaceToDepth, ScatterND, Trilu, Resize/Upsample.
//
// Operands that decide output shapes (starts/ends, pads, repeats, sizes, ...) are folded into
// attributes and the inputs dropped, so code generation sees one form per op (inference runs once
// per imported node; the canonical form is meant for code generation, not for re-inference).
// Concat, Gather, Slice, Split, Tile and Expand propagate known values, which folds PyTorch's shape
// arithmetic.
#include <algorithm>
#include <cmath>
#include <limits>

#include "infer_context.h"
#include "internal_attrs.h"

namespace cuvil::ir {
namespace {

constexpr size_t kMaxKnown = 64;

// Known values of input i when present and shaped like a small static tensor.
const std::vector<SymDim>* SmallKnown(InferContext& c, size_t i) {
  if (!c.has_input(i) || !c.input(i)->known || !IsStaticShape(c.in_shape(i))) return nullptr;
  const auto& k = *c.input(i)->known;
  if (static_cast<int64_t>(k.size()) != SymNumElements(c.in_shape(i)).coef()) return nullptr;
  return k.size() <= kMaxKnown ? &k : nullptr;
}

// The known values of a view of `k` (values of a static `in`): output element at coordinates
// (i_0, ..., i_r) of static `out` reads input axis perm[a] at starts[a] + i_a * steps[a].
std::vector<SymDim> KnownOfView(const std::vector<SymDim>& k, const SymShape& in,
                                const SymShape& out, const std::vector<int64_t>& perm,
                                const std::vector<int64_t>& starts,
                                const std::vector<int64_t>& steps) {
  const int rank = static_cast<int>(in.size());
  std::vector<int64_t> in_strides(rank, 1);
  for (int a = rank - 2; a >= 0; --a) in_strides[a] = in_strides[a + 1] * in[a + 1].coef();
  std::vector<SymDim> known;
  const int64_t n = SymNumElements(out).coef();
  for (int64_t e = 0; e < n; ++e) {
    int64_t rest = e, offset = 0;
    for (int a = rank - 1; a >= 0; --a) {
      const int64_t i = rest % out[a].coef();
      rest /= out[a].coef();
      offset += (starts[a] + i * steps[a]) * in_strides[perm[a]];
    }
    known.push_back(k[offset]);
  }
  return known;
}

// Static value of `d`, or an Unimplemented error naming `what`.
absl::StatusOr<int64_t> StaticDim(InferContext& c, const SymDim& d, const std::string& what) {
  if (d.IsStatic()) return d.coef();
  return absl::UnimplementedError(absl::StrCat(
      c.node().Describe(), ": ", what, " on a dimension depending on the symbolic dimension"));
}

// Product of dims [from, to).
SymDim Product(const SymShape& s, size_t from, size_t to) {
  return SymNumElements(SymShape(s.begin() + from, s.begin() + to));
}

// Reads an optional integer operand: input i when present, else attribute `attr`, else nullopt.
absl::StatusOr<std::optional<std::vector<int64_t>>> IntsOperand(InferContext& c, size_t i,
                                                                const char* attr) {
  if (c.has_input(i)) {
    auto v = c.StaticInts(i, attr);
    if (!v.ok()) return v.status();
    return std::optional<std::vector<int64_t>>(*v);
  }
  if (c.node().has_attr(attr)) return std::optional<std::vector<int64_t>>(c.node().attr_ints(attr));
  return std::optional<std::vector<int64_t>>();
}

// Maps every entry of `axes` into [0, rank).
absl::StatusOr<std::vector<int>> NormalizeAxes(InferContext& c, const std::vector<int64_t>& axes,
                                               int rank) {
  std::vector<int> out;
  for (int64_t a : axes) {
    auto ax = c.Axis(a, rank);
    if (!ax.ok()) return ax.status();
    out.push_back(*ax);
  }
  return out;
}

absl::Status Transpose(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  int rank = c.in_rank(0);
  std::vector<int64_t> perm = c.node().attr_ints("perm");
  if (perm.empty()) {
    for (int i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int>(perm.size()) != rank) return c.Error("perm length differs from the rank");
  std::vector<bool> seen(rank, false);
  SymShape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return c.Error("perm is not a permutation");
    seen[p] = true;
    out.push_back(c.in_shape(0)[p]);
  }
  c.node().attrs["perm"] = perm;
  c.SetOutput(0, c.in_dtype(0), out);
  if (rank <= 1 && c.input(0)->known) {
    c.SetKnown(0, *c.input(0)->known);
  } else if (const auto* k = SmallKnown(c, 0); k != nullptr) {
    // A pads table [n, 2] transposed to ONNX's begins-then-ends order (swin, detection).
    std::vector<SymDim> known = KnownOfView(
        *k, c.in_shape(0), out, perm, std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1));
    c.SetKnown(0, std::move(known));
  }
  return absl::OkStatus();
}

absl::Status Concat(InferContext& c) {
  if (c.num_inputs() < 1) return c.Error("expects at least one input");
  int rank = c.in_rank(0);
  auto axis = c.Axis(c.node().attr_int("axis", 0), rank);
  if (!axis.ok()) return axis.status();
  SymShape out = c.in_shape(0);
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) return c.Error("omitted inputs are not allowed");
    if (c.in_dtype(i) != c.in_dtype(0) || c.in_rank(i) != rank)
      return c.Error("inputs differ in dtype or rank");
    for (int d = 0; d < rank; ++d) {
      const SymDim& other = c.in_shape(i)[d];
      if (d == *axis || other == out[d]) continue;
      // Two symbolic extents the rules cannot prove equal (H and 2*floor(H/2)): assumed equal
      // here and checked per request before the code runs.
      if (other.IsStatic() || out[d].IsStatic() || !c.graph().allow_assumptions) {
        return c.Error("inputs differ outside the axis");
      }
      c.graph().assumptions.push_back(
          {c.node().outputs[0]->name, static_cast<int32_t>(d), out[d].expr(), other.expr()});
      if (other.expr().NodeCount() < out[d].expr().NodeCount()) out[d] = other;
    }
    auto sum = SymAdd(out[*axis], c.in_shape(i)[*axis]);
    if (!sum)
      return absl::UnimplementedError(c.node().Describe() +
                                      ": the concatenated extent's expression is too large");
    out[*axis] = *sum;
  }
  c.node().attrs["axis"] = int64_t{*axis};
  c.SetOutput(0, c.in_dtype(0), out);
  // Along axis 0 the row-major element lists simply append.
  if (*axis == 0) {
    std::vector<SymDim> known;
    for (size_t i = 0; i < c.num_inputs(); ++i) {
      const auto* k = SmallKnown(c, i);
      if (k == nullptr) return absl::OkStatus();
      known.insert(known.end(), k->begin(), k->end());
    }
    if (known.size() <= kMaxKnown) c.SetKnown(0, std::move(known));
  }
  return absl::OkStatus();
}

absl::Status Split(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  const SymShape& in = c.in_shape(0);
  auto axis = c.Axis(c.node().attr_int("axis", 0), c.in_rank(0));
  if (!axis.ok()) return axis.status();
  auto split = IntsOperand(c, 1, "split");
  if (!split.ok()) return split.status();
  size_t n = c.num_outputs();
  std::vector<SymDim> parts;
  if (*split) {
    if (split->value().size() != n) return c.Error("split length differs from the output count");
    std::optional<SymDim> total = SymDim::Const(0);
    for (int64_t s : split->value()) {
      if (s < 0) return c.Error("negative split");
      parts.push_back(SymDim::Const(s));
      total = SymAdd(*total, parts.back());
    }
    if (!(total && *total == in[*axis]))
      return c.Error("split sizes do not add up to the axis extent");
  } else {
    // Equal parts; opset 18 allows a smaller last part.
    SymDim d = in[*axis];
    auto part = SymDiv(d, SymDim::Const(static_cast<int64_t>(n)));
    if (part && SymMul(*part, SymDim::Const(static_cast<int64_t>(n))) == d) {
      parts.assign(n, *part);
    } else {
      auto len = StaticDim(c, d, "uneven Split");
      if (!len.ok()) return len.status();
      int64_t chunk = (*len + static_cast<int64_t>(n) - 1) / static_cast<int64_t>(n);
      for (size_t i = 0; i < n; ++i) {
        parts.push_back(SymDim::Const(
            std::max<int64_t>(0, std::min(chunk, *len - chunk * static_cast<int64_t>(i)))));
      }
    }
  }
  std::vector<int64_t> static_parts;
  for (const SymDim& p : parts) {
    if (p.IsStatic()) static_parts.push_back(p.coef());
  }
  if (static_parts.size() == n) c.node().attrs["split"] = static_parts;
  c.node().attrs["axis"] = int64_t{*axis};
  c.TruncateInputs(1);
  const auto* known = c.in_rank(0) == 1 ? SmallKnown(c, 0) : nullptr;
  int64_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    SymShape s = in;
    s[*axis] = parts[i];
    c.SetOutput(i, c.in_dtype(0), s);
    if (known != nullptr) {
      c.SetKnown(i, std::vector<SymDim>(known->begin() + offset,
                                        known->begin() + offset + parts[i].coef()));
      offset += parts[i].coef();
    }
  }
  return absl::OkStatus();
}

// Slice extent along one axis: static dims follow ONNX clamping exactly. Symbolic extents or
// bounds need step 1 and a representable extent; they cannot be clamped, so the model's bounds are
// trusted (e.g. pos_table[:seq] assumes seq <= the table length, as PyTorch does).
struct SliceAxis {
  int64_t start = 0;
  int64_t step = 1;
  SymDim extent;
  bool checked = false;  // Extent or bounds symbolic: code generation checks them at run time.
  // The start is symbolic (start is then 0): the kernel reads it from the starts input.
  bool symbolic_start = false;
};

absl::StatusOr<SliceAxis> ResolveSlice(InferContext& c, const SymDim& dim, SymDim start, SymDim end,
                                       int64_t step) {
  constexpr int64_t kToEnd = std::numeric_limits<int32_t>::max();
  if (step == 0) return c.Error("slice step is 0");
  if (dim.IsStatic() && start.IsStatic() && end.IsStatic()) {
    int64_t d = dim.coef(), s = start.coef(), e = end.coef();
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
    } else {  // Not std::clamp: d - 1 may be below the lower bound for empty axes.
      s = std::min<int64_t>(std::max<int64_t>(s, 0), d - 1);
      e = std::min<int64_t>(std::max<int64_t>(e, -1), d - 1);
    }
    // Unsigned magnitudes: step may be INT64_MIN or INT64_MAX, where e - s + step - 1 would
    // overflow. s and e are clamped into [-1, d], so the span fits.
    int64_t span = step > 0 ? e - s : s - e;
    uint64_t mag = step > 0 ? static_cast<uint64_t>(step) : 0 - static_cast<uint64_t>(step);
    int64_t n = span > 0 ? static_cast<int64_t>(1 + (static_cast<uint64_t>(span) - 1) / mag) : 0;
    return SliceAxis{s, step, SymDim::Const(n)};
  }
  auto unsupported = absl::UnimplementedError(absl::StrCat(
      c.node().Describe(), ": slice [", start.ToString(), ", ", end.ToString(), ") step ", step,
      " of extent ", dim.ToString(), " cannot be resolved at compile time"));
  // A start at or below -kToEnd clamps to 0 for any extent below kToEnd (the same assumption as
  // the end below), e.g. x[INT64_MIN:] on the batch axis.
  if (step == 1 && start.IsStatic() && start.coef() <= -kToEnd) start = SymDim::Const(0);
  // A symbolic start (raft's x[batch:2*batch]) must be provably non-negative; its extent too.
  const bool symbolic_start = !start.IsStatic() && start.expr().IsProvablyNonNegative();
  if (step != 1 || (!start.IsStatic() && !symbolic_start) ||
      (start.IsStatic() && start.coef() < 0)) {
    return unsupported;
  }
  if (end.IsStatic() && end.coef() >= kToEnd) end = dim;
  if (end.IsStatic() && end.coef() < 0) {
    auto e = SymAdd(dim, end);
    if (!e) return unsupported;
    end = *e;
  }
  auto n = SymSub(end, start);
  if (!n) return unsupported;
  if (symbolic_start && !n->expr().IsProvablyNonNegative()) return unsupported;
  // The model's bounds are trusted only at compile time; code generation checks at run time that
  // the slice lies inside the input (see "checked_axes") and fails the execution otherwise.
  return SliceAxis{symbolic_start ? 0 : start.coef(), 1, *n, /*checked=*/true, symbolic_start};
}

absl::Status Slice(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 5); !s.ok()) return s;
  Node& node = c.node();
  int rank = c.in_rank(0);
  const SymShape& in = c.in_shape(0);
  std::vector<SymDim> starts, ends;
  std::vector<int64_t> axes, steps;
  if (node.opset < 10) {
    for (int64_t v : node.attr_ints("starts")) starts.push_back(SymDim::Const(v));
    for (int64_t v : node.attr_ints("ends")) ends.push_back(SymDim::Const(v));
    axes = node.attr_ints("axes");
  } else {
    if (auto s = c.ExpectInputs(3, 5); !s.ok()) return s;
    auto st = c.Known(1, "starts");
    if (!st.ok()) return st.status();
    auto en = c.Known(2, "ends");
    if (!en.ok()) return en.status();
    starts = *st;
    ends = *en;
    if (c.has_input(3)) {
      auto a = c.StaticInts(3, "axes");
      if (!a.ok()) return a.status();
      axes = *a;
    }
    if (c.has_input(4)) {
      auto s = c.StaticInts(4, "steps");
      if (!s.ok()) return s.status();
      steps = *s;
    }
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return c.Error("starts, ends, axes and steps differ in length");
  }
  auto norm_axes = NormalizeAxes(c, axes, rank);
  if (!norm_axes.ok()) return norm_axes.status();
  std::vector<int64_t> all_starts(rank, 0), all_steps(rank, 1), checked_axes, symbolic_starts;
  SymShape out = in;
  for (size_t i = 0; i < starts.size(); ++i) {
    int a = (*norm_axes)[i];
    auto r = ResolveSlice(c, in[a], starts[i], ends[i], steps[i]);
    if (!r.ok()) return r.status();
    all_starts[a] = r->start;
    all_steps[a] = r->step;
    out[a] = r->extent;
    if (r->checked) checked_axes.push_back(a);
    if (r->symbolic_start) symbolic_starts.push_back(static_cast<int64_t>(i));
  }
  node.attrs[attr::kCheckedAxes] = checked_axes;
  node.attrs.erase("ends");
  node.attrs.erase("axes");
  node.attrs["starts"] = all_starts;
  node.attrs[attr::kSteps] = all_steps;
  if (!symbolic_starts.empty()) {
    // The kernel reads these starts from input 1 at run time: "start_inputs" holds, per such
    // start, its index in that input and its axis.
    std::vector<int64_t> start_inputs;
    for (int64_t i : symbolic_starts) {
      start_inputs.push_back(i);
      start_inputs.push_back((*norm_axes)[i]);
    }
    node.attrs[attr::kStartInputs] = start_inputs;
    c.TruncateInputs(2);
  } else {
    node.attrs.erase(attr::kStartInputs);
    c.TruncateInputs(1);
  }
  c.SetOutput(0, c.in_dtype(0), out);
  // Known values of any rank (swin reverses a [n, 2] pads table along axis 0).
  if (const auto* k = IsStaticShape(out) && symbolic_starts.empty() ? SmallKnown(c, 0) : nullptr;
      k != nullptr) {
    std::vector<int64_t> identity(rank);
    for (int a = 0; a < rank; ++a) identity[a] = a;
    std::vector<SymDim> known = KnownOfView(*k, in, out, identity, all_starts, all_steps);
    c.SetKnown(0, std::move(known));
  }
  return absl::OkStatus();
}

absl::Status Gather(InferContext& c) {
  if (auto s = c.ExpectInputs(2, 2); !s.ok()) return s;
  if (!IsInteger(c.in_dtype(1))) return c.Error("indices must be integers");
  const SymShape& data = c.in_shape(0);
  auto axis = c.Axis(c.node().attr_int("axis", 0), c.in_rank(0));
  if (!axis.ok()) return axis.status();
  SymShape out(data.begin(), data.begin() + *axis);
  out.insert(out.end(), c.in_shape(1).begin(), c.in_shape(1).end());
  out.insert(out.end(), data.begin() + *axis + 1, data.end());
  c.node().attrs["axis"] = int64_t{*axis};
  c.SetOutput(0, c.in_dtype(0), out);
  // Gathering from known values (typically a Shape result) yields known values.
  const auto* k = SmallKnown(c, 0);
  if (k == nullptr) return absl::OkStatus();
  // Runtime indices are fine for code generation, so they never force a binding.
  const auto* idx = SmallKnown(c, 1);
  if (idx == nullptr) return absl::OkStatus();
  int64_t outer = Product(data, 0, *axis).coef(), len = data[*axis].coef();
  int64_t inner = Product(data, *axis + 1, data.size()).coef();
  std::vector<SymDim> known;
  for (int64_t o = 0; o < outer; ++o) {
    for (const SymDim& j : *idx) {
      int64_t i = j.coef() < 0 ? j.coef() + len : j.coef();
      if (i < 0 || i >= len) return c.Error(absl::StrCat("index ", j.coef(), " is out of range"));
      for (int64_t e = 0; e < inner; ++e) known.push_back((*k)[(o * len + i) * inner + e]);
    }
  }
  if (known.size() <= kMaxKnown) c.SetKnown(0, std::move(known));
  return absl::OkStatus();
}

// Tile by repeats that follow from the input shapes (raft tiles a grid by the batch): attribute
// "repeats" holds -1 for such an axis, whose kernel loop takes output / input extent.
absl::Status SymbolicTile(InferContext& c, const std::vector<SymDim>& repeats) {
  if (static_cast<int>(repeats.size()) != c.in_rank(0)) {
    return c.Error("repeats must have one entry per dimension");
  }
  SymShape out;
  std::vector<int64_t> attr;
  for (int i = 0; i < c.in_rank(0); ++i) {
    const SymDim& r = repeats[i];
    if (r.IsStatic() ? r.coef() < 0 : !r.expr().IsProvablyNonNegative()) {
      return c.Error("negative repeat");
    }
    auto d = SymMulChecked(c.in_shape(0)[i], r);
    if (!d) return c.Error("repeated extent is too large");
    out.push_back(*d);
    attr.push_back(r.IsStatic() ? r.coef() : -1);
  }
  c.node().attrs["repeats"] = attr;
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Tile(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  if (c.has_input(1)) {
    if (auto known = c.Known(1, "repeats"); known.ok() && !StaticValues(*known).ok()) {
      return SymbolicTile(c, *known);
    }
  }
  auto repeats = IntsOperand(c, 1, "repeats");
  if (!repeats.ok()) return repeats.status();
  if (!*repeats || static_cast<int>(repeats->value().size()) != c.in_rank(0)) {
    return c.Error("repeats must have one entry per dimension");
  }
  SymShape out;
  for (int i = 0; i < c.in_rank(0); ++i) {
    int64_t r = repeats->value()[i];
    if (r < 0) return c.Error("negative repeat");
    out.push_back(SymMul(c.in_shape(0)[i], SymDim::Const(r)));
  }
  c.node().attrs["repeats"] = repeats->value();
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), out);
  if (const auto* k = c.in_rank(0) == 1 ? SmallKnown(c, 0) : nullptr;
      k != nullptr && !k->empty() && out[0].IsStatic() &&
      out[0].coef() <= static_cast<int64_t>(kMaxKnown)) {
    std::vector<SymDim> known;
    for (int64_t i = 0; i < out[0].coef(); ++i) known.push_back((*k)[i % k->size()]);
    if (known.size() <= kMaxKnown) c.SetKnown(0, std::move(known));
  }
  return absl::OkStatus();
}

absl::Status Expand(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  auto shape = c.Known(1, "shape");
  if (!shape.ok()) return shape.status();
  auto out = BroadcastShapes(c.in_shape(0), *shape);
  if (!out) {
    return c.Error(absl::StrCat("cannot expand ", SymShapeToString(c.in_shape(0)), " to ",
                                SymShapeToString(*shape)));
  }
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), *out);
  if (const auto* k = c.in_rank(0) <= 1 ? SmallKnown(c, 0) : nullptr;
      k != nullptr && out->size() == 1 && out->at(0).IsStatic() &&
      out->at(0).coef() <= static_cast<int64_t>(kMaxKnown)) {
    std::vector<SymDim> known;
    for (int64_t i = 0; i < out->at(0).coef(); ++i)
      known.push_back(k->size() == 1 ? (*k)[0] : (*k)[i]);
    c.SetKnown(0, std::move(known));
  }
  return absl::OkStatus();
}

// Pads that follow from the input shapes (swin's window padding (7 - W % 7) % 7, detection
// transforms' pad to a multiple of 32) over the padded `axes`: the node keeps its pads input,
// which its kernel reads at run time, and attribute "pad_axes" names the axes that input covers
// in order. Only constant mode (the others need every pad below the input's extent, unknown
// here), and every output extent must be provably non-negative.
absl::Status SymbolicPad(InferContext& c, const std::vector<SymDim>& pads,
                         const std::vector<int64_t>& axes) {
  Node& node = c.node();
  if (node.attr_string("mode", "constant") != "constant") {
    return absl::UnimplementedError(
        node.Describe() + ": pads that depend on a symbolic dimension need mode constant");
  }
  const size_t n = axes.size();
  SymShape out = c.in_shape(0);
  for (size_t j = 0; j < n; ++j) {
    auto total = SymAdd(pads[j], pads[j + n]);
    std::optional<SymDim> d = total ? SymAdd(out[axes[j]], *total) : std::nullopt;
    if (!d) return c.Error("pads are too large");
    if (d->IsStatic() ? d->coef() < 0 : !d->expr().IsProvablyNonNegative()) {
      return absl::UnimplementedError(
          absl::StrCat(node.Describe(), ": output extent ", d->ToString(), " may be negative"));
    }
    out[axes[j]] = *d;
  }
  node.attrs[attr::kPadAxes] = axes;
  node.attrs.erase("pads");
  node.attrs.erase("paddings");
  c.TruncateInputs(2);
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Pad(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 4); !s.ok()) return s;
  Node& node = c.node();
  int rank = c.in_rank(0);
  std::vector<int64_t> pads;
  if (c.num_inputs() == 1) {
    // Attribute form: opset < 11 (or already canonical).
    pads = node.has_attr("pads") ? node.attr_ints("pads") : node.attr_ints("paddings");
  } else {
    auto known = c.Known(1, "pads");
    if (!known.ok()) return known.status();
    float value = 0;
    if (c.has_input(2)) {
      auto v = c.ConstantInput(2, "constant_value");
      if (!v.ok()) return v.status();
      if ((*v)->num_elements() > 0) value = static_cast<float>((*v)->GetAsDouble(0));
    }
    node.attrs["value"] = value;
    std::vector<int64_t> axes(rank);
    for (int i = 0; i < rank; ++i) axes[i] = i;
    if (c.has_input(3)) {
      auto given = c.StaticInts(3, "axes");
      if (!given.ok()) return given.status();
      auto norm = NormalizeAxes(c, *given, rank);
      if (!norm.ok()) return norm.status();
      axes.assign(norm->begin(), norm->end());
    }
    if (known->size() != 2 * axes.size()) {
      return c.Error(c.has_input(3) ? "pads length differs from 2 * axes"
                                    : "pads length differs from 2 * rank");
    }
    auto values = StaticValues(*known);
    if (!values.ok()) return SymbolicPad(c, *known, axes);
    // Expanded to every axis.
    pads.assign(2 * rank, 0);
    for (size_t i = 0; i < axes.size(); ++i) {
      pads[axes[i]] = (*values)[i];
      pads[axes[i] + rank] = (*values)[i + axes.size()];
    }
  }
  if (static_cast<int>(pads.size()) != 2 * rank)
    return c.Error("pads length differs from 2 * rank");
  std::string mode = node.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap") {
    return c.Error("unknown mode " + mode);
  }
  SymShape out = c.in_shape(0);
  for (int i = 0; i < rank; ++i) {
    auto total = CheckedAdd(pads[i], pads[i + rank]);
    if (!total) return c.Error("pads are too large");
    auto d = SymAdd(out[i], SymDim::Const(*total));
    if (!d && out[i].IsStatic()) return c.Error("pads are too large");
    if (!d) return absl::UnimplementedError(node.Describe() + ": padding a symbolic dimension");
    if (d->IsStatic() && d->coef() < 0) return c.Error("negative output extent");
    out[i] = *d;
  }
  node.attrs.erase("paddings");
  node.attrs["pads"] = pads;
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

// DepthToSpace and SpaceToDepth on NCHW tensors.
absl::Status BlockRearrange(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 1); !s.ok()) return s;
  if (c.in_rank(0) != 4) return c.Error("expects a rank-4 input");
  int64_t bs = c.node().attr_int("blocksize", 0);
  if (bs <= 0) return c.Error("blocksize must be positive");
  bool to_space = c.node().op_type == "DepthToSpace";
  SymShape s = c.in_shape(0);
  SymDim bs2 = SymDim::Const(bs * bs);
  std::optional<SymDim> ch =
      to_space ? SymDiv(s[1], bs2) : std::optional<SymDim>(SymMul(s[1], bs2));
  std::optional<SymDim> h =
      to_space ? SymMul(s[2], SymDim::Const(bs)) : SymDiv(s[2], SymDim::Const(bs));
  std::optional<SymDim> w =
      to_space ? SymMul(s[3], SymDim::Const(bs)) : SymDiv(s[3], SymDim::Const(bs));
  bool exact = to_space ? ch && SymMul(*ch, bs2) == s[1]
                        : h && w && SymMul(*h, SymDim::Const(bs)) == s[2] &&
                              SymMul(*w, SymDim::Const(bs)) == s[3];
  if (!exact) return c.Error("dimensions are not divisible by the block size");
  if (to_space) {
    std::string mode = c.node().attr_string("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") return c.Error("unknown mode " + mode);
  }
  c.SetOutput(0, c.in_dtype(0), {s[0], *ch, *h, *w});
  return absl::OkStatus();
}

absl::Status ScatterND(InferContext& c) {
  if (auto s = c.ExpectInputs(3, 3); !s.ok()) return s;
  const SymShape& data = c.in_shape(0);
  const SymShape& idx = c.in_shape(1);
  if (idx.empty() || !idx.back().IsStatic() ||
      idx.back().coef() > static_cast<int64_t>(data.size())) {
    return c.Error("indices' last dimension must be a static value <= data rank");
  }
  SymShape upd(idx.begin(), idx.end() - 1);
  upd.insert(upd.end(), data.begin() + idx.back().coef(), data.end());
  if (!(upd == c.in_shape(2)))
    return c.Error("updates shape " + SymShapeToString(c.in_shape(2)) + " should be " +
                   SymShapeToString(upd));
  std::string red = c.node().attr_string("reduction", "none");
  if (red != "none" && red != "add" && red != "mul" && red != "max" && red != "min") {
    return c.Error("unknown reduction " + red);
  }
  c.SetOutput(0, c.in_dtype(0), data);
  return absl::OkStatus();
}

absl::Status Trilu(InferContext& c) {
  if (auto s = c.ExpectInputs(1, 2); !s.ok()) return s;
  if (c.in_rank(0) < 2) return c.Error("expects rank >= 2");
  if (c.has_input(1) && SymNumElements(c.in_shape(1)) != SymDim::Const(1))
    return c.Error("k must be a scalar");
  c.SetOutput(0, c.in_dtype(0), c.in_shape(0));
  return absl::OkStatus();
}

// floor (or round) of scale * extent as an output extent; InvalidArgument when the scale is not a
// finite non-negative number or the extent is too large (converting such doubles to int64 is
// undefined).
absl::StatusOr<int64_t> ScaledExtent(InferContext& c, double scale, int64_t extent, bool round) {
  double v = scale * static_cast<double>(extent);
  v = round ? std::round(v) : std::floor(v);
  if (!std::isfinite(scale) || scale < 0 || !(v >= 0)) {
    return c.Error(absl::StrCat("scale ", scale, " is not a finite non-negative number"));
  }
  if (v > static_cast<double>(kMaxTensorBytes)) return c.Error("output is too large");
  return static_cast<int64_t>(v);
}

// Resize (opset 10+) and Upsample, canonicalised to: one input; attributes mode ("nearest",
// "linear", "cubic"), coordinate_transformation_mode, nearest_mode, "scales" (full rank, only when
// given as scales; code generation derives output/input otherwise) and "roi" (full rank pairs,
// only for tf_crop_and_resize).
absl::Status Resize(InferContext& c) {
  Node& node = c.node();
  int rank = c.in_rank(0);
  const SymShape& in = c.in_shape(0);
  bool legacy = node.op_type == "Upsample" || node.opset < 11;
  std::string mode = node.attr_string("mode", "nearest");
  if (mode == "bilinear" || mode == "trilinear") mode = "linear";
  if (mode != "nearest" && mode != "linear" && mode != "cubic")
    return c.Error("unknown mode " + mode);
  if (node.attr_int("antialias", 0) != 0)
    return absl::UnimplementedError(node.Describe() + ": antialias");
  if (legacy) {
    node.attrs["coordinate_transformation_mode"] = std::string("asymmetric");
    node.attrs["nearest_mode"] = std::string("floor");
  }
  std::string ctm = node.attr_string("coordinate_transformation_mode", "half_pixel");
  std::vector<float> scales;
  std::optional<std::vector<SymDim>> sizes;
  std::vector<float> roi;
  if (legacy && c.num_inputs() == 1) {
    scales = node.attr_floats("scales");
  } else {
    size_t scales_at = legacy ? 1 : 2;
    if (!legacy && ctm == "tf_crop_and_resize" && c.has_input(1)) {
      auto t = c.ConstantInput(1, "roi");
      if (!t.ok()) return t.status();
      for (int64_t i = 0; i < (*t)->num_elements(); ++i)
        roi.push_back(static_cast<float>((*t)->GetAsDouble(i)));
    }
    if (c.has_input(scales_at) && SymNumElements(c.in_shape(scales_at)) != SymDim::Const(0)) {
      auto t = c.ConstantInput(scales_at, "scales");
      if (!t.ok()) return t.status();
      for (int64_t i = 0; i < (*t)->num_elements(); ++i)
        scales.push_back(static_cast<float>((*t)->GetAsDouble(i)));
    } else if (!legacy && c.has_input(3)) {
      auto s = c.Known(3, "sizes");
      if (!s.ok()) return s.status();
      sizes = *s;
    }
  }
  // Opset 18: scales/sizes/roi may cover only `axes`; expand them to full rank.
  std::vector<int64_t> axes = node.attr_ints("axes");
  if (!axes.empty()) {
    auto norm = NormalizeAxes(c, axes, rank);
    if (!norm.ok()) return norm.status();
    size_t n = norm->size();
    std::vector<float> full_scales(scales.empty() ? 0 : rank, 1.0f), full_roi;
    std::vector<SymDim> full_sizes = in;
    if (!roi.empty()) {
      if (roi.size() != 2 * n) return c.Error("roi length differs from 2 * axes");
      full_roi.assign(2 * rank, 0.0f);
      std::fill(full_roi.begin() + rank, full_roi.end(), 1.0f);
    }
    for (size_t i = 0; i < n; ++i) {
      int a = (*norm)[i];
      if (i < scales.size()) full_scales[a] = scales[i];
      if (sizes && i < sizes->size()) full_sizes[a] = (*sizes)[i];
      if (!roi.empty()) {
        full_roi[a] = roi[i];
        full_roi[a + rank] = roi[i + n];
      }
    }
    scales = full_scales;
    if (sizes) sizes = full_sizes;
    roi = full_roi;
    node.attrs.erase("axes");
  }
  if (!scales.empty() && static_cast<int>(scales.size()) != rank)
    return c.Error("scales length differs from the rank");
  if (sizes && static_cast<int>(sizes->size()) != rank)
    return c.Error("sizes length differs from the rank");
  if (!roi.empty() && static_cast<int>(roi.size()) != 2 * rank)
    return c.Error("roi length differs from 2 * rank");
  if (scales.empty() && !sizes) return c.Error("neither scales nor sizes is given");
  // keep_aspect_ratio_policy (opset 18): one scale for every resized axis.
  std::string policy = node.attr_string("keep_aspect_ratio_policy", "stretch");
  if (sizes && policy != "stretch") {
    double scale = policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0;
    for (int a = 0; a < rank; ++a) {
      if ((*sizes)[a] == in[a]) continue;
      auto s = StaticDim(c, (*sizes)[a], "keep_aspect_ratio_policy");
      auto d = StaticDim(c, in[a], "keep_aspect_ratio_policy");
      if (!s.ok() || !d.ok()) return s.ok() ? d.status() : s.status();
      double r = static_cast<double>(*s) / static_cast<double>(*d);
      scale = policy == "not_larger" ? std::min(scale, r) : std::max(scale, r);
    }
    for (int a = 0; a < rank; ++a) {
      if ((*sizes)[a] == in[a]) continue;
      auto d = ScaledExtent(c, scale, in[a].coef(), /*round=*/true);
      if (!d.ok()) return d.status();
      (*sizes)[a] = SymDim::Const(*d);
    }
  }
  SymShape out(rank);
  for (int a = 0; a < rank; ++a) {
    if (sizes) {
      // Symbolic sizes are fine: the kernel takes the scale as output / input length at run time.
      out[a] = (*sizes)[a];
    } else if (scales[a] == 1.0f) {
      out[a] = in[a];
    } else if (!in[a].IsStatic()) {
      // floor(in * scale) for a scale p / q with q a small power of two (exact in float, so the
      // expression agrees with ONNX's float arithmetic), from the modes that need no static size.
      const bool dynamic_ok =
          (mode == "nearest" || mode == "linear") &&
          (ctm == "asymmetric" || ctm == "half_pixel" || ctm == "tf_half_pixel_for_nn");
      std::optional<SymDim> scaled;
      for (int64_t q = 1; q <= 16 && dynamic_ok && !scaled; q *= 2) {
        const double pq = static_cast<double>(scales[a]) * static_cast<double>(q);
        if (pq < 1 || pq > 1024 || pq != static_cast<double>(static_cast<int64_t>(pq))) continue;
        scaled =
            SymFloorDiv(SymMul(in[a], SymDim::Const(static_cast<int64_t>(pq))), SymDim::Const(q));
      }
      if (!scaled) {
        return absl::UnimplementedError(absl::StrCat(
            node.Describe(), ": resizing the symbolic dimension ", in[a].ToString(),
            " needs mode nearest or linear, coordinate_transformation_mode asymmetric, "
            "half_pixel or tf_half_pixel_for_nn, and a scale p/q with q a power of two <= 16"));
      }
      out[a] = *scaled;
    } else {
      auto d = StaticDim(c, in[a], "resizing");
      if (!d.ok()) return d.status();
      auto extent = ScaledExtent(c, scales[a], *d, /*round=*/false);
      if (!extent.ok()) return extent.status();
      out[a] = SymDim::Const(*extent);
    }
    // Every output element reads at least one input element along each axis.
    if (!(out[a] == SymDim::Const(0)) && in[a] == SymDim::Const(0)) {
      return c.Error(absl::StrCat("cannot resize the empty axis ", a, " to a non-empty one"));
    }
  }
  node.attrs["mode"] = mode;
  if (!scales.empty()) {
    node.attrs["scales"] = scales;
  } else {
    node.attrs.erase("scales");
  }
  if (ctm == "tf_crop_and_resize") {
    if (roi.empty()) return c.Error("tf_crop_and_resize needs roi");
    node.attrs["roi"] = roi;
  }
  c.TruncateInputs(1);
  c.SetOutput(0, c.in_dtype(0), out);
  return absl::OkStatus();
}

}  // namespace

void RegisterMovementShapes(OpTable& r) {
  r.DefineShape("Transpose", Transpose).Batch(BatchClass::kTranspose);
  r.DefineShape("Concat", Concat).Batch(BatchClass::kConcat);
  r.DefineShape("Split", Split).Batch(BatchClass::kAlongAxis);
  r.DefineShape("Slice", Slice).Batch(BatchClass::kMovement);
  r.DefineShape("Gather", Gather).Batch(BatchClass::kGather);
  r.DefineShape("Tile", Tile).Batch(BatchClass::kMovement).Attributes({"repeats"});
  r.DefineShape("Expand", Expand)
      .Batch(BatchClass::kMovement)
      .BatchShapeOperandsFrom(1)
      .BatchFill();
  r.DefineShape("Pad", Pad).Batch(BatchClass::kMovement);
  r.DefineShape("DepthToSpace", BlockRearrange).Batch(BatchClass::kBatchLeading);
  r.DefineShape("SpaceToDepth", BlockRearrange).Batch(BatchClass::kBatchLeading);
  r.DefineShape("ScatterND", ScatterND).Batch(BatchClass::kMixes);
  r.DefineShape("Trilu", Trilu).Batch(BatchClass::kMovement);
  r.DefineShape("Resize", Resize).Batch(BatchClass::kBatchLeading).Attributes({"roi", "scales"});
  r.DefineShape("Upsample", Resize)
      .Batch(BatchClass::kBatchLeading)
      .Attributes({"coordinate_transformation_mode", "nearest_mode"});
}

}  // namespace cuvil::ir
